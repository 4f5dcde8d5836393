// Text files through GPT-2's byte-level BPE (xgrad::text) for the example programs: a tokenizer
// loaded from a folder, a text tokenized once into a token file (streamed), a tokenizer trained,
// text sampled from a GPT. Errors are xgrad::train::Refused lines naming the flag.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <xgrad/base/input.hpp>
#include <xgrad/data/token_file.hpp>
#include <xgrad/models/gpt.hpp>
#include <xgrad/text/bpe.hpp>
#include <xgrad/text/bpe_trainer.hpp>
#include <xgrad/train/trainer.hpp>

namespace bpe_text {

// The tokenizer of `dir` (tokenizer.json, vocab.json + merges.txt or encoder.json + vocab.bpe),
// given by `flag`; `hint` is appended to the refusal.
inline xgrad::text::BPETokenizer load(const std::string& flag, const std::string& dir, const std::string& hint = "") {
  try {
    return xgrad::text::BPETokenizer::load(dir);
  } catch (const std::exception& e) {
    throw xgrad::train::Refused(flag + " " + dir + ": no GPT-2 tokenizer: " + e.what() + hint);
  }
}

// Refuses a --text that cannot be read, or that is not a regular file: a FIFO would block the
// open, /dev/zero or /dev/urandom would be read without end (checked with stat, before the open).
inline void check_readable(const std::string& path) {
  const std::string kind = xgrad::train::special_file_kind(path);
  if (!kind.empty())
    throw xgrad::train::Refused("cannot read --text " + path + ": it is " + kind +
                                ", not a regular file; expected a text file");
  if (!xgrad::is_readable_regular_file(path))
    throw xgrad::train::Refused("cannot read --text " + path + ": expected a readable text file");
}

// `text` through `tok` (a BPETokenizer or a text::Tokenizer: its encode(text)) into the token file
// `tokens` (ids below `vocab`), by chunks of whole lines of about 1 MiB, so that neither the text
// nor its ids are in memory together.
template <class Tokenizer>
void tokenize(const std::string& text, const std::string& tokens, const Tokenizer& tok, std::uint64_t vocab) {
  check_readable(text);
  xgrad::InputFileStream in("--text", text);
  namespace data = xgrad::data;
  data::write_token_file(tokens, data::TokenFileOptions().dtype(data::token_dtype_for(vocab)).vocab_size(vocab),
                         [&](data::TokenFileWriter& out) {
                           std::string chunk;
                           for (std::string line; std::getline(in, line);) {
                             chunk += line + (in.eof() ? "" : "\n");
                             if (chunk.size() >= (1u << 20)) out.append(tok.encode(chunk)), chunk.clear();
                           }
                           out.append(tok.encode(chunk));
                         });
}

// A byte-level BPE tokenizer of `vocab_size` ids (<|endoftext|> included) trained on the lines of
// `text`, saved as dir/encoder.json + dir/vocab.bpe (the folder is created).
inline void train(const std::string& text, const std::string& dir, std::size_t vocab_size) {
  check_readable(text);
  xgrad::InputFileStream in("--text", text);
  xgrad::text::BPETrainer trainer{xgrad::text::BPETrainerOptions(vocab_size)};
  for (std::string line; std::getline(in, line);) trainer.add(line + "\n");
  std::filesystem::create_directories(dir);
  trainer.train().save(dir);
}

// --train-tokenizer N: a tokenizer of N ids trained on --text, saved into --tokenizer.
inline int train_command(const std::string& text, const std::string& dir, std::size_t vocab_size) {
  if (text.empty() || dir.empty())
    throw xgrad::train::Refused("--train-tokenizer needs --text FILE and --tokenizer DIR");
  train(text, dir, vocab_size);
  std::printf("tokenizer: %zu ids trained on %s, saved to %s\n", vocab_size, text.c_str(), dir.c_str());
  return 0;
}

// `prompt` and `tokens` more drawn from `model` (past its context, from the last block_size
// tokens), as text. An empty prompt starts from <|endoftext|> (GPT-2's unconditional samples; a
// newline for a tokenizer without it), which is not printed.
inline std::string sample(xgrad::models::GPT<float>& model, const xgrad::text::BPETokenizer& tok,
                          const std::string& prompt, std::int64_t tokens, const xgrad::SamplingOptions& options,
                          std::uint64_t seed) {
  const auto eot = tok.special_tokens().find("<|endoftext|>");
  const std::vector<std::int64_t> ids = !prompt.empty()                     ? tok.encode(prompt)
                                        : eot != tok.special_tokens().end() ? std::vector<std::int64_t>{eot->second}
                                                                            : tok.encode("\n");
  xgrad::IndexArray idx = xgrad::IndexArray::from_shape({std::size_t(1), ids.size()});
  std::copy(ids.begin(), ids.end(), idx.begin());
  xgrad::Generator generator(seed);
  const xgrad::IndexArray out = model.generate(idx, tokens, options, &generator, true, model.config().block_size);
  return tok.decode(
      std::vector<std::int64_t>(out.begin() + (prompt.empty() ? std::ptrdiff_t(ids.size()) : 0), out.end()));
}

}  // namespace bpe_text
