#include <xgrad/text/pretokenizer.hpp>

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace xgrad::text {

namespace {

// kGPT2Pattern with `\s` and `\S` spelled as Unicode's White_Space property (what Python's
// `regex` module means by `\s`; PCRE2's \s under UCP lacks U+0085).
constexpr const char* kWhiteSpace =
    R"(\t\n\x{0B}\f\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// `pattern` with every `\s` and `\S` spelled as kWhiteSpace: [ws] and [^ws] outside a character
// class, ws inside one ([^\s\p{L}] -> [^ws\p{L}]); `\S` inside a class is refused.
std::string pcre2_pattern(std::string_view pattern) {
  const std::string ws = kWhiteSpace;
  std::string out;
  bool in_class = false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char d = pattern[++i];
      if (d == 's') {
        out += in_class ? ws : "[" + ws + "]";
      } else if (d == 'S') {
        if (in_class) throw std::invalid_argument("\\S inside a character class is not supported");
        out += "[^" + ws + "]";
      } else {
        out += {c, d};
      }
      continue;
    }
    out.push_back(c);
    if (!in_class && c == '[') {
      in_class = true;
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);  // a literal ]
    } else if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      const std::size_t end = pattern.find(":]", i + 2);  // a POSIX class [:alpha:]
      if (end != std::string_view::npos) {
        out.append(pattern.substr(i + 1, end + 1 - i));
        i = end + 1;
      }
    } else if (in_class && c == ']') {
      in_class = false;
    }
  }
  return out;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(code, buffer, sizeof buffer);
  return n < 0 ? "error " + std::to_string(code) : std::string(reinterpret_cast<const char*>(buffer));
}

// The length of the well-formed UTF-8 sequence at the start of s[0, n), or 0 when there is none.
inline std::size_t utf8_sequence(const unsigned char* s, std::size_t n) {
  const unsigned char c = s[0];
  if (c < 0x80) return 1;
  auto cont = [&](std::size_t i) { return i < n && (s[i] & 0xC0) == 0x80; };
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (n < 2) return 0;
    const unsigned char lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;  // no overlongs, no surrogates
    return s[1] >= lo && s[1] <= hi && cont(2) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (n < 2) return 0;
    const unsigned char lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;  // no overlongs, <= U+10FFFF
    return s[1] >= lo && s[1] <= hi && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

}  // namespace

bool is_valid_utf8(std::string_view bytes) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::size_t n = bytes.size();
  std::size_t i = 0;
  while (i < n) {
    if (s[i] < 0x80) {
      ++i;
      continue;
    }
    const std::size_t k = utf8_sequence(s + i, n - i);
    if (k == 0) return false;
    i += k;
  }
  return true;
}

namespace {

// A compiled pattern; `what` names it in the error.
struct CompiledPattern {
  pcre2_code* code = nullptr;
  bool jit = false;
  CompiledPattern(const std::string& pattern, const std::string& what) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &error,
                         &offset, nullptr);
    if (code == nullptr)
      throw std::invalid_argument("PCRE2 cannot compile " + what + " at offset " + std::to_string(offset) + ": " +
                                  pcre2_message(error));
    // The JIT is 5-10x faster; without it (a platform PCRE2 has no JIT for) the interpreter runs.
    jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  }
  ~CompiledPattern() { pcre2_code_free(code); }
  CompiledPattern(const CompiledPattern&) = delete;
  CompiledPattern& operator=(const CompiledPattern&) = delete;
};

}  // namespace

struct Pretokenizer::Compiled : CompiledPattern {
  Compiled() : CompiledPattern(pcre2_pattern(kGPT2Pattern), "GPT-2's pattern") {}
};

Pretokenizer::Pretokenizer() : compiled_(std::make_shared<const Compiled>()) {}

std::vector<std::string_view> Pretokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  split(text, pieces);
  return pieces;
}

