#include <xgrad/text/bpe.hpp>
#include <xgrad/text/bpe_merge.hpp>
#include <xgrad/text/messages.hpp>

#include <algorithm>
#include <array>
#include <limits>
#include <stdexcept>
#include <unordered_map>

namespace xgrad::text {

using detail::kMaxVocab;
using detail::quote;

namespace {

void append_utf8(std::string& out, unsigned cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

struct ByteTable {
  std::vector<std::string> chars;            // byte -> its character, UTF-8
  std::array<int, 324> byte_of_codepoint{};  // code point (< 324) -> byte, or -1
  ByteTable() : chars(256) {
    byte_of_codepoint.fill(-1);
    unsigned next = 256;
    for (unsigned b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      const unsigned cp = printable ? b : next++;
      append_utf8(chars[b], cp);
      byte_of_codepoint[cp] = static_cast<int>(b);
    }
  }
};

const ByteTable& byte_table() {
  static const ByteTable table;
  return table;
}

// Bad tables: std::invalid_argument; the file loaders (bpe_files.cpp) rethrow it as a FormatError
// naming the file.
[[noreturn]] void refuse(const std::string& what) { throw std::invalid_argument("BPETokenizer: " + what); }

std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}

}  // namespace

const std::vector<std::string>& bytes_to_unicode() { return byte_table().chars; }

namespace {

// Decodes `token` from the byte alphabet into `out`: npos, or the offset of the first character
// outside the alphabet.
std::size_t bytes_of_alphabet(std::string_view token, std::string& out) {
  const auto& table = byte_table();
  out.clear();
  out.reserve(token.size());
  const auto* s = reinterpret_cast<const unsigned char*>(token.data());
  for (std::size_t i = 0; i < token.size();) {
    unsigned cp = 0;
    std::size_t k = 0;
    if (s[i] < 0x80) {
      cp = s[i], k = 1;
    } else if ((s[i] & 0xE0) == 0xC0 && i + 1 < token.size() && (s[i + 1] & 0xC0) == 0x80) {
      cp = ((s[i] & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu), k = 2;
    }
    if (k == 0 || cp >= table.byte_of_codepoint.size() || table.byte_of_codepoint[cp] < 0 || (k == 2 && cp < 0x80))
      return i;
    out.push_back(static_cast<char>(table.byte_of_codepoint[cp]));
    i += k;
  }
  return std::string_view::npos;
}

}  // namespace

std::string bytes_from_unicode(std::string_view token) {
  std::string out;
  const std::size_t bad = bytes_of_alphabet(token, out);
  if (bad != std::string_view::npos)
    throw std::invalid_argument("bytes_from_unicode: " + quote(token) + " has a character at byte " +
                                std::to_string(bad) + " that is not in GPT-2's byte alphabet");
  return out;
}

bool bytes_from_unicode(std::string_view token, std::string& out) {
  return bytes_of_alphabet(token, out) == std::string_view::npos;
}

std::string unicode_from_bytes(std::string_view bytes) {
  const auto& chars = byte_table().chars;
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) out += chars[static_cast<unsigned char>(c)];
  return out;
}

// ---------------------------------------------------------------------------------------------
// The merge loop (bpe_merge.hpp)

std::vector<std::int32_t> detail::bpe_merge(std::vector<std::int32_t> symbols,
                                            MergeRule (*rank_of)(const void*, std::int32_t, std::int32_t),
                                            const void* context) {
  merge_symbols(symbols, MergeOrder::all_occurrences,
                [&](std::int32_t a, std::int32_t b) { return rank_of(context, a, b); });
  return symbols;
}

// ---------------------------------------------------------------------------------------------
// Tables

struct detail::BPETables {
  std::unordered_map<std::string, std::int32_t> id_of_token;
  std::vector<std::string> bytes_of_id;
  std::array<std::int32_t, 256> byte_id{};
  std::unordered_map<std::uint64_t, detail::MergeRule> merges;
  detail::MergeRule rank_of(std::int32_t a, std::int32_t b) const {
    const auto it = merges.find(pair_key(a, b));
    return it == merges.end() ? detail::MergeRule{-1, -1} : it->second;
  }
};

namespace {

// The tables of a tokenizer, everything checked; `is_special` by id.
std::shared_ptr<const detail::BPETables> build_tables(const std::vector<std::string>& tokens,
                                                      const std::vector<Merge>& merges,
                                                      const std::vector<bool>& is_special) {
  if (tokens.empty()) refuse("the vocabulary is empty");
  if (tokens.size() > kMaxVocab)
    refuse("the vocabulary has " + std::to_string(tokens.size()) + " tokens; at most " + std::to_string(kMaxVocab) +
           " are supported");
  auto t = std::make_shared<detail::BPETables>();
  t->id_of_token.reserve(tokens.size() * 2);
  t->bytes_of_id.resize(tokens.size());
  for (std::size_t id = 0; id < tokens.size(); ++id) {
    const std::string& token = tokens[id];
    if (token.empty()) refuse("the token of id " + std::to_string(id) + " is empty");
    if (!t->id_of_token.emplace(token, static_cast<std::int32_t>(id)).second)
      refuse("the token " + quote(token) + " appears twice (ids " + std::to_string(t->id_of_token[token]) + " and " +
             std::to_string(id) + ")");
    if (is_special[id]) {
      if (!is_valid_utf8(token)) refuse("the special token " + quote(token) + " is not valid UTF-8");
      t->bytes_of_id[id] = token;
    } else {
      try {
        t->bytes_of_id[id] = bytes_from_unicode(token);
      } catch (const std::invalid_argument&) {
        refuse("the token " + quote(token) + " (id " + std::to_string(id) +
               ") has a character outside GPT-2's byte alphabet (bytes_to_unicode)");
      }
    }
  }
  const auto& chars = bytes_to_unicode();
  for (int b = 0; b < 256; ++b) {
    const auto it = t->id_of_token.find(chars[b]);
    if (it == t->id_of_token.end() || is_special[it->second])
      refuse("the byte " + std::to_string(b) + " has no token (" + quote(chars[b]) +
             "): a byte-level vocabulary needs all 256");
    t->byte_id[b] = it->second;
  }
  t->merges.reserve(merges.size() * 2);
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& a = merges[rank].first;  // not a structured binding: clang 14 cannot capture those
    const std::string& b = merges[rank].second;
    const auto where = [&] { return "merge " + std::to_string(rank + 1) + " (" + quote(a + " " + b) + ")"; };
    auto ordinary = [&](const std::string& token, const char* what) {
      const auto it = t->id_of_token.find(token);
      if (it == t->id_of_token.end())
        refuse(where() + ": its " + what + " " + quote(token) + " is not in the vocabulary");
      if (is_special[it->second]) refuse(where() + ": its " + what + " " + quote(token) + " is a special token");
      return it->second;
    };
    const std::int32_t ia = ordinary(a, "left part"), ib = ordinary(b, "right part");
    const std::int32_t merged = ordinary(a + b, "result");
    if (!t->merges.emplace(pair_key(ia, ib), detail::MergeRule{static_cast<std::int64_t>(rank), merged}).second)
      refuse(where() + " appears twice");
  }
  return t;
}

}  // namespace

