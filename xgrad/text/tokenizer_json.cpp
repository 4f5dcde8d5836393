// HFTokenizer: reading a tokenizer.json into its steps (tokenizer_json_steps.hpp), and encode /
// decode. Every refusal is a FormatError "FILE: KEY.PATH ...: expected ..., got ...".
#include <xgrad/text/tokenizer_json.hpp>

#include <algorithm>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include <xgrad/base/input.hpp>
#include <xgrad/base/json_input.hpp>
#include <xgrad/serialize/format_error.hpp>
#include <xgrad/text/bpe_merge.hpp>
#include <xgrad/text/messages.hpp>
#include <xgrad/text/tokenizer_json_steps.hpp>

namespace xgrad::text {

using detail::kMaxTokenizerFileBytes;
using detail::kMaxVocab;
using detail::kTokenizerFile;
using detail::quote;
using json = nlohmann::json;

namespace {

// Reads values of one file; each failure names the file and the key path.
class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}
  const std::string& file() const { return file_; }
  // The largest id accepted: the number of model.vocab and added_tokens entries, plus room for a
  // few holes (the tables are indexed by id: a forged id of 2^30 must not cost gigabytes).
  std::int64_t max_id = 0;

  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw FormatError(file_ + ": " + path + " " + what);
  }
  [[noreturn]] void expected(const std::string& path, const std::string& what, const json& got) const {
    fail(path, "must be " + what + ", got " + describe_json(got));
  }
  // The member, or nullptr when absent or null.
  static const json* find(const json& object, const char* key) {
    const auto it = object.find(key);
    return it == object.end() || it->is_null() ? nullptr : &*it;
  }
  const json& object(const json& v, const std::string& path) const {
    if (!v.is_object()) expected(path, "an object", v);
    return v;
  }
  const json& list(const json& object, const char* key, const std::string& path) const {
    const json* v = find(object, key);
    if (!v) fail(path + "." + key, "is missing: expected a list");
    if (!v->is_array()) expected(path + "." + key, "a list", *v);
    return *v;
  }
  std::string string(const json& object, const char* key, const std::string& path,
                     const char* fallback = nullptr) const {
    const json* v = find(object, key);
    if (!v) {
      if (fallback) return fallback;
      fail(path + "." + key, "is missing: expected a string");
    }
    if (!v->is_string()) expected(path + "." + key, "a string", *v);
    return v->get<std::string>();
  }
  bool boolean(const json& object, const char* key, const std::string& path, bool fallback) const {
    const json* v = find(object, key);
    if (!v) return fallback;
    if (!v->is_boolean()) expected(path + "." + key, "true or false", *v);
    return v->get<bool>();
  }
  std::int64_t integer(const json& v, const std::string& path, std::int64_t lo, std::int64_t hi) const {
    if (!v.is_number_integer() || v.get<std::int64_t>() < lo || v.get<std::int64_t>() > hi ||
        (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi)))
      expected(path, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", v);
    return v.get<std::int64_t>();
  }
  // An object's "type".
  std::string type(const json& v, const std::string& path) const {
    object(v, path);
    return string(v, "type", path);
  }
  [[noreturn]] void unsupported(const std::string& path, const std::string& type, const char* supported) const {
    fail(path + ".type", "is " + quote(type) + ", which is not supported; supported: " + supported);
  }
  // {"String": s} or {"Regex": s}.
  std::shared_ptr<const Regex> pattern(const json& object, const std::string& path) const {
    const json* v = find(object, "pattern");
    if (!v || !v->is_object() || v->size() != 1)
      fail(path + ".pattern", "must be {\"String\": ...} or {\"Regex\": ...}");
    const bool literal = v->contains("String");
    const std::string where = path + ".pattern." + (literal ? "String" : "Regex");
    const json& text = literal ? (*v)["String"] : v->contains("Regex") ? (*v)["Regex"] : *v;
    if (!text.is_string()) fail(path + ".pattern", "must be {\"String\": ...} or {\"Regex\": ...}");
    try {
      return std::make_shared<const Regex>(text.get<std::string>(), literal);
    } catch (const std::invalid_argument& e) {
      fail(where, std::string("is refused: ") + e.what());
    }
  }
  // A string of one character (Metaspace's replacement, Strip's content).
  std::string one_char(const json& object, const char* key, const std::string& path, const char* fallback) const {
    std::string c = string(object, key, path, fallback);
    if (c.empty() || !is_valid_utf8(c) || check_utf8(c, "") != 1)
      fail(path + "." + key, "must be one character, got " + quote(c));
    return c;
  }

 private:
  std::string file_;
};