namespace {

struct MatchData {
  pcre2_match_data* data;
  explicit MatchData(const pcre2_code* code) : data(pcre2_match_data_create_from_pattern(code, nullptr)) {
    if (data == nullptr) throw std::bad_alloc();
  }
  ~MatchData() { pcre2_match_data_free(data); }
  MatchData(const MatchData&) = delete;
  MatchData& operator=(const MatchData&) = delete;
};

// Calls piece(begin, end) for each piece of the valid UTF-8 `subject`: the pattern's matches in
// order. Every character matches one of its alternatives, so the matches tile the subject; should
// the matcher ever fail (a resource limit), the next character becomes a piece of its own, so that
// the pieces still tile it.
template <class Piece>
void for_each_match(const pcre2_code* code, std::string_view subject, Piece&& piece) {
  MatchData match(code);
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  const std::size_t n = subject.size();
  std::size_t at = 0;
  while (at < n) {
    int rc = pcre2_match(code, s, n, at, PCRE2_NO_UTF_CHECK, match.data, nullptr);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)  // the JIT's stack: the interpreter keeps its own on the heap
      rc = pcre2_match(code, s, n, at, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, match.data, nullptr);
    std::size_t begin = at, end = 0;
    if (rc > 0) {
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.data);
      begin = ovector[0];
      end = ovector[1];
    }
    if (rc <= 0 || end <= begin || begin < at) {  // no match or a limit: one character
      begin = at;
      end = at + 1;
      while (end < n && (s[end] & 0xC0) == 0x80) ++end;
    }
    if (begin > at) piece(at, begin);  // cannot happen with this pattern; keeps the tiling
    piece(begin, end);
    at = end;
  }
}

}  // namespace

void Pretokenizer::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  if (is_valid_utf8(text)) {
    for_each_match(compiled_->code, text,
                   [&](std::size_t b, std::size_t e) { pieces.push_back(text.substr(b, e - b)); });
    return;
  }
  // Each byte outside a well-formed sequence becomes U+E000 + byte (private use, category Co: like
  // Python's surrogate escape U+DC80 + byte, "other" to the pattern); `origin` maps each offset
  // of the stand-in text back to the input.
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::string safe;
  std::vector<std::size_t> origin;
  safe.reserve(n + n / 2);
  origin.reserve(n + n / 2 + 1);
  for (std::size_t i = 0; i < n;) {
    const std::size_t k = utf8_sequence(s + i, n - i);
    if (k > 0) {
      for (std::size_t j = 0; j < k; ++j) {
        safe.push_back(static_cast<char>(s[i + j]));
        origin.push_back(i + j);
      }
      i += k;
    } else {
      const unsigned cp = 0xE000u + s[i];  // 3 bytes: 1110xxxx 10xxxxxx 10xxxxxx
      safe.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      safe.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      safe.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      origin.insert(origin.end(), {i, i, i});
      ++i;
    }
  }
  origin.push_back(n);
  for_each_match(compiled_->code, safe, [&](std::size_t b, std::size_t e) {
    pieces.push_back(text.substr(origin[b], origin[e] - origin[b]));
  });
}

// ---------------------------------------------------------------------------------------------
// Regex: a tokenizer.json's pattern

struct Regex::Compiled : CompiledPattern {
  explicit Compiled(const std::string& pattern) : CompiledPattern(pcre2_pattern(pattern), "the pattern") {}
};

Regex::Regex(std::string pattern, bool literal) : pattern_(std::move(pattern)), literal_(literal) {
  if (literal_) return;
  try {
    compiled_ = std::make_shared<const Compiled>(pattern_);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("the pattern " + pattern_.substr(0, 200) + ": " + e.what());
  }
}

void Regex::find_all(std::string_view text, std::vector<std::pair<std::size_t, std::size_t>>& matches) const {
  for_each_match(text, [&](std::size_t begin, std::size_t end) { matches.emplace_back(begin, end); });
}

void Regex::for_each_match(std::string_view text, const std::function<void(std::size_t, std::size_t)>& match) const {
  const std::size_t n = text.size();
  if (literal_) {  // Hugging Face's &str pattern: non-overlapping, left to right; "" matches nothing
    if (pattern_.empty()) return;
    for (std::size_t at = text.find(pattern_); at != std::string_view::npos;
         at = text.find(pattern_, at + pattern_.size()))
      match(at, at + pattern_.size());
    return;
  }
  MatchData data(compiled_->code);
  const auto* s = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t at = 0, last_end = std::string_view::npos;
  while (at <= n) {
    int rc = pcre2_match(compiled_->code, s, n, at, PCRE2_NO_UTF_CHECK, data.data, nullptr);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)  // the JIT's stack: the interpreter keeps its own on the heap
      rc = pcre2_match(compiled_->code, s, n, at, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, data.data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) throw std::runtime_error("the pattern " + pattern_.substr(0, 200) + ": PCRE2 " + pcre2_message(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.data);
    const std::size_t begin = ovector[0], end = ovector[1];
    if (begin == end && begin == last_end) {  // Oniguruma's find_iter: move one character on
      if (at >= n) return;
      ++at;
      while (at < n && (s[at] & 0xC0) == 0x80) ++at;
      continue;
    }
    match(begin, end);
    at = last_end = end;
  }
}

}  // namespace xgrad::text
