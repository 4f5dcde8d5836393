#include <xgrad/text/bpe.hpp>

#include <algorithm>
#include <array>
#include <filesystem>
#include <limits>
#include <mutex>
#include <queue>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include <xgrad/serialize/atomic_file.hpp>
#include <xgrad/serialize/format_error.hpp>

namespace xgrad::text {

namespace {

// The largest vocabulary accepted: ids are int32 inside, int64 outside.
constexpr std::size_t kMaxVocab = std::size_t{1} << 30;

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

// Printable quoting for messages: at most 60 bytes, control bytes as \xNN.
std::string quote(std::string_view s) {
  std::string out = "'";
  const std::size_t n = std::min<std::size_t>(s.size(), 60);
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7F) {
      static const char* hex = "0123456789ABCDEF";
      out += "\\x";
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  if (s.size() > n) out += "...";
  return out + "'";
}

// Where a table came from, for errors: files give FormatError naming the file, memory gives
// std::invalid_argument naming the constructor.
struct Origin {
  std::string vocab, merges;  // file names; empty for the in-memory constructor
  bool file() const { return !vocab.empty(); }
  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    if (file()) throw FormatError(where + ": " + what);
    throw std::invalid_argument("BPETokenizer: " + what);
  }
  [[noreturn]] void vocab_error(const std::string& what) const { fail(vocab, what); }
  [[noreturn]] void merges_error(const std::string& what) const { fail(merges, what); }
};

std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}

}  // namespace

const std::vector<std::string>& bytes_to_unicode() { return byte_table().chars; }

std::string bytes_from_unicode(std::string_view token) {
  const auto& table = byte_table();
  std::string out;
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
    if (k == 0 || cp >= table.byte_of_codepoint.size() || table.byte_of_codepoint[cp] < 0 ||
        (k == 2 && cp < 0x80))
      throw std::invalid_argument("bytes_from_unicode: " + quote(token) + " has a character at byte " +
                                  std::to_string(i) + " that is not in GPT-2's byte alphabet");
    out.push_back(static_cast<char>(table.byte_of_codepoint[cp]));
    i += k;
  }
  return out;
}

std::string unicode_from_bytes(std::string_view bytes) {
  const auto& chars = byte_table().chars;
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) out += chars[static_cast<unsigned char>(c)];
  return out;
}

// ---------------------------------------------------------------------------------------------
// The merge loop

