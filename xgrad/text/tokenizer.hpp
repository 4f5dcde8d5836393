// A tokenizer chosen at run time: characters (CharTokenizer), GPT-2's byte-level BPE
// (BPETokenizer) or any BPE tokenizer.json of Hugging Face (HFTokenizer: Llama 2 and 3, Qwen2,
// Mistral, SmolLM2), behind the calls they share, saved to and loaded from one JSON file.
//
//   Tokenizer tok = train_tokenizer("bpe", 1024, lines);   // tokenizer.hpp, or "char" (vocab_size unused)
//   tok.save("gpt.ckpt.tokenizer.json");
//   Tokenizer again = Tokenizer::load("gpt.ckpt.tokenizer.json");
//   Tokenizer llama = Tokenizer::load("Llama-3.2-1B/tokenizer.json");   // kind() "hf"
//   std::vector<std::int64_t> ids = again.encode("In the beginning");
//
// The file: a BPE tokenizer is written as Hugging Face's tokenizer.json (BPETokenizer::
// tokenizer_json; Hugging Face's tokenizers read it); a character tokenizer as
//   {"model": {"type": "Char", "vocab": ["\n", " ", "!", ...]}}        (token i is vocab[i])
// load() tells them apart by content: model.type "Char"; model.type "BPE" in GPT-2's byte-level
// form (BPETokenizer::is_gpt2_tokenizer_json: what xgrad writes, GPT-2's own file); any other
// model.type "BPE" (HFTokenizer, saved back as the bytes it was read from). Another model.type is
// refused with xgrad::FormatError naming the file and the key, and so is whatever the chosen
// reader refuses.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <xgrad/text/bpe.hpp>
#include <xgrad/text/char_tokenizer.hpp>
#include <xgrad/text/tokenizer_json.hpp>

namespace xgrad::text {

class Tokenizer {
 public:
  Tokenizer(CharTokenizer tok) : tok_(std::move(tok)) {}  // NOLINT: implicit, as a variant's alternatives
  Tokenizer(BPETokenizer tok) : tok_(std::move(tok)) {}   // NOLINT
  // `json`: the file's text, what to_json() gives back.
  Tokenizer(HFTokenizer tok, std::string json)
      : tok_(std::move(tok)), json_(std::make_shared<const std::string>(std::move(json))) {}

  // "char", "bpe" or "hf".
  const char* kind() const { return is_char() ? "char" : as_bpe() ? "bpe" : "hf"; }
  bool is_char() const { return std::holds_alternative<CharTokenizer>(tok_); }
  const CharTokenizer* as_char() const { return std::get_if<CharTokenizer>(&tok_); }
  const BPETokenizer* as_bpe() const { return std::get_if<BPETokenizer>(&tok_); }
  const HFTokenizer* as_hf() const { return std::get_if<HFTokenizer>(&tok_); }

  // BPE: any bytes, special tokens' text as ordinary text (Special::none). Char: strict UTF-8,
  // a character outside the vocabulary throws std::invalid_argument. HF: UTF-8, as Hugging Face's
  // encode(text, add_special_tokens=false) (added tokens in the text are found; no BOS, no EOS).
  std::vector<std::int64_t> encode(std::string_view text) const;
  // The same, but characters outside a character vocabulary are skipped and counted into
  // *skipped (BPE and HF never skip).
  std::vector<std::int64_t> encode(std::string_view text, std::size_t* skipped) const;
  // HF: decode(ids, skip_special_tokens=false).
  std::string decode(const std::vector<std::int64_t>& ids) const;
  std::size_t vocab_size() const;

  // The file's contents, and the file written atomically (write_file_atomically).
  std::string to_json() const;
  void save(const std::string& path) const;
  // `name` stands for the file in messages. The text is parsed once.
  static Tokenizer from_json(std::string_view bytes, const std::string& name = "tokenizer.json");
  static Tokenizer load(const std::string& path);

 private:
  std::variant<CharTokenizer, BPETokenizer, HFTokenizer> tok_;
  std::shared_ptr<const std::string> json_;  // HF: the file's text (copies share it)
};

// The lines of a text, each given once to the callback (without its line end).
using LineSink = std::function<void(std::string_view line)>;
using LineSource = std::function<void(const LineSink& sink)>;

// A tokenizer learnt from the lines of `training`, each followed by "\n": kind "char" (the
// characters seen; vocab_size is not used) or "bpe" (BPETrainer: byte-level, deterministic, with
// <|endoftext|>; vocab_size ids in all). Another kind throws std::invalid_argument.
Tokenizer train_tokenizer(const std::string& kind, std::size_t vocab_size, const LineSource& training);

}  // namespace xgrad::text
