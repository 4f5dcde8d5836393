// The steps of a tokenizer.json, run as Hugging Face's tokenizers library runs them (the names in
// the comments are its Rust names).
#include <xgrad/text/tokenizer_json_steps.hpp>

#include <algorithm>
#include <stdexcept>
#include <utility>

#include <xgrad/text/bpe_merge.hpp>

namespace xgrad::text::hf {

namespace {

using Matches = std::vector<std::pair<std::size_t, std::size_t>>;

// A file's Replace steps (an empty match, a long content, many steps) could make a text grow
// without end: a normalizer or decoder may make its text at most this much longer.
std::size_t growth_limit(std::size_t size) { return 64 * size + 1024; }

[[noreturn]] void refuse_growth(const char* step, std::size_t limit) {
  throw std::invalid_argument(std::string("HFTokenizer: the tokenizer.json's ") + step + " makes a text longer than " +
                              std::to_string(limit) + " bytes (64 times its length + 1 KiB); refused");
}

// `text` with every match of `pattern` replaced by `content` (Replace: a literal content), at most
// `limit` bytes long (else refused, naming `step`).
std::string replace_all(const Regex& pattern, const std::string& content, const std::string& text,
                        std::size_t limit = std::string::npos, const char* step = "") {
  Matches matches;
  pattern.find_all(text, matches);
  if (matches.empty()) return text;
  std::string out;
  out.reserve(text.size());
  std::size_t at = 0;
  for (const auto& [begin, end] : matches) {
    out.append(text, at, begin - at);
    out += content;
    at = end;
    if (out.size() > limit) refuse_growth(step, limit);
  }
  out.append(text, at, std::string::npos);
  return out;
}

// The length of the UTF-8 character that starts with `lead` (the text is valid UTF-8).
std::size_t char_length(unsigned char lead) { return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4; }

}  // namespace

// ---------------------------------------------------------------------------------------------
// Normalizers

void normalize(const std::vector<Normalizer>& steps, std::string& text) {
  const std::size_t limit = growth_limit(text.size());
  for (const Normalizer& step : steps) {
    switch (step.kind) {
      case Normalizer::Kind::prepend:  // Prepend: only a non-empty text
        if (!text.empty()) text.insert(0, step.text);
        break;
      case Normalizer::Kind::replace:
        text = replace_all(*step.pattern, step.text, text, limit, "normalizer");
        break;
      case Normalizer::Kind::unicode:
        text = normalize_unicode(text, step.form);
        break;
    }
    if (text.size() > limit) refuse_growth("normalizer", limit);
  }
}

// ---------------------------------------------------------------------------------------------
// Pre-tokenizers

namespace {

struct Segment {
  std::size_t begin, end;
  bool is_match;
};

// The behaviors that join neighbours (NormalizedString::split's folds): the segments grouped, each
// group's is_match false.
std::vector<Segment> group(const std::vector<Segment>& all, SplitBehavior behavior) {
  std::vector<Segment> grouped;
  bool previous = false;
  auto fold = [&](const Segment& s, bool extend) {
    if (extend && !grouped.empty()) {
      if (behavior == SplitBehavior::merged_with_next)
        grouped.back().begin = s.begin;
      else
        grouped.back().end = s.end;
    } else {
      grouped.push_back({s.begin, s.end, false});
    }
    previous = s.is_match;
  };
  if (behavior == SplitBehavior::merged_with_next) {
    for (auto it = all.rbegin(); it != all.rend(); ++it) fold(*it, it->is_match && !previous);
    std::reverse(grouped.begin(), grouped.end());
  } else {
    for (const Segment& s : all)
      fold(s, behavior == SplitBehavior::contiguous ? s.is_match == previous : s.is_match && !previous);
  }
  return grouped;
}

// NormalizedString::split: the matches of `pattern` and the text between them, grouped by
// `behavior`; removed and empty parts are dropped. Isolated and Removed stream their parts.
template <class Next>
void split_piece(const Piece& piece, const Regex& pattern, SplitBehavior behavior, bool invert, const Next& next) {
  const std::string_view text = piece.text;
  const bool streams = behavior == SplitBehavior::isolated || behavior == SplitBehavior::removed;
  std::vector<Segment> all;
  auto segment = [&](std::size_t begin, std::size_t end, bool is_match) {
    if (!streams)
      all.push_back({begin, end, is_match});
    else if (end > begin && !(behavior == SplitBehavior::removed && is_match))
      next(Piece{text.substr(begin, end - begin), piece.first && begin == 0});
  };
  std::size_t at = 0;
  pattern.for_each_match(text, [&](std::size_t begin, std::size_t end) {
    if (begin > at) segment(at, begin, invert);
    segment(begin, end, !invert);
    at = end;
  });
  if (at < text.size()) segment(at, text.size(), invert);
  if (streams) return;
  for (const Segment& s : group(all, behavior))
    if (s.end > s.begin) next(Piece{text.substr(s.begin, s.end - s.begin), piece.first && s.begin == 0});
}

// ByteLevel: a space before each piece (add_prefix_space), GPT-2's pattern (use_regex), then each
// byte as its character of bytes_to_unicode.
template <class Next>
void byte_level_step(const PreTokenizer& step, const Piece& piece, const Next& next) {
  static const Pretokenizer gpt2;
  std::string spaced;
  std::string_view text = piece.text;
  if (step.add_prefix_space && (text.empty() || text[0] != ' ')) {
    spaced = " " + std::string(text);
    text = spaced;
  }
  if (!step.use_regex) {
    const std::string chars = unicode_from_bytes(text);
    next(Piece{chars, piece.first});
    return;
  }
  const std::vector<std::string_view> parts = gpt2.split(text);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::string chars = unicode_from_bytes(parts[i]);
    next(Piece{chars, piece.first && i == 0});
  }
}

// Metaspace: spaces become the replacement, which is put before the piece as prepend_scheme says
// (unless there already), then the piece is split before each replacement (MergedWithNext).
template <class Next>
void metaspace_step(const PreTokenizer& step, const Piece& piece, const Next& next) {
  static const Regex space(" ", true);
  std::string text = replace_all(space, step.replacement, std::string(piece.text));
  const bool has = text.compare(0, step.replacement.size(), step.replacement) == 0;
  if (!has &&
      (step.prepend == PreTokenizer::Prepend::always || (step.prepend == PreTokenizer::Prepend::first && piece.first)))
    text.insert(0, step.replacement);
  if (!step.split) {
    next(Piece{text, piece.first});
    return;
  }
  split_piece(Piece{text, piece.first}, *step.pattern, SplitBehavior::merged_with_next, false, next);
}

void run_steps(const std::vector<PreTokenizer>& steps, std::size_t k, const Piece& piece,
               const std::function<void(const Piece&)>& sink) {
  if (k == steps.size()) {
    sink(piece);
    return;
  }
  const PreTokenizer& step = steps[k];
  const auto next = [&](const Piece& part) { run_steps(steps, k + 1, part, sink); };
  switch (step.kind) {
    case PreTokenizer::Kind::split:
      split_piece(piece, *step.pattern, step.behavior, step.invert, next);
      break;
    case PreTokenizer::Kind::byte_level:
      byte_level_step(step, piece, next);
      break;
    case PreTokenizer::Kind::metaspace:
      metaspace_step(step, piece, next);
      break;
  }
}

}  // namespace

