// GPT-2's byte-level BPE tokenizer (OpenAI's encoder.py, Hugging Face's GPT2Tokenizer).
//
//   auto tok = xgrad::text::BPETokenizer::load("gpt2/");   // tokenizer.json, vocab.json + merges.txt
//                                                          // or encoder.json + vocab.bpe
//   std::vector<std::int64_t> ids = tok.encode("Hello world");          // {15496, 995}
//   std::string text = tok.decode(ids);                                   // "Hello world"
//   tok.encode("a<|endoftext|>", xgrad::text::Special::all);            // {64, 50256}
//
// Encoding: the text (any bytes) is cut by GPT-2's pattern (pretokenizer.hpp); each piece's bytes
// become the byte tokens of GPT-2's bytes_to_unicode table, which are merged pair by pair, the
// pair of lowest merge rank first, every occurrence of it left to right, until no pair of the
// piece has a rank. Decoding concatenates the tokens' bytes, so decode(encode(x)) == x for every
// byte string x, valid UTF-8 or not.
//
// Special tokens (GPT-2's `<|endoftext|>`, tokenizer.json's added tokens): plain `encode(text)`
// treats their text as ordinary text, as OpenAI's encoder.py, gpt-3-encoder and tiktoken's
// `encode_ordinary` do, so that text from users never turns into control tokens. With
// `Special::all` (or a list of allowed names, tiktoken's `allowed_special`) each occurrence
// becomes its id, as Hugging Face's tokenizers do for added tokens; where two overlap, the one
// that starts first wins, and of those the longest.
//
// Files (read by one loader; trained tokenizers are saved in the same format):
//  - encoder.json / vocab.json: {"token": id, ...}, tokens written in GPT-2's byte alphabet
//    ("Ġ" is the space byte). Ids must be 0 .. N-1, each once. `<|endoftext|>` is special when
//    present (GPT-2's convention).
//  - vocab.bpe / merges.txt: an optional "#version" line, then one merge "left right" per line,
//    in rank order; both parts and their concatenation must be tokens of the vocabulary.
//  - tokenizer.json: model.type "BPE" with model.vocab and model.merges (strings "a b" or pairs),
//    a ByteLevel pre-tokenizer, and added_tokens (special). Other model types, normalizers,
//    pre-tokenizers or BPE options that would change the result are refused by name.
// Every single byte must have its token. A malformed file throws xgrad::FormatError naming the
// file and the key or line; a missing file, std::runtime_error naming it.
//
// Thread safety: a tokenizer may encode and decode on several threads at once (its cache of
// merged pieces is guarded); copies share that cache.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include <xgrad/text/pretokenizer.hpp>

namespace xgrad::text {

namespace detail {
struct BPETables;  // the lookup tables, built once and shared by copies
struct BPECache;   // merged pieces, shared by copies
}  // namespace detail

// GPT-2's bytes_to_unicode: the printable byte b maps to the character U+00b, the other 68 bytes
// (0-32, 127-160, 173) to U+0100.. in order. Returns each byte's character, UTF-8 encoded.
const std::vector<std::string>& bytes_to_unicode();
// A token's bytes from its text in that alphabet ("Ġthe" -> " the"); throws std::invalid_argument
// when a character is not in the alphabet.
std::string bytes_from_unicode(std::string_view token);
// The same without throwing: false (and `out` unspecified) when a character is not in the alphabet.
bool bytes_from_unicode(std::string_view token, std::string& out);
// The inverse: "\n the" -> "ĊĠthe".
std::string unicode_from_bytes(std::string_view bytes);

enum class Special {
  none,  // special tokens' text is ordinary text (encoder.py, tiktoken's encode_ordinary)
  all,   // every special token's text becomes its id (Hugging Face's tokenizers)
};

using Merge = std::pair<std::string, std::string>;

class BPETokenizer {
 public:
  // From memory: `tokens[id]` is the token's text in GPT-2's byte alphabet, `merges` in rank
  // order, `special` the names of special tokens (each must be one of `tokens`). Bad input throws
  // std::invalid_argument, naming the token or merge.
  BPETokenizer(std::vector<std::string> tokens, std::vector<Merge> merges, std::vector<std::string> special = {});