std::string at(const std::string& path, const char* key, std::size_t i) {
  return path + "." + key + "[" + std::to_string(i) + "]";
}

// ---------------------------------------------------------------------------------------------
// normalizer, pre_tokenizer, decoder

void read_normalizer(const Reader& r, const json& v, const std::string& path, std::vector<hf::Normalizer>& out) {
  if (v.is_null()) return;
  const std::string type = r.type(v, path);
  hf::Normalizer step;
  if (type == "Sequence") {
    const json& list = r.list(v, "normalizers", path);
    for (std::size_t i = 0; i < list.size(); ++i) read_normalizer(r, list[i], at(path, "normalizers", i), out);
    return;
  } else if (type == "Prepend") {
    step.kind = hf::Normalizer::Kind::prepend;
    step.text = r.string(v, "prepend", path);
  } else if (type == "Replace") {
    step.kind = hf::Normalizer::Kind::replace;
    step.pattern = r.pattern(v, path);
    step.text = r.string(v, "content", path);
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    step.form = type == "NFC"    ? NormalizationForm::NFC
                : type == "NFD"  ? NormalizationForm::NFD
                : type == "NFKC" ? NormalizationForm::NFKC
                                 : NormalizationForm::NFKD;
  } else {
    r.unsupported(path, type, "null, Sequence, Prepend, Replace, NFC, NFD, NFKC, NFKD");
  }
  out.push_back(std::move(step));
}

// Metaspace's prepend_scheme, or the older add_prefix_space.
bool metaspace_prepend(const Reader& r, const json& v, const std::string& path, hf::PreTokenizer::Prepend& scheme) {
  const std::string fallback = r.boolean(v, "add_prefix_space", path, true) ? "always" : "never";
  const std::string s = r.string(v, "prepend_scheme", path, fallback.c_str());
  if (s != "always" && s != "first" && s != "never")
    r.fail(path + ".prepend_scheme", "must be \"always\", \"first\" or \"never\", got " + quote(s));
  scheme = s == "always"  ? hf::PreTokenizer::Prepend::always
           : s == "first" ? hf::PreTokenizer::Prepend::first
                          : hf::PreTokenizer::Prepend::never;
  return scheme != hf::PreTokenizer::Prepend::never;
}

hf::SplitBehavior split_behavior(const Reader& r, const json& v, const std::string& path) {
  const std::string b = r.string(v, "behavior", path);
  if (b == "Removed") return hf::SplitBehavior::removed;
  if (b == "Isolated") return hf::SplitBehavior::isolated;
  if (b == "MergedWithPrevious") return hf::SplitBehavior::merged_with_previous;
  if (b == "MergedWithNext") return hf::SplitBehavior::merged_with_next;
  if (b == "Contiguous") return hf::SplitBehavior::contiguous;
  r.fail(path + ".behavior",
         "must be Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous, got " + quote(b));
}