namespace {

// encoder.py's bpe(): while some adjacent pair has a rank, take the lowest-ranked pair and merge
// each occurrence of it, left to right, without overlaps. Here the pairs wait in a heap ordered by
// (rank, position); all entries of the lowest rank are taken at once (they are the occurrences of
// one pair, by position), checked against the current symbols (entries go stale as neighbours
// merge), merged, and only then are the new pairs pushed: exactly encoder.py's order, even for
// merge lists where a new pair outranks the one just merged. Symbols sit in a linked list.
template <class RankOf>
void merge_symbols(std::vector<std::int32_t>& symbols, RankOf&& rank_of) {
  const std::size_t n = symbols.size();
  if (n < 2) return;
  struct Entry {
    std::int64_t rank;
    std::int32_t pos, left, right, merged;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<std::int32_t> next(n), prev(n);
  for (std::size_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? static_cast<std::int32_t>(i + 1) : -1;
    prev[i] = static_cast<std::int32_t>(i) - 1;
  }
  std::vector<char> alive(n, 1);
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto push = [&](std::int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    const std::int32_t a = symbols[pos], b = symbols[next[pos]];
    const detail::MergeRule rule = rank_of(a, b);
    if (rule.rank >= 0) heap.push({rule.rank, pos, a, b, rule.merged});
  };
  for (std::size_t i = 0; i + 1 < n; ++i) push(static_cast<std::int32_t>(i));
  std::vector<Entry> batch;
  std::vector<std::int32_t> changed;
  while (!heap.empty()) {
    const std::int64_t rank = heap.top().rank;
    batch.clear();
    while (!heap.empty() && heap.top().rank == rank) {
      batch.push_back(heap.top());
      heap.pop();
    }
    changed.clear();
    for (const Entry& e : batch) {  // by position
      const std::int32_t p = e.pos;
      if (!alive[p] || symbols[p] != e.left || next[p] < 0 || symbols[next[p]] != e.right) continue;
      const std::int32_t q = next[p];
      symbols[p] = e.merged;
      alive[q] = 0;
      next[p] = next[q];
      if (next[q] >= 0) prev[next[q]] = p;
      changed.push_back(p);
    }
    for (const std::int32_t p : changed) {
      if (!alive[p]) continue;
      push(prev[p]);
      push(p);
    }
  }
  std::size_t w = 0;
  for (std::int32_t p = 0; p >= 0; p = next[p]) symbols[w++] = symbols[p];
  symbols.resize(w);
}

}  // namespace

std::vector<std::int32_t> detail::bpe_merge(std::vector<std::int32_t> symbols,
                                            MergeRule (*rank_of)(const void*, std::int32_t, std::int32_t),
                                            const void* context) {
  merge_symbols(symbols, [&](std::int32_t a, std::int32_t b) { return rank_of(context, a, b); });
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

// Pieces merged before, by their bytes. Bounded: cleared when full (hostile input of endless
// distinct pieces must not grow it without end).
struct detail::BPECache {
  static constexpr std::size_t kMaxEntries = std::size_t{1} << 17;
  static constexpr std::size_t kMaxPiece = 128;
  std::mutex mutex;
  std::unordered_map<std::string, std::vector<std::int32_t>> pieces;
};

namespace {

// The tables of a tokenizer, everything checked; `is_special` by id.
std::shared_ptr<const detail::BPETables> build_tables(const std::vector<std::string>& tokens,
                                                   const std::vector<Merge>& merges,
                                                   const std::vector<bool>& is_special, const Origin& origin) {
  if (tokens.empty()) origin.vocab_error("the vocabulary is empty");
  if (tokens.size() > kMaxVocab)
    origin.vocab_error("the vocabulary has " + std::to_string(tokens.size()) + " tokens; at most " +
                       std::to_string(kMaxVocab) + " are supported");
  auto t = std::make_shared<detail::BPETables>();
  t->id_of_token.reserve(tokens.size() * 2);
  t->bytes_of_id.resize(tokens.size());
  for (std::size_t id = 0; id < tokens.size(); ++id) {
    const std::string& token = tokens[id];
    if (token.empty()) origin.vocab_error("the token of id " + std::to_string(id) + " is empty");
    if (!t->id_of_token.emplace(token, static_cast<std::int32_t>(id)).second)
      origin.vocab_error("the token " + quote(token) + " appears twice (ids " +
                         std::to_string(t->id_of_token[token]) + " and " + std::to_string(id) + ")");
    if (is_special[id]) {
      if (!is_valid_utf8(token)) origin.vocab_error("the special token " + quote(token) + " is not valid UTF-8");
      t->bytes_of_id[id] = token;
    } else {
      try {
        t->bytes_of_id[id] = bytes_from_unicode(token);
      } catch (const std::invalid_argument&) {
        origin.vocab_error("the token " + quote(token) + " (id " + std::to_string(id) +
                           ") has a character outside GPT-2's byte alphabet (bytes_to_unicode)");
      }
    }
  }
  const auto& chars = bytes_to_unicode();
  for (int b = 0; b < 256; ++b) {
    const auto it = t->id_of_token.find(chars[b]);
    if (it == t->id_of_token.end() || is_special[it->second])
      origin.vocab_error("the byte " + std::to_string(b) + " has no token (" + quote(chars[b]) +
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
        origin.merges_error(where() + ": its " + what + " " + quote(token) + " is not in the vocabulary");
      if (is_special[it->second])
        origin.merges_error(where() + ": its " + what + " " + quote(token) + " is a special token");
      return it->second;
    };
    const std::int32_t ia = ordinary(a, "left part"), ib = ordinary(b, "right part");
    const std::int32_t merged = ordinary(a + b, "result");
    if (!t->merges.emplace(pair_key(ia, ib), detail::MergeRule{static_cast<std::int64_t>(rank), merged}).second)
      origin.merges_error(where() + " appears twice");
  }
  return t;
}

}  // namespace

BPETokenizer::BPETokenizer(std::vector<std::string> tokens, std::vector<Merge> merges,
                           std::vector<std::string> special)
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
  tables_ = build_tables(tokens_, merges_, is_special, Origin{});
}

namespace {

struct Loaded {
  std::vector<std::string> tokens;
  std::vector<Merge> merges;
  std::vector<std::string> special;
};

// {"token": id, ...} plus tokenizer.json's added tokens -> tokens by id, which must be 0 .. N-1,
// each once. `key` names the object in messages ("model.vocab"; empty for encoder.json).
std::vector<std::string> vocab_from_json(const nlohmann::json& vocab, const std::string& file, const std::string& key,
                                         const std::vector<std::pair<std::string, std::int64_t>>& added = {}) {
  const std::string object = key.empty() ? "the vocabulary" : key;
  if (!vocab.is_object()) throw FormatError(file + ": " + object + " must be an object {\"token\": id, ...}");
  struct Entry {
    std::string token;
    std::int64_t id;
    std::int64_t added;  // index in added_tokens, or -1 for the vocabulary object
  };
  const auto where = [&](const Entry& e) {
    if (e.added >= 0) return "added_tokens[" + std::to_string(e.added) + "] (" + quote(e.token) + ")";
    return key.empty() ? quote(e.token) : key + "[" + quote(e.token) + "]";
  };
  std::vector<Entry> entries;
  entries.reserve(vocab.size() + added.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer())
      throw FormatError(file + ": " + where({it.key(), 0, -1}) + " must be an integer id, got " + it.value().dump());
    entries.push_back({it.key(), it.value().get<std::int64_t>(), -1});
  }
  for (std::size_t i = 0; i < added.size(); ++i) {
    const auto& [token, id] = added[i];
    const auto it = vocab.find(token);
    const Entry entry{token, id, static_cast<std::int64_t>(i)};
    if (it == vocab.end()) {
      entries.push_back(entry);
    } else if (it.value().get<std::int64_t>() != id) {
      throw FormatError(file + ": " + where(entry) + " has the id " + std::to_string(id) + ", but " + object + " gives it " +
                        std::to_string(it.value().get<std::int64_t>()));
    }
  }
  const std::size_t n = entries.size();
  if (n > kMaxVocab)
    throw FormatError(file + ": " + object + " has " + std::to_string(n) + " tokens; at most " +
                      std::to_string(kMaxVocab) + " are supported");
  std::vector<std::string> tokens(n);
  std::vector<const Entry*> owner(n, nullptr);
  for (const Entry& e : entries) {
    if (e.id < 0 || static_cast<std::size_t>(e.id) >= n)
      throw FormatError(file + ": " + where(e) + " has the id " + std::to_string(e.id) + "; the ids of the " +
                        std::to_string(n) + " tokens must be 0 .. " + std::to_string(n - 1) + ", each once");
    if (owner[e.id])
      throw FormatError(file + ": " + where(e) + " and " + where(*owner[e.id]) + " both have the id " +
                        std::to_string(e.id));
    owner[e.id] = &e;
    tokens[e.id] = e.token;
  }
  return tokens;
}

nlohmann::json parse_json(std::string_view bytes, const std::string& file) {
  try {
    return nlohmann::json::parse(bytes.begin(), bytes.end());
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(file + ": not valid JSON: " + e.what());
  }
}

// vocab.bpe / merges.txt
std::vector<Merge> merges_from_text(std::string_view text, const std::string& file) {
  std::vector<Merge> merges;
  std::size_t line_number = 0;
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(at, end - at);
    at = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_number == 1 && line.substr(0, 8) == "#version")) continue;
    const std::size_t space = line.find(' ');
    if (space == 0 || space == std::string_view::npos || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos)
      throw FormatError(file + ": line " + std::to_string(line_number) +
                        ": expected two tokens separated by one space, got " + quote(line));
    merges.emplace_back(std::string(line.substr(0, space)), std::string(line.substr(space + 1)));
  }
  return merges;
}