void pre_tokenize(const std::vector<PreTokenizer>& steps, const Piece& piece,
                  const std::function<void(const Piece&)>& sink) {
  run_steps(steps, 0, piece, sink);
}

// ---------------------------------------------------------------------------------------------
// The BPE model

detail::MergeRule BPEModel::rank_of(std::int32_t a, std::int32_t b) const {
  const auto it =
      merges.find((static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b));
  return it == merges.end() ? detail::MergeRule{-1, -1} : it->second;
}

// BPE::merge_word: each character is a symbol (its token; else its bytes' <0xNN> tokens with
// byte_fallback; else unk, runs of unknowns fused into one with fuse_unk; else nothing, as the
// library drops it), then the merges. A pending unk is emitted when the next known character
// comes, after any byte tokens in between, exactly as the library orders them.
void BPEModel::tokenize(std::string_view word, std::vector<std::int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges) {
    const auto it = vocab.find(std::string(word));
    if (it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<std::int32_t> symbols;
  symbols.reserve(word.size());
  bool pending_unk = false;
  std::string ch;
  for (std::size_t i = 0; i < word.size();) {
    const std::size_t k = std::min(char_length(static_cast<unsigned char>(word[i])), word.size() - i);
    ch.assign(word, i, k);
    i += k;
    const auto it = vocab.find(ch);
    if (it != vocab.end()) {
      if (pending_unk) symbols.push_back(unk);
      pending_unk = false;
      symbols.push_back(it->second);
      continue;
    }
    const bool bytes_known = byte_fallback && std::all_of(ch.begin(), ch.end(), [&](char c) {
                               return byte_ids[static_cast<unsigned char>(c)] >= 0;
                             });
    if (bytes_known) {
      for (const char c : ch) symbols.push_back(byte_ids[static_cast<unsigned char>(c)]);
    } else if (unk >= 0) {
      if (pending_unk && !fuse_unk) symbols.push_back(unk);
      pending_unk = true;
    }
  }
  if (pending_unk) symbols.push_back(unk);
  merge_symbols(symbols, MergeOrder::one_at_a_time, [this](std::int32_t a, std::int32_t b) { return rank_of(a, b); });
  out.insert(out.end(), symbols.begin(), symbols.end());
}

// ---------------------------------------------------------------------------------------------
// Added tokens

void AddedTokenMatcher::add(AddedToken token) {
  auto& list = by_first_byte_[static_cast<unsigned char>(token.content[0])];
  list.push_back(std::move(token));
  std::stable_sort(list.begin(), list.end(),
                   [](const auto& a, const auto& b) { return a.content.size() > b.content.size(); });
  ++count_;
}

const AddedToken* AddedTokenMatcher::find(std::string_view text, std::size_t from, std::size_t& at) const {
  for (std::size_t i = from; i < text.size(); ++i) {
    for (const AddedToken& token : by_first_byte_[static_cast<unsigned char>(text[i])]) {
      if (text.compare(i, token.content.size(), token.content) != 0) continue;
      at = i;
      return &token;
    }
  }
  return nullptr;
}

namespace {

// The character that ends text[0, end) / starts text[begin, ...) of valid UTF-8; end > 0, begin < size.
char32_t char_before(std::string_view text, std::size_t end) {
  std::size_t begin = end - 1;
  while (begin > 0 && (static_cast<unsigned char>(text[begin]) & 0xC0) == 0x80) --begin;
  return decode_utf8(text.substr(begin, end - begin)).front();
}
char32_t char_at(std::string_view text, std::size_t begin) {
  std::size_t end = begin + 1;
  while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
  return decode_utf8(text.substr(begin, end - begin)).front();
}

// Where the run of white space that ends at `end` begins (the library's `\s*$`).
std::size_t spaces_before(std::string_view text, std::size_t end) {
  while (end > 0 && is_white_space(char_before(text, end)))
    for (--end; end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80;) --end;
  return end;
}
// Where the run of white space that begins at `begin` ends (`^\s*`).
std::size_t spaces_after(std::string_view text, std::size_t begin) {
  while (begin < text.size() && is_white_space(char_at(text, begin)))
    for (++begin; begin < text.size() && (static_cast<unsigned char>(text[begin]) & 0xC0) == 0x80;) ++begin;
  return begin;
}

}  // namespace

void AddedTokenMatcher::split(std::string_view text,
                              const std::function<void(std::string_view, std::int32_t, std::size_t)>& piece) const {
  std::size_t done = 0, from = 0, at = 0;  // done: the text before it is given out; from: where the search goes on
  for (const AddedToken* token; !empty() && (token = find(text, from, at)) != nullptr;) {
    std::size_t start = at, stop = at + token->content.size();
    from = stop;
    if (token->single_word && ((start > 0 && is_word_character(char_before(text, start))) ||
                               (stop < text.size() && is_word_character(char_at(text, stop)))))
      continue;
    if (token->lstrip) start = std::max(spaces_before(text, start), done);
    if (token->rstrip) stop = spaces_after(text, stop);
    if (done < start) piece(text.substr(done, start - done), -1, done);
    piece(text.substr(start, stop - start), token->id, start);
    done = stop;
  }
  if (done < text.size()) piece(text.substr(done), -1, done);
}

// ---------------------------------------------------------------------------------------------
// Decoders

std::string utf8_lossy(std::string_view bytes) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::size_t n = bytes.size();
  std::string out;
  out.reserve(n);
  for (std::size_t i = 0; i < n;) {
    const unsigned char c = s[i];
    std::size_t need = 0;                // continuation bytes
    unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range (no overlongs, surrogates, > U+10FFFF)
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    if (c >= 0xE0 && c <= 0xEF) need = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    if (c >= 0xF0 && c <= 0xF4) need = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    std::size_t k = 1;  // the well-formed prefix: the lead byte and the continuation bytes that fit
    while (need > 0 && k <= need && i + k < n && s[i + k] >= (k == 1 ? lo : 0x80) && s[i + k] <= (k == 1 ? hi : 0xBF))
      ++k;
    if (need > 0 && k == need + 1) {
      out.append(bytes.substr(i, k));
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD for the maximal ill-formed part
    }
    i += k;
  }
  return out;
}