void read_pre_tokenizer(const Reader& r, const json& v, const std::string& path, std::vector<hf::PreTokenizer>& out) {
  if (v.is_null()) return;
  const std::string type = r.type(v, path);
  hf::PreTokenizer step;
  if (type == "Sequence") {
    const json& list = r.list(v, "pretokenizers", path);
    for (std::size_t i = 0; i < list.size(); ++i) read_pre_tokenizer(r, list[i], at(path, "pretokenizers", i), out);
    return;
  } else if (type == "Split") {
    step.pattern = r.pattern(v, path);
    step.behavior = split_behavior(r, v, path);
    step.invert = r.boolean(v, "invert", path, false);
  } else if (type == "ByteLevel") {
    step.kind = hf::PreTokenizer::Kind::byte_level;
    step.add_prefix_space = r.boolean(v, "add_prefix_space", path, true);
    step.use_regex = r.boolean(v, "use_regex", path, true);
  } else if (type == "Metaspace") {
    step.kind = hf::PreTokenizer::Kind::metaspace;
    step.replacement = r.one_char(v, "replacement", path, "\xE2\x96\x81");
    metaspace_prepend(r, v, path, step.prepend);
    step.split = r.boolean(v, "split", path, true);
    step.pattern = std::make_shared<const Regex>(step.replacement, true);
  } else {
    r.unsupported(path, type, "null, Sequence, Split, ByteLevel, Metaspace");
  }
  out.push_back(std::move(step));
}

void read_decoder(const Reader& r, const json& v, const std::string& path, std::vector<hf::Decoder>& out) {
  const std::string type = r.type(v, path);
  hf::Decoder step;
  if (type == "Sequence") {
    const json& list = r.list(v, "decoders", path);
    for (std::size_t i = 0; i < list.size(); ++i) read_decoder(r, list[i], at(path, "decoders", i), out);
    return;
  } else if (type == "ByteLevel") {
  } else if (type == "Replace") {
    step.kind = hf::Decoder::Kind::replace;
    step.pattern = r.pattern(v, path);
    step.content = r.string(v, "content", path);
  } else if (type == "ByteFallback") {
    step.kind = hf::Decoder::Kind::byte_fallback;
  } else if (type == "Fuse") {
    step.kind = hf::Decoder::Kind::fuse;
  } else if (type == "Strip") {
    step.kind = hf::Decoder::Kind::strip;
    step.content = r.one_char(v, "content", path, nullptr);
    const json* start = Reader::find(v, "start");
    const json* stop = Reader::find(v, "stop");
    step.start = start ? r.integer(*start, path + ".start", 0, 1 << 30) : 0;
    step.stop = stop ? r.integer(*stop, path + ".stop", 0, 1 << 30) : 0;
  } else if (type == "Metaspace") {
    step.kind = hf::Decoder::Kind::metaspace;
    step.replacement = r.one_char(v, "replacement", path, "\xE2\x96\x81");
    hf::PreTokenizer::Prepend scheme;
    step.prepend = metaspace_prepend(r, v, path, scheme);
  } else {
    r.unsupported(path, type, "null, Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace");
  }
  out.push_back(std::move(step));
}

// ---------------------------------------------------------------------------------------------
// model, added_tokens, post_processor

// An option that must be unset (absent, null, false, "" or 0) because it is not implemented.
void refuse_set(const Reader& r, const json& object, const char* key, const std::string& path, const char* what) {
  const json* v = Reader::find(object, key);
  if (!v || (v->is_boolean() && !v->get<bool>()) || (v->is_string() && v->get_ref<const std::string&>().empty()) ||
      (v->is_number() && v->get<double>() == 0.0))
    return;
  r.fail(path + "." + key, "is " + describe_json(*v) + ": " + what + " is not supported (expected it unset)");
}

// Registers `token` as the token of `id`; the same id for two different tokens is refused.
void set_token(const Reader& r, hf::Pipeline& p, std::int64_t id, const std::string& token, const std::string& path) {
  if (static_cast<std::size_t>(id) >= p.tokens.size()) {
    p.tokens.resize(id + 1);
    p.has_token.resize(id + 1, 0);
    p.special.resize(id + 1, 0);
  }
  if (p.has_token[id] && p.tokens[id] != token)
    r.fail(path, "gives the id " + std::to_string(id) + " to " + quote(token) + ", which " + quote(p.tokens[id]) +
                     " has already");
  p.tokens[id] = token;
  p.has_token[id] = 1;
}