BPETokenizer::BPETokenizer(std::vector<std::string> tokens, std::vector<Merge> merges, std::vector<std::string> special)
    : tokens_(std::move(tokens)), merges_(std::move(merges)), cache_(std::make_shared<detail::BPECache>()) {
  std::vector<bool> is_special(tokens_.size(), false);
  for (const auto& name : special) {
    const auto it = std::find(tokens_.begin(), tokens_.end(), name);
    if (it == tokens_.end())
      throw std::invalid_argument("BPETokenizer: the special token " + quote(name) + " is not in the vocabulary");
    const auto id = it - tokens_.begin();
    is_special[id] = true;
    special_[name] = static_cast<std::int64_t>(id);
  }
  tables_ = build_tables(tokens_, merges_, is_special);
}

// ---------------------------------------------------------------------------------------------
// Encoding and decoding

void BPETokenizer::encode_ordinary(std::string_view text, std::vector<std::int64_t>& out) const {
  const detail::BPETables& t = *tables_;
  std::vector<std::string_view> pieces;
  pretokenizer_.split(text, pieces);
  std::vector<std::int32_t> symbols;
  for (const std::string_view piece : pieces) {
    if (piece.size() == 1) {
      out.push_back(t.byte_id[static_cast<unsigned char>(piece[0])]);
      continue;
    }
    if (cache_->find(piece, out)) continue;
    symbols.resize(piece.size());
    for (std::size_t i = 0; i < piece.size(); ++i) symbols[i] = t.byte_id[static_cast<unsigned char>(piece[i])];
    merge_symbols(symbols, MergeOrder::all_occurrences,
                  [&](std::int32_t a, std::int32_t b) { return t.rank_of(a, b); });
    out.insert(out.end(), symbols.begin(), symbols.end());
    cache_->store(piece, symbols);
  }
}