namespace {

std::size_t total_size(const std::vector<std::string>& tokens) {
  std::size_t n = 0;
  for (const std::string& token : tokens) n += token.size();
  return n;
}

// "<0xNN>" -> its byte (ByteFallback: Rust's u8::from_str_radix, which also takes "+N").
bool byte_token(const std::string& token, unsigned char& byte) {
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return false;
  auto digit = [](char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
  };
  const int a = digit(token[3]), b = digit(token[4]);
  if (b < 0 || (a < 0 && token[3] != '+')) return false;
  byte = static_cast<unsigned char>(a < 0 ? b : a * 16 + b);
  return true;
}

void byte_fallback(std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  std::string bytes;
  auto flush = [&] {
    if (bytes.empty()) return;
    if (is_valid_utf8(bytes))
      out.push_back(bytes);
    else
      out.insert(out.end(), bytes.size(), "\xEF\xBF\xBD");  // one U+FFFD per byte
    bytes.clear();
  };
  for (std::string& token : tokens) {
    unsigned char byte = 0;
    if (byte_token(token, byte)) {
      bytes.push_back(static_cast<char>(byte));
      continue;
    }
    flush();
    out.push_back(std::move(token));
  }
  flush();
  tokens.swap(out);
}

// Strip: up to `start` leading and `stop` trailing copies of one character, from each token.
std::string strip(const std::string& token, const std::string& c, std::size_t start, std::size_t stop) {
  std::size_t begin = 0, end = token.size();
  for (std::size_t i = 0; i < start && token.compare(begin, c.size(), c) == 0; ++i) begin += c.size();
  for (std::size_t i = 0; i < stop && end >= begin + c.size() && token.compare(end - c.size(), c.size(), c) == 0; ++i)
    end -= c.size();
  return token.substr(begin, end - begin);
}

void decode_step(const Decoder& step, std::vector<std::string>& tokens, std::size_t limit) {
  switch (step.kind) {
    case Decoder::Kind::byte_level: {  // a token with a character outside the alphabet gives its own bytes
      std::string all, bytes;
      for (const std::string& token : tokens) all += bytes_from_unicode(token, bytes) ? bytes : token;
      tokens.assign(1, utf8_lossy(all));
      break;
    }
    case Decoder::Kind::replace: {  // the tokens together stay within `limit`
      std::size_t others = total_size(tokens);
      for (std::string& token : tokens) {
        others -= token.size();
        token = replace_all(*step.pattern, step.content, token, limit - std::min(limit, others), "decoder");
        others += token.size();
      }
      break;
    }
    case Decoder::Kind::byte_fallback:
      byte_fallback(tokens);
      break;
    case Decoder::Kind::fuse: {
      std::string all;
      for (const std::string& token : tokens) all += token;
      tokens.assign(1, all);
      break;
    }
    case Decoder::Kind::strip:
      for (std::string& token : tokens) token = strip(token, step.content, step.start, step.stop);
      break;
    case Decoder::Kind::metaspace: {  // the first token loses its replacements, unless prepend_scheme is never
      const Regex replacement(step.replacement, true);
      for (std::size_t i = 0; i < tokens.size(); ++i)
        tokens[i] = replace_all(replacement, i == 0 && step.prepend ? "" : " ", tokens[i]);
      break;
    }
  }
}

}  // namespace

std::string decode(const std::vector<Decoder>& steps, std::vector<std::string> tokens) {
  const std::size_t limit = growth_limit(total_size(tokens));
  for (const Decoder& step : steps) decode_step(step, tokens, limit);
  std::string out;
  for (const std::string& token : tokens) out += token;
  return out;
}

}  // namespace xgrad::text::hf
