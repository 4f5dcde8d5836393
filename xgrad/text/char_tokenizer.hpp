// A character tokenizer: one id per Unicode character (code point) of a vocabulary learnt from a
// text, as nanoGPT's shakespeare_char. The same calls as BPETokenizer (encode, decode,
// vocab_size), so that a program can take either (tokenizer.hpp's Tokenizer holds one or the other).
//
//   xgrad::text::CharTrainer trainer;
//   for (const auto& line : lines) trainer.add(line + "\n");
//   xgrad::text::CharTokenizer tok = trainer.train();   // the characters seen, sorted: id i is chars()[i]
//   std::vector<std::int64_t> ids = tok.encode("In the beginning");
//   std::string text = tok.decode(ids);
//
// Text is strict UTF-8 (utf8.hpp): anything else throws Utf8Error. A character outside the
// vocabulary throws std::invalid_argument naming it, its code point and its byte offset, unless
// the caller asks for it to be skipped (and counted).
#pragma once

#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace xgrad::text {

class CharTokenizer {
 public:
  // `chars[i]` is token i: distinct code points (no surrogate, none past U+10FFFF), at least one;
  // otherwise std::invalid_argument naming the first bad one.
  explicit CharTokenizer(std::u32string chars);

  // The ids of `text`'s characters; a character outside the vocabulary throws.
  std::vector<std::int64_t> encode(std::string_view text) const;
  // The same, skipping characters outside the vocabulary and adding their number to *skipped.
  std::vector<std::int64_t> encode(std::string_view text, std::size_t* skipped) const;
  // The characters of `ids`; an id outside [0, vocab_size()) throws std::invalid_argument naming
  // it and its position.
  std::string decode(const std::vector<std::int64_t>& ids) const;

  std::size_t vocab_size() const { return chars_.size(); }
  const std::u32string& chars() const { return chars_; }

  // The file, as BPETokenizer's save and load (tokenizer.hpp's format, model.type "Char"):
  //   {"model": {"type": "Char", "vocab": ["\n", " ", "!", ...]}}          (token i is vocab[i])
  // written atomically; a malformed file, or one of another model.type, throws FormatError
  // naming the file and the key.
  std::string to_json() const;
  void save(const std::string& path) const;
  static CharTokenizer load(const std::string& path);
  std::int64_t id(char32_t c) const;  // -1 when absent

 private:
  void encode_into(std::string_view text, std::vector<std::int64_t>& out, std::size_t* skipped) const;

  std::u32string chars_;
  std::array<std::int32_t, 128> ascii_;  // -1: absent
  std::unordered_map<char32_t, std::int32_t> others_;
};

// The characters of a text, added piece by piece.
class CharTrainer {
 public:
  // Adds the characters of `text` (strict UTF-8; Utf8Error naming "the text" otherwise).
  void add(std::string_view text);
  // The characters added so far, sorted by code point; std::invalid_argument when none was.
  CharTokenizer train() const;

 private:
  std::set<char32_t> chars_;
  std::array<bool, 128> ascii_{};
};

}  // namespace xgrad::text
