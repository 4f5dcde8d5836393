// BPETokenizer's files: encoder.json / vocab.json, vocab.bpe / merges.txt, tokenizer.json; the folder
// loader and save(). Every refusal is a FormatError naming the file and the key or line.
#include <xgrad/text/bpe.hpp>

#include <algorithm>
#include <filesystem>
#include <stdexcept>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include <xgrad/base/json_input.hpp>
#include <xgrad/serialize/atomic_file.hpp>
#include <xgrad/serialize/format_error.hpp>
#include <xgrad/text/messages.hpp>

namespace xgrad::text {

using detail::kMaxTokenizerFileBytes;
using detail::kMaxVocab;
using detail::kTokenizerFile;
using detail::quote;

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
      throw FormatError(file + ": " + where({it.key(), 0, -1}) + " must be an integer id, got " +
                        describe_json(it.value()));
    entries.push_back({it.key(), it.value().get<std::int64_t>(), -1});
  }
  for (std::size_t i = 0; i < added.size(); ++i) {
    const auto& [token, id] = added[i];
    const auto it = vocab.find(token);
    const Entry entry{token, id, static_cast<std::int64_t>(i)};
    if (it == vocab.end()) {
      entries.push_back(entry);
    } else if (it.value().get<std::int64_t>() != id) {
      throw FormatError(file + ": " + where(entry) + " has the id " + std::to_string(id) + ", but " + object +
                        " gives it " + std::to_string(it.value().get<std::int64_t>()));
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

nlohmann::json parse_tokenizer_file(std::string_view bytes, const std::string& file) {
  return parse_json(file, bytes, kMaxTokenizerFileBytes);
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
  if (!it->is_string()) throw FormatError(file + ": " + path + key + " must be a string, got " + describe_json(*it));
  return it->get<std::string>();
}

// A key that must be absent, null, false or "" (an option that would change the result).
void refuse_set(const nlohmann::json& object, const char* key, const std::string& file, const std::string& path,
                const char* why) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null() || (it->is_boolean() && !it->get<bool>()) ||
      (it->is_string() && it->get<std::string>().empty()))
    return;
  throw FormatError(file + ": " + path + key + " is " + describe_json(*it) + ": " + why + " is not supported");
}

void check_byte_level(const nlohmann::json& pre, const std::string& file) {
  if (!pre.is_object()) throw FormatError(file + ": pre_tokenizer must be an object, got " + describe_json(pre));
  const std::string type = string_at(pre, "type", file, "pre_tokenizer.");
  if (type != "ByteLevel")
    throw FormatError(file + ": pre_tokenizer.type is '" + type + "'; only 'ByteLevel' (GPT-2's) is supported");
  refuse_set(pre, "add_prefix_space", file, "pre_tokenizer.", "adding a space before the text");
  const auto it = pre.find("use_regex");
  if (it != pre.end() && !(it->is_boolean() && it->get<bool>()))
    throw FormatError(file + ": pre_tokenizer.use_regex is " + describe_json(*it) +
                      "; only GPT-2's pattern (true) is supported");
}

// GPT-2's byte-level BPE has no normalizer: a set one is refused, naming its type when it has one.
void check_no_normalizer(const JsonValue& normalizer) {
  if (normalizer.expect_object_or_null().is_null()) return;
  const nlohmann::json& type = normalizer.json().contains("type") ? normalizer.json()["type"] : nlohmann::json();
  throw FormatError(normalizer.file() + ": normalizer is set (" +
                    (type.is_string() ? type.get<std::string>().substr(0, 60) : describe_json(type)) +
                    "); GPT-2's byte-level BPE has none, and no normalizer is supported");
}

Loaded parse_tokenizer_json(const nlohmann::json& root, const std::string& file) {
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
  check_no_normalizer(JsonValue(file, root).at_or_null("normalizer"));
  if (root.contains("pre_tokenizer") && !root["pre_tokenizer"].is_null())
    check_byte_level(root["pre_tokenizer"], file);
  else
    throw FormatError(file + ": no key 'pre_tokenizer'; expected GPT-2's ByteLevel pre-tokenizer");
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
      if (parsed.size() != 1) throw FormatError(where + ": expected \"left right\", got " + describe_json(m));
      loaded.merges.push_back(parsed[0]);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      loaded.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      throw FormatError(where + ": expected \"left right\" or [\"left\", \"right\"], got " + describe_json(m));
    }
  }
  for (const auto& [token, id] : added) loaded.special.push_back(token);
  return loaded;
}

