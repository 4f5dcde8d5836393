#include <xgrad/text/tokenizer.hpp>

#include <stdexcept>

#include <nlohmann/json.hpp>

#include <xgrad/base/json_input.hpp>
#include <xgrad/serialize/atomic_file.hpp>
#include <xgrad/serialize/format_error.hpp>
#include <xgrad/text/bpe_trainer.hpp>
#include <xgrad/text/messages.hpp>
#include <xgrad/text/utf8.hpp>

namespace xgrad::text {

std::vector<std::int64_t> Tokenizer::encode(std::string_view text) const {
  if (const auto* c = as_char()) return c->encode(text);
  if (const auto* h = as_hf()) return h->encode(text, /*add_special_tokens=*/false);
  return std::get<BPETokenizer>(tok_).encode(text);
}

std::vector<std::int64_t> Tokenizer::encode(std::string_view text, std::size_t* skipped) const {
  if (const auto* c = as_char()) return c->encode(text, skipped);
  return encode(text);
}

std::string Tokenizer::decode(const std::vector<std::int64_t>& ids) const {
  if (const auto* c = as_char()) return c->decode(ids);
  if (const auto* h = as_hf()) return h->decode(ids);
  return std::get<BPETokenizer>(tok_).decode(ids);
}

std::size_t Tokenizer::vocab_size() const {
  return std::visit([](const auto& tok) { return tok.vocab_size(); }, tok_);
}

std::string Tokenizer::to_json() const {
  if (const auto* b = as_bpe()) return b->tokenizer_json();
  if (as_hf()) return *json_;
  return as_char()->to_json();
}

void Tokenizer::save(const std::string& path) const {
  const std::string json = to_json();
  write_file_atomically(path, [&](std::ostream& out) { out.write(json.data(), std::streamsize(json.size())); });
}

namespace {

// {"model": {"type": "Char", "vocab": [...]}}
CharTokenizer char_tokenizer(const nlohmann::json& model, const std::string& name) {
  const auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_array() || vocab->empty())
    throw FormatError(name + ": model.vocab must be a non-empty list of characters");
  std::u32string chars;
  for (std::size_t i = 0; i < vocab->size(); ++i) {
    const auto& entry = (*vocab)[i];
    const std::string where = name + ": model.vocab[" + std::to_string(i) + "]";
    if (!entry.is_string()) throw FormatError(where + " must be a string, got " + describe_json(entry));
    const std::u32string c = decode_utf8(entry.get<std::string>(), where);
    if (c.size() != 1) throw FormatError(where + " must be one character, got " + describe_json(entry));
    chars += c;
  }
  try {
    return CharTokenizer(std::move(chars));
  } catch (const std::invalid_argument& e) {
    throw FormatError(name + ": model.vocab: " + e.what());
  }
}

}  // namespace

Tokenizer Tokenizer::from_json(std::string_view bytes, const std::string& name) {
  const nlohmann::json root = parse_json(name, bytes, detail::kMaxTokenizerFileBytes);
  const auto model = root.is_object() ? root.find("model") : root.end();
  if (!root.is_object() || model == root.end() || !model->is_object() || !model->contains("type") ||
      !(*model)["type"].is_string())
    throw FormatError(name + ": expected a tokenizer file, an object whose 'model' has a string 'type'");
  const std::string type = (*model)["type"].get<std::string>();
  if (type == "Char") return char_tokenizer(*model, name);
  if (type != "BPE") throw FormatError(name + ": model.type is '" + type + "'; expected 'Char' or 'BPE'");
  if (BPETokenizer::is_gpt2_tokenizer_json(root)) return BPETokenizer::from_parsed_tokenizer_json(root, name);
  return Tokenizer(HFTokenizer::from_parsed_json(root, name), std::string(bytes));
}

Tokenizer Tokenizer::load(const std::string& path) {
  return from_json(read_regular_file("Tokenizer::load", path, detail::kMaxTokenizerFileBytes, detail::kTokenizerFile),
                   path);
}

Tokenizer train_tokenizer(const std::string& kind, std::size_t vocab_size, const LineSource& training) {
  if (kind == "char") {
    CharTrainer trainer;
    training([&](std::string_view line) {
      trainer.add(line);
      trainer.add("\n");
    });
    return trainer.train();
  }
  if (kind == "bpe") {
    BPETrainer trainer{BPETrainerOptions(vocab_size)};
    std::string piece;
    training([&](std::string_view line) {
      piece.assign(line);
      piece += '\n';
      trainer.add(piece);
    });
    return trainer.train();
  }
  throw std::invalid_argument("train_tokenizer: kind '" + kind + "'; expected 'char' or 'bpe'");
}

}  // namespace xgrad::text
