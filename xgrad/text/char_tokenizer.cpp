#include <xgrad/text/char_tokenizer.hpp>

#include <stdexcept>

#include <nlohmann/json.hpp>

#include <xgrad/serialize/atomic_file.hpp>
#include <xgrad/serialize/format_error.hpp>
#include <xgrad/text/tokenizer.hpp>
#include <xgrad/text/utf8.hpp>

namespace xgrad::text {

CharTokenizer::CharTokenizer(std::u32string chars) : chars_(std::move(chars)) {
  if (chars_.empty()) throw std::invalid_argument("CharTokenizer: expected at least one character, got none");
  ascii_.fill(-1);
  for (std::size_t i = 0; i < chars_.size(); ++i) {
    const char32_t c = chars_[i];
    if ((c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF)
      throw std::invalid_argument("CharTokenizer: token " + std::to_string(i) + " is " + code_point_name(c) +
                                  ", which is not a character");
    if (id(c) >= 0)
      throw std::invalid_argument("CharTokenizer: the character " + code_point_name(c) + " is token " +
                                  std::to_string(id(c)) + " and token " + std::to_string(i));
    if (c < 128)
      ascii_[c] = std::int32_t(i);
    else
      others_.emplace(c, std::int32_t(i));
  }
}

std::int64_t CharTokenizer::id(char32_t c) const {
  if (c < 128) return ascii_[c];
  const auto it = others_.find(c);
  return it == others_.end() ? -1 : it->second;
}

void CharTokenizer::encode_into(std::string_view text, std::vector<std::int64_t>& out, std::size_t* skipped) const {
  const std::u32string chars = decode_utf8(text, "the text");
  out.reserve(out.size() + chars.size());
  std::size_t offset = 0;  // of the character, in bytes
  for (char32_t c : chars) {
    const std::int64_t i = id(c);
    if (i >= 0) {
      out.push_back(i);
    } else if (skipped != nullptr) {
      ++*skipped;
    } else {
      throw std::invalid_argument("CharTokenizer: the character '" + (c < 0x20 ? std::string("?") : encode_utf8(c)) +
                                  "' (" + code_point_name(c) + ") at byte offset " + std::to_string(offset) +
                                  " is not in the vocabulary of " + std::to_string(chars_.size()) + " characters");
    }
    offset += c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
  }
}

std::vector<std::int64_t> CharTokenizer::encode(std::string_view text) const {
  std::vector<std::int64_t> out;
  encode_into(text, out, nullptr);
  return out;
}

std::vector<std::int64_t> CharTokenizer::encode(std::string_view text, std::size_t* skipped) const {
  std::size_t ignored = 0;
  std::vector<std::int64_t> out;
  encode_into(text, out, skipped != nullptr ? skipped : &ignored);
  return out;
}

std::string CharTokenizer::decode(const std::vector<std::int64_t>& ids) const {
  std::string out;
  out.reserve(ids.size());
  for (std::size_t k = 0; k < ids.size(); ++k) {
    if (ids[k] < 0 || std::uint64_t(ids[k]) >= chars_.size())
      throw std::invalid_argument("CharTokenizer::decode: id " + std::to_string(ids[k]) + " at position " +
                                  std::to_string(k) + " is outside the vocabulary [0, " +
                                  std::to_string(chars_.size()) + ")");
    out += encode_utf8(chars_[std::size_t(ids[k])]);
  }
  return out;
}

std::string CharTokenizer::to_json() const {
  nlohmann::ordered_json vocab = nlohmann::ordered_json::array();
  for (char32_t c : chars_) vocab.push_back(encode_utf8(c));
  const nlohmann::ordered_json root = {{"model", {{"type", "Char"}, {"vocab", vocab}}}};
  return root.dump(-1, ' ', true) + "\n";
}

void CharTokenizer::save(const std::string& path) const {
  const std::string json = to_json();
  write_file_atomically(path, [&](std::ostream& out) { out.write(json.data(), std::streamsize(json.size())); });
}

CharTokenizer CharTokenizer::load(const std::string& path) {
  const Tokenizer tok = Tokenizer::load(path);
  if (!tok.is_char()) throw FormatError(path + ": model.type is 'BPE'; expected 'Char'");
  return *tok.as_char();
}

void CharTrainer::add(std::string_view text) {
  for (char b : text)
    if (static_cast<unsigned char>(b) >= 0x80) {  // decoded first: a text that is not UTF-8 adds nothing
      for (char32_t c : decode_utf8(text, "the text")) (c < 128 ? void(ascii_[c] = true) : void(chars_.insert(c)));
      return;
    }
  for (char b : text) ascii_[static_cast<unsigned char>(b)] = true;
}

CharTokenizer CharTrainer::train() const {
  std::u32string chars;
  for (char32_t c = 0; c < 128; ++c)
    if (ascii_[c]) chars.push_back(c);
  chars.append(chars_.begin(), chars_.end());
  if (chars.empty()) throw std::invalid_argument("CharTrainer::train: no character was added");
  return CharTokenizer(std::move(chars));
}

}  // namespace xgrad::text