  // encoder.json (vocab.json) + vocab.bpe (merges.txt).
  static BPETokenizer from_files(const std::string& encoder_json, const std::string& vocab_bpe);
  // tokenizer.json (Hugging Face's tokenizers).
  static BPETokenizer from_tokenizer_json(const std::string& path);
  // A folder: tokenizer.json, else vocab.json + merges.txt, else encoder.json + vocab.bpe.
  static BPETokenizer load(const std::string& folder);
  // The same formats from bytes in memory; `name` stands for the file in error messages.
  static BPETokenizer from_json_and_merges(std::string_view encoder_json, std::string_view vocab_bpe,
                                           const std::string& json_name = "encoder.json",
                                           const std::string& merges_name = "vocab.bpe");
  static BPETokenizer from_tokenizer_json_bytes(std::string_view bytes, const std::string& name = "tokenizer.json");
  // A tokenizer.json already parsed (parse_json of base/json_input.hpp).
  static BPETokenizer from_parsed_tokenizer_json(const nlohmann::json& root,
                                                 const std::string& name = "tokenizer.json");
  // True when a parsed tokenizer.json is GPT-2's byte-level BPE as this class runs it: no
  // normalizer, one ByteLevel pre-tokenizer without a prefix space and with GPT-2's pattern, no
  // post-processor or decoder but ByteLevel ones, no byte fallback (what tokenizer_json() writes,
  // and GPT-2's own file). Other BPE files are for HFTokenizer (tokenizer_json.hpp).
  static bool is_gpt2_tokenizer_json(const nlohmann::json& root);

  // Writes encoder.json + vocab.bpe (each atomically: a failed save leaves the previous file).
  void save(const std::string& encoder_json, const std::string& vocab_bpe) const;
  // Writes `folder`/encoder.json and `folder`/vocab.bpe (the folder must exist).
  void save(const std::string& folder) const;
  std::string encoder_json() const;  // the files' contents
  // The tokenizer as one Hugging Face tokenizer.json (model.type "BPE", GPT-2's ByteLevel
  // pre-tokenizer and decoder, the special tokens as added_tokens), which from_tokenizer_json and
  // Hugging Face's tokenizers read.
  std::string tokenizer_json() const;
  std::string vocab_bpe() const;

  std::vector<std::int64_t> encode(std::string_view text, Special special = Special::none) const;
  // Only the special tokens named in `allowed` are recognized (tiktoken's allowed_special); each
  // must be a special token of this tokenizer.
  std::vector<std::int64_t> encode(std::string_view text, const std::vector<std::string>& allowed) const;
  // The bytes of `ids` concatenated (special tokens give their text). An id outside
  // [0, vocab_size()) throws std::invalid_argument naming it and its position.
  std::string decode(const std::vector<std::int64_t>& ids) const;

  std::size_t vocab_size() const { return tokens_.size(); }
  const std::string& token(std::int64_t id) const;  // in the byte alphabet; throws for a bad id
  std::string token_bytes(std::int64_t id) const;   // its bytes
  std::int64_t id(std::string_view token) const;    // -1 when absent
  const std::vector<std::string>& tokens() const { return tokens_; }
  const std::vector<Merge>& merges() const { return merges_; }
  // name -> id, e.g. {"<|endoftext|>": 50256}
  const std::map<std::string, std::int64_t>& special_tokens() const { return special_; }

 private:
  void encode_ordinary(std::string_view text, std::vector<std::int64_t>& out) const;
  void encode_with(std::string_view text, const std::vector<std::pair<std::string, std::int64_t>>& allowed,
                   std::vector<std::int64_t>& out) const;

  std::vector<std::string> tokens_;
  std::vector<Merge> merges_;
  std::map<std::string, std::int64_t> special_;
  std::shared_ptr<const detail::BPETables> tables_;
  std::shared_ptr<detail::BPECache> cache_;
  Pretokenizer pretokenizer_;
};

namespace detail {
// The merges of one piece, given its byte tokens: every occurrence of the lowest-ranked pair
// merged left to right, again until no pair has a rank (encoder.py's loop, O(n log n) with a
// heap). `rank_of(a, b)` gives {rank, merged id}, or rank -1 when (a, b) is not a merge. Exposed
// for the tests, which check it against encoder.py's loop written literally.
struct MergeRule {
  std::int64_t rank;
  std::int32_t merged;
};
std::vector<std::int32_t> bpe_merge(std::vector<std::int32_t> symbols,
                                    MergeRule (*rank_of)(const void* context, std::int32_t a, std::int32_t b),
                                    const void* context);
}  // namespace detail

}  // namespace xgrad::text