// Names the file for errors raised while building from `loaded`.
BPETokenizer build(Loaded loaded, const std::string& vocab_origin, const std::string& merges_origin) {
  try {
    return BPETokenizer(std::move(loaded.tokens), std::move(loaded.merges), std::move(loaded.special));
  } catch (const std::invalid_argument& e) {
    // The constructor's message starts with "BPETokenizer: "; the merge errors name the merge.
    std::string what = e.what();
    const std::string prefix = "BPETokenizer: ";
    if (what.compare(0, prefix.size(), prefix) == 0) what = what.substr(prefix.size());
    const bool merge = what.compare(0, 6, "merge ") == 0;
    throw FormatError((merge ? merges_origin : vocab_origin) + ": " + what);
  }
}

}  // namespace

BPETokenizer BPETokenizer::from_json_and_merges(std::string_view encoder_json, std::string_view vocab_bpe,
                                                const std::string& json_name, const std::string& merges_name) {
  Loaded loaded;
  loaded.tokens = vocab_from_json(parse_tokenizer_file(encoder_json, json_name), json_name, "");
  loaded.merges = merges_from_text(vocab_bpe, merges_name);
  loaded.special = unreachable_tokens(loaded.tokens, loaded.merges);
  return build(std::move(loaded), json_name, merges_name);
}

BPETokenizer BPETokenizer::from_tokenizer_json_bytes(std::string_view bytes, const std::string& name) {
  return from_parsed_tokenizer_json(parse_tokenizer_file(bytes, name), name);
}

BPETokenizer BPETokenizer::from_parsed_tokenizer_json(const nlohmann::json& root, const std::string& name) {
  return build(parse_tokenizer_json(root, name), name + ": model.vocab", name + ": model.merges");
}

bool BPETokenizer::is_gpt2_tokenizer_json(const nlohmann::json& root) {
  static const nlohmann::json null;
  const auto member = [](const nlohmann::json& object, const char* key) -> const nlohmann::json& {
    const auto it = object.is_object() ? object.find(key) : object.end();
    return it == object.end() ? null : *it;
  };
  const auto is_type = [&](const nlohmann::json& step, const char* type) { return member(step, "type") == type; };
  const auto unset = [](const nlohmann::json& v) { return v.is_null() || v == false; };
  const nlohmann::json &pre = member(root, "pre_tokenizer"), &post = member(root, "post_processor"),
                       &decoder = member(root, "decoder"), &model = member(root, "model");
  return member(root, "normalizer").is_null() && is_type(pre, "ByteLevel") && unset(member(pre, "add_prefix_space")) &&
         (member(pre, "use_regex").is_null() || member(pre, "use_regex") == true) &&
         (post.is_null() || is_type(post, "ByteLevel")) && (decoder.is_null() || is_type(decoder, "ByteLevel")) &&
         model.is_object() && unset(member(model, "byte_fallback")) && unset(member(model, "ignore_merges"));
}

BPETokenizer BPETokenizer::from_files(const std::string& encoder_json, const std::string& vocab_bpe) {
  const std::string json = read_regular_file("BPETokenizer", encoder_json, kMaxTokenizerFileBytes, kTokenizerFile);
  const std::string merges = read_regular_file("BPETokenizer", vocab_bpe, kMaxTokenizerFileBytes, kTokenizerFile);
  return from_json_and_merges(json, merges, encoder_json, vocab_bpe);
}

BPETokenizer BPETokenizer::from_tokenizer_json(const std::string& path) {
  return from_tokenizer_json_bytes(read_regular_file("BPETokenizer", path, kMaxTokenizerFileBytes, kTokenizerFile),
                                   path);
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

std::string BPETokenizer::tokenizer_json() const {
  // std::map-backed objects, keys sorted (an ordered_json object inserts in linear time: 50,257
  // tokens would take seconds); readers do not mind the order.
  nlohmann::json root, vocab = nlohmann::json::object(), added = nlohmann::json::array(),
                       merges = nlohmann::json::array();
  for (const auto& [name, id] : special_)
    added.push_back({{"id", id},
                     {"content", name},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  for (std::size_t id = 0; id < tokens_.size(); ++id) vocab[tokens_[id]] = id;
  for (const auto& [a, b] : merges_) merges.push_back(a + " " + b);
  const nlohmann::json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  root["version"] = "1.0";
  root["truncation"] = nullptr;
  root["padding"] = nullptr;
  root["added_tokens"] = added;
  root["normalizer"] = nullptr;
  root["pre_tokenizer"] = byte_level;
  root["post_processor"] = byte_level;
  root["decoder"] = byte_level;
  root["model"] = {{"type", "BPE"},
                   {"dropout", nullptr},
                   {"unk_token", nullptr},
                   {"continuing_subword_prefix", nullptr},
                   {"end_of_word_suffix", nullptr},
                   {"fuse_unk", false},
                   {"byte_fallback", false},
                   {"vocab", vocab},
                   {"merges", merges}};
  return root.dump(1, ' ', true) + "\n";
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

}  // namespace xgrad::text
