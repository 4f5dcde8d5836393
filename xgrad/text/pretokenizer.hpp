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

#include <memory>
#include <string_view>
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

}  // namespace xgrad::text
