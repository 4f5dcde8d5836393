// GPT-2's pre-tokenization: the text is cut into pieces by OpenAI's pattern (encoder.py)
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// and byte-pair merges never cross a piece. The pattern runs in PCRE2 (Debian's libpcre2-dev,
// JIT-compiled when the platform allows), with Unicode properties (PCRE2_UTF | PCRE2_UCP).
//
// Exactly as Python's `regex` module runs it for GPT-2 (and Hugging Face's tokenizers, whose Rust
// regex agrees): `\s` is Unicode's White_Space property, written out as a class, because PCRE2's
// own `\s` under PCRE2_UCP is "category Z or \t\n\v\f\r" and misses U+0085 (NEXT LINE).
//
// Any bytes come in. Text that is not valid UTF-8 is split as Python splits
// `data.decode("utf-8", "surrogateescape")`: each byte that is not part of a well-formed UTF-8
// sequence counts as one character of category "other" (neither a letter, a number nor white
// space), so it joins a run of punctuation (" ?[^\s\p{L}\p{N}]+"), and the pieces are the
// original bytes. The pieces always concatenate to the input.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace xgrad::text {

// The pattern above, as encoder.py writes it.
inline constexpr const char* kGPT2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// True when `bytes` is well-formed UTF-8 (Unicode's table 3-7: no overlong forms, no surrogates,
// nothing above U+10FFFF).
bool is_valid_utf8(std::string_view bytes);

// The compiled GPT-2 pattern. Immutable after construction: one instance may split texts on
// several threads at once. Copies share the compiled pattern.
class Pretokenizer {
 public:
  Pretokenizer();

  // The pieces of `text`, in order, as views into it; they concatenate to `text`.
  std::vector<std::string_view> split(std::string_view text) const;
  // The same, appended to `pieces` (which is not cleared).
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

 private:
  struct Compiled;
  std::shared_ptr<const Compiled> compiled_;
};

// A pattern of a tokenizer.json (a Split pre-tokenizer's or a Replace's), run by PCRE2 as Hugging
// Face's tokenizers run it with Oniguruma: UTF-8, Unicode properties, `\s` and `\S` as Unicode's
// White_Space property (as in GPT-2's pattern above). A literal (a {"String": ...} pattern) is
// found as plain text. Immutable: one instance may search on several threads at once.
class Regex {
 public:
  // Throws std::invalid_argument naming the pattern and PCRE2's reason when it does not compile
  // (or has `\S` inside a character class, which has no PCRE2 spelling here).
  explicit Regex(std::string pattern, bool literal = false);

  // The matches in valid UTF-8 `text`, in order, as [begin, end) byte offsets, appended to
  // `matches`. As Oniguruma's find_iter: an empty match right after the previous match is
  // skipped (the search moves one character on). Throws std::runtime_error when PCRE2 gives up
  // (a resource limit), naming the pattern.
  void find_all(std::string_view text, std::vector<std::pair<std::size_t, std::size_t>>& matches) const;
  // The same, each match given to `match(begin, end)` as it is found.
  void for_each_match(std::string_view text, const std::function<void(std::size_t, std::size_t)>& match) const;
  const std::string& pattern() const { return pattern_; }

 private:
  struct Compiled;
  std::string pattern_;
  bool literal_;
  std::shared_ptr<const Compiled> compiled_;
};

}  // namespace xgrad::text
