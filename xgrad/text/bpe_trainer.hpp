// A byte-level BPE trainer: GPT-2's tokenizer, learnt from your text.
//
// compile: snippet given: std::vector<std::string> lines{"low lower lowest"};
//   xgrad::text::BPETrainer trainer(xgrad::text::BPETrainerOptions(1024));
//   for (const auto& line : lines) trainer.add(line);
//   xgrad::text::BPETokenizer tok = trainer.train();
//   tok.save("out/");                       // out/encoder.json + out/vocab.bpe, GPT-2's format
//
// The text is cut by GPT-2's pattern (pretokenizer.hpp), exactly as the tokenizer will cut it,
// and each distinct piece is counted. Training starts from the 256 byte tokens and repeatedly
// merges the pair of adjacent tokens that occurs most often, counted over the pieces with their
// counts (a pair that occurs twice in a piece counts twice), every occurrence of it left to right.
//
// Ties are broken without hashing or insertion order, so the result depends only on the text:
// among the pairs of the highest count, the one whose (left bytes, right bytes) is
// lexicographically smallest, comparing bytes as unsigned, the left token first.
//
// It stops when the vocabulary (256 bytes + the tokens merges made + the special tokens) reaches
// vocab_size, or when no pair occurs at least max(1, min_frequency) times. A merge whose result
// is a token already made (the same bytes reached by another pair) is recorded in the merge list
// without a new token, as Hugging Face's trainer does; a merge whose result would spell a special
// token is skipped.
//
// The tokenizer it returns has ids 0-255 for the bytes in GPT-2's order (the same ids as GPT-2's
// byte tokens), then the merged tokens in the order they were made, then the special tokens.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <xgrad/arg.hpp>
#include <xgrad/text/bpe.hpp>
#include <xgrad/text/pretokenizer.hpp>

namespace xgrad::text {

struct BPETrainerOptions {
  explicit BPETrainerOptions(std::size_t vocab_size) : vocab_size_(vocab_size) {}
  // The size of the vocabulary trained, special tokens included (at least 256 + their count).
  XGRAD_ARG(std::size_t, vocab_size);
  // A pair is merged only when it occurs at least this often (Hugging Face's min_frequency).
  XGRAD_ARG(std::int64_t, min_frequency) = 0;
  // Appended after the merged tokens; recognized by BPETokenizer::encode with Special::all.
  XGRAD_ARG(std::vector<std::string>, special_tokens) = {"<|endoftext|>"};
};

class BPETrainer {
 public:
  // Throws std::invalid_argument for a vocab_size below 256 + the special tokens (or above 2^30),
  // or a special token that is empty, not valid UTF-8, given twice, or spells a single byte's token.
  explicit BPETrainer(BPETrainerOptions options);

  // Counts the pieces of `text` (any bytes).
  void add(std::string_view text);
  // The tokenizer learnt from everything added so far (deterministic; add() may go on after).
  BPETokenizer train() const;

  // The distinct pieces counted so far and their counts.
  const std::unordered_map<std::string, std::int64_t>& piece_counts() const { return counts_; }
  const BPETrainerOptions& options() const { return options_; }

 private:
  BPETrainerOptions options_;
  Pretokenizer pretokenizer_;
  std::unordered_map<std::string, std::int64_t> counts_;
};

// BPETrainer over `texts`, each added on its own (pieces never span two texts).
BPETokenizer train_bpe(const std::vector<std::string>& texts, const BPETrainerOptions& options);

}  // namespace xgrad::text