// Tokens that are neither a byte nor the result of a merge are special (GPT-2's <|endoftext|>,
// and those a trainer appended).
std::vector<std::string> unreachable_tokens(const std::vector<std::string>& tokens, const std::vector<Merge>& merges) {
  std::unordered_set<std::string> reachable(bytes_to_unicode().begin(), bytes_to_unicode().end());
  for (const auto& [a, b] : merges) reachable.insert(a + b);
  std::vector<std::string> special;
  for (const auto& token : tokens)
    if (!reachable.count(token)) special.push_back(token);
  return special;
}

std::string string_at(const nlohmann::json& object, const char* key, const std::string& file, const std::string& path,
                      const char* fallback = nullptr) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) {
    if (fallback) return fallback;
    throw FormatError(file + ": no key '" + path + key + "'");
  }
  if (!it->is_string()) throw FormatError(file + ": " + path + key + " must be a string, got " + it->dump());
  return it->get<std::string>();
}

// A key that must be absent, null, false or "" (an option that would change the result).
void refuse_set(const nlohmann::json& object, const char* key, const std::string& file, const std::string& path,
                const char* why) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null() || (it->is_boolean() && !it->get<bool>()) ||
      (it->is_string() && it->get<std::string>().empty()))
    return;
  throw FormatError(file + ": " + path + key + " is " + it->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                    ": " + why + " is not supported");
}

