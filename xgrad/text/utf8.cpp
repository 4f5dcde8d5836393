#include <xgrad/text/utf8.hpp>

#include <utf8proc.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>

namespace xgrad::text {

namespace {

std::string hex_bytes(std::string_view s, std::size_t i, std::size_t n) {
  std::string out;
  for (std::size_t k = i; k < std::min(s.size(), i + n); ++k) {
    char h[8];
    std::snprintf(h, sizeof h, "%s0x%02X", k > i ? " " : "", unsigned(static_cast<unsigned char>(s[k])));
    out += h;
  }
  return out;
}

// Decodes the sequence at s[i]: its code point and length, or an empty `found` describing what is
// wrong (the message's tail).
struct Decoded {
  char32_t c = 0;
  std::size_t n = 0;
  std::string found;  // empty: valid
};

Decoded decode_one(std::string_view s, std::size_t i) {
  const unsigned char b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return {b, 1, {}};
  // The length a lead byte announces (C0, C1 and F5..F7 only start sequences refused below).
  const std::size_t n = (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
  Decoded d{char32_t(n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07)), n, {}};
  if (n == 0) {
    d.found = (b >> 6) == 2 ? "the byte " + hex_bytes(s, i, 1) + ", a continuation byte with no character to continue"
                            : "the byte " + hex_bytes(s, i, 1) + ", which UTF-8 never uses";
    return d;
  }
  for (std::size_t k = 1; k < n; ++k) {
    if (i + k >= s.size()) {
      d.found = "the byte " + hex_bytes(s, i, 1) + " starts a " + std::to_string(n) +
                "-byte character but the text ends after " + std::to_string(k);
      return d;
    }
    if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) {
      d.found = "the byte " + hex_bytes(s, i, 1) + " starts a " + std::to_string(n) +
                "-byte character but is followed by " + hex_bytes(s, i + k, 1);
      return d;
    }
    d.c = (d.c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  }
  const char32_t least = n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;
  if (d.c < least)
    d.found = "an overlong encoding of " + code_point_name(d.c) + " (" + hex_bytes(s, i, n) + ")";
  else if (d.c >= 0xD800 && d.c <= 0xDFFF)
    d.found = "the surrogate " + code_point_name(d.c) + " (" + hex_bytes(s, i, n) + "), which is not a character";
  else if (d.c > 0x10FFFF)
    d.found = code_point_name(d.c) + " (" + hex_bytes(s, i, n) + "), beyond the last code point U+10FFFF";
  return d;
}

template <class Emit>
std::size_t walk(std::string_view s, const std::string& name, std::uint64_t offset, std::uint64_t line, Emit emit) {
  std::size_t count = 0;
  for (std::size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {  // the ASCII fast path
      emit(char32_t(static_cast<unsigned char>(s[i]))), ++i, ++count;
      continue;
    }
    const Decoded d = decode_one(s, i);
    if (!d.found.empty()) {
      const auto lines = std::uint64_t(std::count(s.begin(), s.begin() + std::ptrdiff_t(i), '\n'));
      throw Utf8Error(name + " is not UTF-8: at byte offset " + std::to_string(offset + i) + " (line " +
                          std::to_string(line + lines) + "), " + d.found,
                      offset + i, line + lines);
    }
    emit(d.c), i += d.n, ++count;
  }
  return count;
}

}  // namespace

std::string code_point_name(char32_t c) {
  char h[16];
  std::snprintf(h, sizeof h, "U+%04X", unsigned(c));
  return h;
}

std::size_t check_utf8(std::string_view bytes, const std::string& name, std::uint64_t offset, std::uint64_t line) {
  return walk(bytes, name, offset, line, [](char32_t) {});
}

std::u32string decode_utf8(std::string_view bytes, const std::string& name) {
  std::u32string out;
  out.reserve(bytes.size());
  walk(bytes, name, 0, 1, [&out](char32_t c) { out.push_back(c); });
  return out;
}

std::string encode_utf8(char32_t c) {
  std::string out;
  if (c < 0x80) {
    out += char(c);
  } else if (c < 0x800) {
    out += char(0xC0 | (c >> 6)), out += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    if (c >= 0xD800 && c <= 0xDFFF)
      throw std::invalid_argument("encode_utf8: the surrogate " + code_point_name(c) + " is not a character");
    out += char(0xE0 | (c >> 12)), out += char(0x80 | ((c >> 6) & 0x3F)), out += char(0x80 | (c & 0x3F));
  } else if (c <= 0x10FFFF) {
    out += char(0xF0 | (c >> 18)), out += char(0x80 | ((c >> 12) & 0x3F));
    out += char(0x80 | ((c >> 6) & 0x3F)), out += char(0x80 | (c & 0x3F));
  } else {
    throw std::invalid_argument("encode_utf8: " + code_point_name(c) + " is beyond the last code point U+10FFFF");
  }
  return out;
}

std::string encode_utf8(std::u32string_view chars) {
  std::string out;
  out.reserve(chars.size());
  for (char32_t c : chars) out += encode_utf8(c);
  return out;
}

bool is_word_character(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  if (c == 0x200C || c == 0x200D) return true;  // Join_Control
  // Other_Alphabetic outside the marks: the circled and squared Latin letters (category So).
  if ((c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) || (c >= 0x1F150 && c <= 0x1F169) ||
      (c >= 0x1F170 && c <= 0x1F189))
    return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_NL:  // letter numbers (Roman numerals) are Alphabetic
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string normalize_unicode(std::string_view text, NormalizationForm form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalizationForm::NFC:
      options |= UTF8PROC_COMPOSE;
      break;
    case NormalizationForm::NFD:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case NormalizationForm::NFKC:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case NormalizationForm::NFKD:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  if (text.empty()) return {};
  // With an explicit length (not UTF8PROC_NULLTERM) a NUL is a character like any other.
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                   &out, static_cast<utf8proc_option_t>(options));
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  if (n < 0) {
    if (n == UTF8PROC_ERROR_NOMEM) throw std::bad_alloc();
    throw std::invalid_argument(std::string("normalize_unicode: ") + utf8proc_errmsg(n));
  }
  return std::string(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n));
}

}  // namespace xgrad::text
