// Internal to xgrad/text: the steps of a tokenizer.json (tokenizer_json.hpp), each as Hugging Face's
// tokenizers library runs it (tokenizers/src/{normalizers,pre_tokenizers,models/bpe,processors,
// decoders}). tokenizer_json.cpp reads them from the file; tokenizer_json_steps.cpp runs them.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <xgrad/text/bpe.hpp>
#include <xgrad/text/pretokenizer.hpp>
#include <xgrad/text/utf8.hpp>

namespace xgrad::text::hf {

// A normalizer step (a Sequence is flattened into its steps).
struct Normalizer {
  enum class Kind { prepend, replace, unicode } kind = Kind::unicode;
  std::string text;                      // prepend: the prefix; replace: the content
  std::shared_ptr<const Regex> pattern;  // replace
  NormalizationForm form = NormalizationForm::NFC;
};
void normalize(const std::vector<Normalizer>& steps, std::string& text);

// One piece of text on its way to the model, a view valid while the sink that gets it runs.
// `first`: it starts where the original text starts (Metaspace's prepend_scheme "first").
struct Piece {
  std::string_view text;
  bool first = false;
};

// Hugging Face's SplitDelimiterBehavior.
enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

// A pre-tokenizer step (a Sequence is flattened into its steps).
struct PreTokenizer {
  enum class Kind { split, byte_level, metaspace } kind = Kind::split;
  std::shared_ptr<const Regex> pattern;  // split
  SplitBehavior behavior = SplitBehavior::isolated;
  bool invert = false;
  bool add_prefix_space = false;  // byte_level
  bool use_regex = true;
  std::string replacement;  // metaspace: the character, UTF-8
  enum class Prepend { always, first, never } prepend = Prepend::always;
  bool split = true;
};
// Runs the steps on `piece` depth first, calling sink(piece) for each final piece in order (no
// list of a whole text's pieces is ever built).
void pre_tokenize(const std::vector<PreTokenizer>& steps, const Piece& piece,
                  const std::function<void(const Piece&)>& sink);

// The BPE model.
struct BPEModel {
  std::unordered_map<std::string, std::int32_t> vocab;
  std::unordered_map<std::uint64_t, detail::MergeRule> merges;  // (left id << 32 | right id)
  std::array<std::int32_t, 256> byte_ids{};                     // <0xNN>, -1 when absent
  std::int32_t unk = -1;
  bool fuse_unk = false, byte_fallback = false, ignore_merges = false;

  detail::MergeRule rank_of(std::int32_t a, std::int32_t b) const;
  // The ids of one pre-token (BPE.tokenize).
  void tokenize(std::string_view word, std::vector<std::int32_t>& out) const;
};

// An added token and the options that change where it matches (added_tokens[i] of the file).
struct AddedToken {
  std::string content;
  std::int32_t id = -1;
  bool single_word = false;  // only where no word character touches it on either side
  bool lstrip = false;       // takes the white space before it
  bool rstrip = false;       // takes the white space after it
};

// Added tokens found leftmost, then longest (aho-corasick's LeftmostLongest), split out of a text
// as AddedVocabulary::find_matches does.
class AddedTokenMatcher {
 public:
  void add(AddedToken token);
  bool empty() const { return count_ == 0; }
  // Calls piece(part, -1, offset) for each stretch of `text` (valid UTF-8) between added tokens and
  // piece(part, id, offset) for each added token, `part` its match with the white space it strips,
  // in order. A single_word match touching a word character is skipped, and the search goes on
  // after it (find_iter's matches never overlap); lstrip takes no space an earlier token took.
  void split(std::string_view text,
             const std::function<void(std::string_view, std::int32_t, std::size_t)>& piece) const;

 private:
  // The first match at or after `from`, or nullptr.
  const AddedToken* find(std::string_view text, std::size_t from, std::size_t& at) const;

  std::array<std::vector<AddedToken>, 256> by_first_byte_;  // longest first
  std::size_t count_ = 0;
};

// A decoder step (a Sequence is flattened into its steps).
struct Decoder {
  enum class Kind { byte_level, replace, byte_fallback, fuse, strip, metaspace } kind = Kind::byte_level;
  std::shared_ptr<const Regex> pattern;  // replace
  std::string content;                   // replace: the new text; strip: the character
  std::size_t start = 0, stop = 0;       // strip
  std::string replacement;               // metaspace
  bool prepend = true;                   // metaspace: prepend_scheme is not "never"
};
// The decoders' decode_chain in turn, then the tokens joined.
std::string decode(const std::vector<Decoder>& steps, std::vector<std::string> tokens);

// Everything a tokenizer.json describes, read and checked.
struct Pipeline {
  std::vector<std::string> tokens;                          // by id (model and added); "" where an id has none
  std::vector<char> has_token;                              // by id
  std::vector<char> special;                                // by id: an added token with special: true
  std::unordered_map<std::string, std::int32_t> added_ids;  // added tokens by content
  AddedTokenMatcher raw_added;                              // normalized: false
  AddedTokenMatcher normalized_added;
  std::vector<Normalizer> normalizers;
  std::vector<PreTokenizer> pre_tokenizers;
  BPEModel model;
  std::vector<std::int32_t> before, after;  // the post-processor's template around the text
  bool has_decoder = false;
  std::vector<Decoder> decoders;
  std::shared_ptr<detail::BPECache> cache;
};

// Bytes as Rust's String::from_utf8_lossy reads them: each maximal ill-formed part becomes U+FFFD.
std::string utf8_lossy(std::string_view bytes);

}  // namespace xgrad::text::hf