void check_byte_level(const nlohmann::json& pre, const std::string& file) {
  if (!pre.is_object()) throw FormatError(file + ": pre_tokenizer must be an object, got " + pre.dump());
  const std::string type = string_at(pre, "type", file, "pre_tokenizer.");
  if (type != "ByteLevel")
    throw FormatError(file + ": pre_tokenizer.type is '" + type + "'; only 'ByteLevel' (GPT-2's) is supported");
  refuse_set(pre, "add_prefix_space", file, "pre_tokenizer.", "adding a space before the text");
  const auto it = pre.find("use_regex");
  if (it != pre.end() && !(it->is_boolean() && it->get<bool>()))
    throw FormatError(file + ": pre_tokenizer.use_regex is " + it->dump() + "; only GPT-2's pattern (true) is supported");
}

Loaded parse_tokenizer_json(std::string_view bytes, const std::string& file) {
  const nlohmann::json root = parse_json(bytes, file);
  if (!root.is_object()) throw FormatError(file + ": expected a JSON object at the top");
  const auto model_it = root.find("model");
  if (model_it == root.end() || !model_it->is_object()) throw FormatError(file + ": no object at the key 'model'");
  const nlohmann::json& model = *model_it;
  const std::string type = string_at(model, "type", file, "model.", "BPE");
  if (type != "BPE") throw FormatError(file + ": model.type is '" + type + "'; only 'BPE' is supported");
  refuse_set(model, "dropout", file, "model.", "BPE dropout");
  refuse_set(model, "continuing_subword_prefix", file, "model.", "a subword prefix");
  refuse_set(model, "end_of_word_suffix", file, "model.", "an end-of-word suffix");
  refuse_set(model, "byte_fallback", file, "model.", "byte fallback (not byte-level BPE)");
  refuse_set(model, "ignore_merges", file, "model.", "ignore_merges");
  if (root.contains("normalizer") && !root["normalizer"].is_null())
    throw FormatError(file + ": normalizer is set (" + root["normalizer"].value("type", std::string("?")) +
                      "); GPT-2's byte-level BPE has none, and no normalizer is supported");
  if (root.contains("pre_tokenizer") && !root["pre_tokenizer"].is_null()) check_byte_level(root["pre_tokenizer"], file);
  else throw FormatError(file + ": no key 'pre_tokenizer'; expected GPT-2's ByteLevel pre-tokenizer");
  if (root.contains("post_processor") && !root["post_processor"].is_null()) {
    const auto& post = root["post_processor"];
    const std::string post_type = post.is_object() ? string_at(post, "type", file, "post_processor.") : "";
    if (post_type != "ByteLevel")
      throw FormatError(file + ": post_processor.type is '" + post_type +
                        "'; only 'ByteLevel' (which adds no tokens) is supported");
  }
  std::vector<std::pair<std::string, std::int64_t>> added;
  if (root.contains("added_tokens") && !root["added_tokens"].is_null()) {
    const auto& list = root["added_tokens"];
    if (!list.is_array()) throw FormatError(file + ": added_tokens must be a list");
    for (std::size_t i = 0; i < list.size(); ++i) {
      const auto& entry = list[i];
      const std::string where = "added_tokens[" + std::to_string(i) + "]";
      if (!entry.is_object() || !entry.contains("id") || !entry["id"].is_number_integer())
        throw FormatError(file + ": " + where + " must be an object with an integer 'id'");
      added.emplace_back(string_at(entry, "content", file, where + "."), entry["id"].get<std::int64_t>());
    }
  }
  const auto vocab_it = model.find("vocab");
  if (vocab_it == model.end()) throw FormatError(file + ": no key 'model.vocab'");
  Loaded loaded;
  loaded.tokens = vocab_from_json(*vocab_it, file, "model.vocab", added);
  const auto merges_it = model.find("merges");
  if (merges_it == model.end()) throw FormatError(file + ": no key 'model.merges'");
  if (!merges_it->is_array()) throw FormatError(file + ": model.merges must be a list");
  for (std::size_t i = 0; i < merges_it->size(); ++i) {
    const auto& m = (*merges_it)[i];
    const std::string where = file + ": model.merges[" + std::to_string(i) + "]";
    if (m.is_string()) {
      const auto parsed = merges_from_text(m.get<std::string>(), where);
      if (parsed.size() != 1) throw FormatError(where + ": expected \"left right\", got " + m.dump());
      loaded.merges.push_back(parsed[0]);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      loaded.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      throw FormatError(where + ": expected \"left right\" or [\"left\", \"right\"], got " +
                        m.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
  }
  for (const auto& [token, id] : added) loaded.special.push_back(token);
  return loaded;
}

// Names the file for errors raised while building from `loaded`.
BPETokenizer build(Loaded loaded, const Origin& origin) {
  try {
    return BPETokenizer(std::move(loaded.tokens), std::move(loaded.merges), std::move(loaded.special));
  } catch (const std::invalid_argument& e) {
    // The constructor's message starts with "BPETokenizer: "; the merge errors name the merge.
    std::string what = e.what();
    const std::string prefix = "BPETokenizer: ";
    if (what.compare(0, prefix.size(), prefix) == 0) what = what.substr(prefix.size());
    const bool merge = what.compare(0, 6, "merge ") == 0;
    throw FormatError((merge ? origin.merges : origin.vocab) + ": " + what);
  }
}

}  // namespace

BPETokenizer BPETokenizer::from_json_and_merges(std::string_view encoder_json, std::string_view vocab_bpe,
                                                const std::string& json_name, const std::string& merges_name) {
  Loaded loaded;
  loaded.tokens = vocab_from_json(parse_json(encoder_json, json_name), json_name, "");
  loaded.merges = merges_from_text(vocab_bpe, merges_name);
  loaded.special = unreachable_tokens(loaded.tokens, loaded.merges);
  return build(std::move(loaded), Origin{json_name, merges_name});
}

BPETokenizer BPETokenizer::from_tokenizer_json_bytes(std::string_view bytes, const std::string& name) {
  return build(parse_tokenizer_json(bytes, name), Origin{name + ": model.vocab", name + ": model.merges"});
}

BPETokenizer BPETokenizer::from_files(const std::string& encoder_json, const std::string& vocab_bpe) {
  const std::string json = read_regular_file("BPETokenizer", encoder_json);
  const std::string merges = read_regular_file("BPETokenizer", vocab_bpe);
  return from_json_and_merges(json, merges, encoder_json, vocab_bpe);
}

BPETokenizer BPETokenizer::from_tokenizer_json(const std::string& path) {
  return from_tokenizer_json_bytes(read_regular_file("BPETokenizer", path), path);
}

BPETokenizer BPETokenizer::load(const std::string& folder) {
  namespace fs = std::filesystem;
  const fs::path dir(folder);
  if (fs::exists(dir / "tokenizer.json")) return from_tokenizer_json((dir / "tokenizer.json").string());
  if (fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt"))
    return from_files((dir / "vocab.json").string(), (dir / "merges.txt").string());
  if (fs::exists(dir / "encoder.json") && fs::exists(dir / "vocab.bpe"))
    return from_files((dir / "encoder.json").string(), (dir / "vocab.bpe").string());
  throw std::runtime_error("BPETokenizer::load: " + folder +
                           " has neither tokenizer.json, vocab.json + merges.txt, nor encoder.json + vocab.bpe");
}

std::string BPETokenizer::encoder_json() const {
  std::string out = "{";
  for (std::size_t id = 0; id < tokens_.size(); ++id) {
    if (id) out += ", ";
    out += nlohmann::json(tokens_[id]).dump(-1, ' ', true) + ": " + std::to_string(id);  // \u escapes, as GPT-2's
  }
  return out + "}";
}

std::string BPETokenizer::vocab_bpe() const {
  std::string out = "#version: 0.2\n";
  for (const auto& [a, b] : merges_) out += a + " " + b + "\n";
  return out;
}

void BPETokenizer::save(const std::string& encoder_json_path, const std::string& vocab_bpe_path) const {
  const std::string json = encoder_json(), merges = vocab_bpe();
  write_file_atomically(encoder_json_path, [&](std::ostream& out) { out.write(json.data(), json.size()); });
  write_file_atomically(vocab_bpe_path, [&](std::ostream& out) { out.write(merges.data(), merges.size()); });
}

void BPETokenizer::save(const std::string& folder) const {
  const std::filesystem::path dir(folder);
  save((dir / "encoder.json").string(), (dir / "vocab.bpe").string());
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
    const bool cacheable = piece.size() <= detail::BPECache::kMaxPiece;
    if (cacheable) {
      std::lock_guard<std::mutex> lock(cache_->mutex);
      const auto it = cache_->pieces.find(std::string(piece));
      if (it != cache_->pieces.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        continue;
      }
    }
    symbols.resize(piece.size());
    for (std::size_t i = 0; i < piece.size(); ++i) symbols[i] = t.byte_id[static_cast<unsigned char>(piece[i])];
    merge_symbols(symbols, [&](std::int32_t a, std::int32_t b) { return t.rank_of(a, b); });
    out.insert(out.end(), symbols.begin(), symbols.end());
    if (cacheable) {
      std::lock_guard<std::mutex> lock(cache_->mutex);
      if (cache_->pieces.size() >= detail::BPECache::kMaxEntries) cache_->pieces.clear();
      cache_->pieces.emplace(std::string(piece), symbols);
    }
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
                                  std::to_string(i) + " is outside the vocabulary [0, " +
                                  std::to_string(bytes.size()) + ")");
    out += bytes[id];
  }
  return out;
}

const std::string& BPETokenizer::token(std::int64_t id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= tokens_.size())
    throw std::invalid_argument("BPETokenizer::token: the id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                std::to_string(tokens_.size()) + ")");
  return tokens_[id];
}

std::string BPETokenizer::token_bytes(std::int64_t id) const { return decode({id}); }

std::int64_t BPETokenizer::id(std::string_view token) const {
  const auto it = tables_->id_of_token.find(std::string(token));
  return it == tables_->id_of_token.end() ? -1 : it->second;
}

}  // namespace xgrad::text