std::int32_t vocab_id(const Reader& r, const hf::BPEModel& m, const std::string& token, const std::string& path,
                      const char* what) {
  const auto it = m.vocab.find(token);
  if (it == m.vocab.end())
    r.fail(path, "names " + std::string(what) + " " + quote(token) + ", which is not in model.vocab");
  return it->second;
}

// One merge: "a b" (one space) or ["a", "b"].
std::pair<std::string, std::string> merge_parts(const Reader& r, const json& m, const std::string& path) {
  if (m.is_string()) {
    const std::string& s = m.get_ref<const std::string&>();
    const std::size_t space = s.find(' ');
    if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
      r.fail(path, "must be \"left right\" (one space), got " + quote(s));
    return {s.substr(0, space), s.substr(space + 1)};
  }
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
    return {m[0].get<std::string>(), m[1].get<std::string>()};
  r.expected(path, "\"left right\" or [\"left\", \"right\"]", m);
}

void read_model(const Reader& r, const json& root, hf::Pipeline& p) {
  const json* found = Reader::find(root, "model");
  if (!found) r.fail("model", "is missing: expected an object with \"type\": \"BPE\"");
  const json& v = r.object(*found, "model");
  const std::string type = r.string(v, "type", "model", "BPE");
  if (type != "BPE") r.fail("model.type", "is " + quote(type) + ": only \"BPE\" is supported");
  refuse_set(r, v, "dropout", "model", "BPE dropout");
  refuse_set(r, v, "continuing_subword_prefix", "model", "a continuing-subword prefix");
  refuse_set(r, v, "end_of_word_suffix", "model", "an end-of-word suffix");
  hf::BPEModel& m = p.model;
  m.fuse_unk = r.boolean(v, "fuse_unk", "model", false);
  m.byte_fallback = r.boolean(v, "byte_fallback", "model", false);
  m.ignore_merges = r.boolean(v, "ignore_merges", "model", false);
  const json* vocab = Reader::find(v, "vocab");
  if (!vocab || !vocab->is_object() || vocab->empty())
    r.fail("model.vocab", "must be an object {\"token\": id, ...} of at least one token");
  if (vocab->size() > kMaxVocab) r.fail("model.vocab", "has more than " + std::to_string(kMaxVocab) + " tokens");
  m.vocab.reserve(vocab->size() * 2);
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    const std::string path = "model.vocab[" + quote(it.key()) + "]";
    const auto id = r.integer(it.value(), path, 0, r.max_id);
    set_token(r, p, id, it.key(), path);
    m.vocab.emplace(it.key(), static_cast<std::int32_t>(id));
  }
  m.byte_ids.fill(-1);
  static const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    const auto it = m.vocab.find(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">");
    if (it != m.vocab.end()) m.byte_ids[b] = it->second;
  }
  const std::string unk = r.string(v, "unk_token", "model", "");
  if (!unk.empty()) m.unk = vocab_id(r, m, unk, "model.unk_token", "the token");
  const json& merges = r.list(v, "merges", "model");
  m.merges.reserve(merges.size() * 2);
  for (std::size_t i = 0; i < merges.size(); ++i) {
    const std::string path = "model.merges[" + std::to_string(i) + "]";
    const auto [a, b] = merge_parts(r, merges[i], path);
    const std::int32_t ia = vocab_id(r, m, a, path, "the left part"), ib = vocab_id(r, m, b, path, "the right part");
    const std::int32_t merged = vocab_id(r, m, a + b, path, "the result");
    const std::uint64_t key = (static_cast<std::uint64_t>(ia) << 32) | static_cast<std::uint32_t>(ib);
    m.merges[key] =
        detail::MergeRule{static_cast<std::int64_t>(i), merged};  // a repeated merge: the last rank, as the library
  }
}