void BPETokenizer::encode_with(std::string_view text, const std::vector<std::pair<std::string, std::int64_t>>& allowed,
                               std::vector<std::int64_t>& out) const {
  std::size_t at = 0;
  while (at < text.size()) {
    // The special token that starts first, the longest of those.
    std::size_t best = std::string_view::npos, best_length = 0;
    std::int64_t best_id = -1;
    for (const auto& [name, id] : allowed) {
      const std::size_t found = text.find(name, at);
      if (found == std::string_view::npos) continue;
      if (found < best || (found == best && name.size() > best_length)) {
        best = found;
        best_length = name.size();
        best_id = id;
      }
    }
    if (best == std::string_view::npos) {
      encode_ordinary(text.substr(at), out);
      return;
    }
    encode_ordinary(text.substr(at, best - at), out);
    out.push_back(best_id);
    at = best + best_length;
  }
}

std::vector<std::int64_t> BPETokenizer::encode(std::string_view text, Special special) const {
  std::vector<std::int64_t> out;
  out.reserve(text.size() / 3 + 1);
  if (special == Special::none || special_.empty()) {
    encode_ordinary(text, out);
  } else {
    encode_with(text, {special_.begin(), special_.end()}, out);
  }
  return out;
}

std::vector<std::int64_t> BPETokenizer::encode(std::string_view text, const std::vector<std::string>& allowed) const {
  std::vector<std::pair<std::string, std::int64_t>> chosen;
  for (const auto& name : allowed) {
    const auto it = special_.find(name);
    if (it == special_.end())
      throw std::invalid_argument("BPETokenizer::encode: " + quote(name) + " is not a special token of this tokenizer");
    chosen.emplace_back(*it);
  }
  std::vector<std::int64_t> out;
  out.reserve(text.size() / 3 + 1);
  encode_with(text, chosen, out);
  return out;
}

std::string BPETokenizer::decode(const std::vector<std::int64_t>& ids) const {
  const auto& bytes = tables_->bytes_of_id;
  std::string out;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::int64_t id = ids[i];
    if (id < 0 || static_cast<std::size_t>(id) >= bytes.size())
      throw std::invalid_argument("BPETokenizer::decode: the id " + std::to_string(id) + " at position " +
                                  std::to_string(i) + " is outside the vocabulary [0, " + std::to_string(bytes.size()) +
                                  ")");
    out += bytes[id];
  }
  return out;
}

const std::string& BPETokenizer::token(std::int64_t id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= tokens_.size())
    throw std::invalid_argument("BPETokenizer::token: the id " + std::to_string(id) +
                                " is outside the vocabulary [0, " + std::to_string(tokens_.size()) + ")");
  return tokens_[id];
}

std::string BPETokenizer::token_bytes(std::int64_t id) const { return decode({id}); }

std::int64_t BPETokenizer::id(std::string_view token) const {
  const auto it = tables_->id_of_token.find(std::string(token));
  return it == tables_->id_of_token.end() ? -1 : it->second;
}

}  // namespace xgrad::text
