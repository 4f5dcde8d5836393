// Strict UTF-8 (RFC 3629, as Python's decoder): no overlong form, no surrogate (U+D800..U+DFFF),
// nothing past U+10FFFF, no stray continuation byte, no truncated sequence.
//
//   std::u32string chars = xgrad::text::decode_utf8(bytes, "notes.txt");
//   std::string bytes = xgrad::text::encode_utf8(chars);
//
// A text that is not UTF-8 throws Utf8Error, whose message names the text, the byte offset and
// the line of the first bad sequence, and what was found there:
//   "notes.txt is not UTF-8: at byte offset 5 (line 2), the byte 0xE9 starts a 3-byte character
//    but is followed by 0x20"
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <xgrad/serialize/format_error.hpp>

namespace xgrad::text {

class Utf8Error : public FormatError {
 public:
  Utf8Error(const std::string& message, std::uint64_t offset, std::uint64_t line)
      : FormatError(message), offset_(offset), line_(line) {}
  std::uint64_t offset() const { return offset_; }  // of the first byte of the bad sequence
  std::uint64_t line() const { return line_; }      // 1-based

 private:
  std::uint64_t offset_, line_;
};

// Checks that `bytes` is UTF-8 and returns how many code points it holds. `name` names the text in
// the error; `offset` and `line` are those of bytes[0] in a larger text (a file read in pieces).
std::size_t check_utf8(std::string_view bytes, const std::string& name, std::uint64_t offset = 0,
                       std::uint64_t line = 1);
// The code points of `bytes` (checked as check_utf8).
std::u32string decode_utf8(std::string_view bytes, const std::string& name = "the text");
// Code points -> UTF-8. A surrogate or a value past U+10FFFF throws std::invalid_argument.
std::string encode_utf8(std::u32string_view chars);
std::string encode_utf8(char32_t c);
// "U+00E9".
std::string code_point_name(char32_t c);

// Regular expressions' `\w` and `\s` as Rust's regex crate reads them (Hugging Face's tokenizers
// use them to tell where an added token's word ends and which spaces it strips). A word character
// is Alphabetic, a mark, a decimal digit, a connector punctuation (`_`) or a joiner (U+200C,
// U+200D); white space is Unicode's White_Space property (the table of pretokenizer.cpp).
bool is_word_character(char32_t c);
bool is_white_space(char32_t c);

// Unicode's normalization forms (UAX #15), as tokenizer.json's normalizers name them.
enum class NormalizationForm { NFC, NFD, NFKC, NFKD };
// `text` (valid UTF-8; otherwise std::invalid_argument) in that form, by utf8proc (Debian's
// libutf8proc-dev): the Unicode tables come from a library made for them.
std::string normalize_unicode(std::string_view text, NormalizationForm form);

}  // namespace xgrad::text