void read_added_tokens(const Reader& r, const json& root, hf::Pipeline& p) {
  const json* list = Reader::find(root, "added_tokens");
  if (!list) return;
  if (!list->is_array()) r.expected("added_tokens", "a list", *list);
  for (std::size_t i = 0; i < list->size(); ++i) {
    const std::string path = "added_tokens[" + std::to_string(i) + "]";
    const json& v = r.object((*list)[i], path);
    const json* id_value = Reader::find(v, "id");
    if (!id_value) r.fail(path + ".id", "is missing: expected an integer");
    const auto id = r.integer(*id_value, path + ".id", 0, r.max_id);
    const std::string content = r.string(v, "content", path);
    if (content.empty()) r.fail(path + ".content", "is empty");
    const bool special = r.boolean(v, "special", path, false);
    const auto in_vocab = p.model.vocab.find(content);
    if (in_vocab != p.model.vocab.end() && in_vocab->second != id)
      r.fail(path + ".id", "is " + std::to_string(id) + ", but model.vocab gives " + quote(content) + " the id " +
                               std::to_string(in_vocab->second));
    set_token(r, p, id, content, path + ".id");
    p.special[id] = special;
    p.added_ids[content] = static_cast<std::int32_t>(id);
    hf::AddedToken token{content, static_cast<std::int32_t>(id), r.boolean(v, "single_word", path, false),
                         r.boolean(v, "lstrip", path, false), r.boolean(v, "rstrip", path, false)};
    if (!r.boolean(v, "normalized", path, !special)) {
      p.raw_added.add(std::move(token));
      continue;
    }
    hf::normalize(p.normalizers, token.content);  // matched in the normalized text, as the library does
    if (token.content.empty()) continue;
    p.tokens[id] = token.content;  // and decoded in that form (its normalized_cache), "▁Hello" for "Hello"
    p.normalized_added.add(std::move(token));
  }
}

// TemplateProcessing's single template: the special tokens' ids before and after $A.
void read_template(const Reader& r, const json& v, const std::string& path, hf::Pipeline& p) {
  const json& items = r.list(v, "single", path);
  const json* specials = Reader::find(v, "special_tokens");
  std::vector<std::int32_t> before, after;
  bool seen_a = false;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::string where = at(path, "single", i);
    const json& item = r.object(items[i], where);
    if (const json* seq = Reader::find(item, "Sequence")) {
      const std::string which = r.string(r.object(*seq, where + ".Sequence"), "id", where + ".Sequence");
      if (which != "A" || seen_a) r.fail(where + ".Sequence.id", "must be \"A\", once, in the single template");
      seen_a = true;
      continue;
    }
    const json* special = Reader::find(item, "SpecialToken");
    if (!special) r.fail(where, "must be {\"SpecialToken\": ...} or {\"Sequence\": ...}");
    const std::string name = r.string(r.object(*special, where + ".SpecialToken"), "id", where + ".SpecialToken");
    const json* entry = specials && specials->is_object() ? Reader::find(*specials, name.c_str()) : nullptr;
    if (!entry) r.fail(path + ".special_tokens", "has no entry " + quote(name) + " (named by " + where + ")");
    const std::string entry_path = path + ".special_tokens[" + quote(name) + "]";
    const json& ids = r.list(r.object(*entry, entry_path), "ids", entry_path);
    for (std::size_t k = 0; k < ids.size(); ++k) {
      const auto id = r.integer(ids[k], at(entry_path, "ids", k), 0, static_cast<std::int64_t>(p.tokens.size()) - 1);
      if (!p.has_token[id]) r.fail(at(entry_path, "ids", k), "is " + std::to_string(id) + ", which has no token");
      (seen_a ? after : before).push_back(static_cast<std::int32_t>(id));
    }
  }
  if (!seen_a) r.fail(path + ".single", "has no {\"Sequence\": {\"id\": \"A\"}}");
  p.before.insert(p.before.begin(), before.begin(), before.end());  // a later processor wraps the earlier ones
  p.after.insert(p.after.end(), after.begin(), after.end());
}

void read_post_processor(const Reader& r, const json& v, const std::string& path, hf::Pipeline& p) {
  if (v.is_null()) return;
  const std::string type = r.type(v, path);
  if (type == "Sequence") {
    const json& list = r.list(v, "processors", path);
    for (std::size_t i = 0; i < list.size(); ++i) read_post_processor(r, list[i], at(path, "processors", i), p);
  } else if (type == "TemplateProcessing") {
    read_template(r, v, path, p);
  } else if (type != "ByteLevel") {  // ByteLevel changes offsets only
    r.unsupported(path, type, "null, Sequence, ByteLevel, TemplateProcessing");
  }
}

const json& member_or_null(const json& root, const char* key) {
  static const json null;
  const auto it = root.find(key);
  return it == root.end() ? null : *it;
}

std::shared_ptr<const hf::Pipeline> read_pipeline(const json& root, const std::string& file) {
  Reader r(file);
  if (!root.is_object()) r.fail("the top level", "must be an object, got " + describe_json(root));
  std::size_t entries = 0;
  for (const char* key : {"model", "added_tokens"}) {
    const json& v = member_or_null(root, key);
    const json& list = v.is_object() ? member_or_null(v, "vocab") : v;
    if (list.is_object() || list.is_array()) entries += list.size();
  }
  r.max_id = static_cast<std::int64_t>(std::min(entries + 1024, kMaxVocab) - 1);
  auto p = std::make_shared<hf::Pipeline>();
  read_normalizer(r, member_or_null(root, "normalizer"), "normalizer", p->normalizers);
  read_pre_tokenizer(r, member_or_null(root, "pre_tokenizer"), "pre_tokenizer", p->pre_tokenizers);
  read_model(r, root, *p);
  read_added_tokens(r, root, *p);
  read_post_processor(r, member_or_null(root, "post_processor"), "post_processor", *p);
  if (const json* decoder = Reader::find(root, "decoder")) {
    p->has_decoder = true;
    read_decoder(r, *decoder, "decoder", p->decoders);
  }
  p->cache = std::make_shared<detail::BPECache>();
  return p;
}

// ---------------------------------------------------------------------------------------------
// Encoding

// The ids of a text and, when `tokens` is set, its tokens as the library's Encoding.tokens gives
// them: an added token as the text it matched (with the white space it strips), the others as
// their vocabulary entry.
struct Encoded {
  std::vector<std::int32_t> ids;
  std::vector<std::string>* tokens = nullptr;
  std::vector<std::int32_t> scratch;

  void added(std::int32_t id, std::string_view match) {
    ids.push_back(id);
    if (tokens) tokens->emplace_back(match);
  }
};

void encode_word(const hf::Pipeline& p, std::string_view word, Encoded& out) {
  const std::size_t first = out.ids.size();
  if (!p.cache->find(word, out.ids)) {
    out.scratch.clear();
    p.model.tokenize(word, out.scratch);
    out.ids.insert(out.ids.end(), out.scratch.begin(), out.scratch.end());
    p.cache->store(word, out.scratch);
  }
  if (out.tokens)
    for (std::size_t i = first; i < out.ids.size(); ++i) out.tokens->push_back(p.tokens[out.ids[i]]);
}

// A normalized stretch: pre-tokenizer, then the model.
void encode_normalized(const hf::Pipeline& p, std::string_view text, bool first, Encoded& out) {
  if (p.pre_tokenizers.empty()) {
    encode_word(p, text, out);
    return;
  }
  hf::pre_tokenize(p.pre_tokenizers, hf::Piece{text, first},
                   [&](const hf::Piece& piece) { encode_word(p, piece.text, out); });
}

// A stretch of the raw text between added tokens: normalized, split at normalized added tokens.
void encode_stretch(const hf::Pipeline& p, std::string_view raw, bool first, Encoded& out) {
  std::string normalized;
  std::string_view text = raw;
  if (!p.normalizers.empty()) {
    normalized.assign(raw);
    hf::normalize(p.normalizers, normalized);
    text = normalized;
  }
  if (p.normalized_added.empty()) {
    encode_normalized(p, text, first, out);
    return;
  }
  p.normalized_added.split(text, [&](std::string_view part, std::int32_t id, std::size_t offset) {
    if (id >= 0)
      out.added(id, part);
    else
      encode_normalized(p, part, first && offset == 0, out);
  });
}

// encode(text, add_special_tokens) into `out`.
void encode_text(const hf::Pipeline& p, std::string_view text, bool add_special_tokens, Encoded& out) {
  check_utf8(text, "HFTokenizer::encode: the text");
  if (add_special_tokens) out.ids = p.before;
  out.ids.reserve(out.ids.size() + text.size() / 3 + 4);
  p.raw_added.split(text, [&](std::string_view part, std::int32_t id, std::size_t offset) {
    if (id >= 0)
      out.added(id, part);
    else
      encode_stretch(p, part, offset == 0, out);
  });
  if (add_special_tokens) out.ids.insert(out.ids.end(), p.after.begin(), p.after.end());
}

}  // namespace

HFTokenizer HFTokenizer::from_json(std::string_view bytes, const std::string& name) {
  return from_parsed_json(parse_json(name, bytes, kMaxTokenizerFileBytes), name);
}

HFTokenizer HFTokenizer::from_parsed_json(const nlohmann::json& root, const std::string& name) {
  return HFTokenizer(read_pipeline(root, name));
}

HFTokenizer HFTokenizer::from_file(const std::string& path) {
  return from_json(read_regular_file("HFTokenizer", path, kMaxTokenizerFileBytes, kTokenizerFile), path);
}

std::vector<std::int64_t> HFTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  Encoded out;
  encode_text(*pipeline_, text, add_special_tokens, out);
  return std::vector<std::int64_t>(out.ids.begin(), out.ids.end());
}

std::vector<std::string> HFTokenizer::tokenize(std::string_view text) const {
  std::vector<std::string> tokens;
  Encoded out;
  out.tokens = &tokens;
  encode_text(*pipeline_, text, false, out);
  return tokens;
}

std::string HFTokenizer::decode(const std::vector<std::int64_t>& ids, bool skip_special_tokens) const {
  const hf::Pipeline& p = *pipeline_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::int64_t id = ids[i];
    if (id < 0 || static_cast<std::size_t>(id) >= p.tokens.size() || !p.has_token[id])
      throw std::invalid_argument("HFTokenizer::decode: the id " + std::to_string(id) + " at position " +
                                  std::to_string(i) + " has no token (the vocabulary has ids below " +
                                  std::to_string(p.tokens.size()) + ")");
    if (skip_special_tokens && p.special[id]) continue;
    tokens.push_back(p.tokens[id]);
  }
  if (p.has_decoder) return hf::decode(p.decoders, std::move(tokens));
  std::string out;  // no decoder: the tokens joined by spaces, as the library does
  for (std::size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
  return out;
}

std::int64_t HFTokenizer::token_to_id(std::string_view token) const {
  const hf::Pipeline& p = *pipeline_;
  const std::string key(token);
  const auto added = p.added_ids.find(key);  // the library looks at added tokens first
  if (added != p.added_ids.end()) return added->second;
  const auto it = p.model.vocab.find(key);
  return it == p.model.vocab.end() ? -1 : it->second;
}

const std::string& HFTokenizer::id_to_token(std::int64_t id) const {
  const hf::Pipeline& p = *pipeline_;
  if (id < 0 || static_cast<std::size_t>(id) >= p.tokens.size() || !p.has_token[id])
    throw std::invalid_argument("HFTokenizer::id_to_token: the id " + std::to_string(id) +
                                " has no token (the vocabulary has ids below " + std::to_string(p.tokens.size()) + ")");
  return p.tokens[id];
}

bool HFTokenizer::is_special(std::int64_t id) const {
  id_to_token(id);  // throws for an id without a token
  return pipeline_->special[id] != 0;
}

std::size_t HFTokenizer::vocab_size() const { return pipeline_->tokens.size(); }

std::int64_t HFTokenizer::bos_token_id() const { return pipeline_->before.empty() ? -1 : pipeline_->before.front(); }

std::int64_t HFTokenizer::eos_token_id() const { return pipeline_->after.empty() ? -1 : pipeline_->after.back(); }

}  // namespace xgrad::text
