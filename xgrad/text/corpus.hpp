// A text corpus for language-model training: its lines read strictly as UTF-8, a seeded tenth of
// them held out, both parts tokenized once into token files (data/token_file.hpp, nanoGPT's
// train.bin and val.bin), from which windows are drawn by offset.
//
//   LineSource lines = utf8_file_lines("input.txt");                  // read as it goes, never whole
//   Tokenizer tok = train_tokenizer("bpe", 1024, training_lines(lines, seed));
//   TokenizedCorpus c = tokenize_corpus(lines, seed, tok, "train.tok", "val.tok");
//   // c.held.tokens ids for c.held.characters characters: bits per character =
//   //   (mean held-out nats per token) * c.held.tokens / c.held.characters / ln 2
//
// Each line is encoded with "\n" after it, on its own (no token spans two lines). Memory holds
// one chunk of the file and one line's ids at a time, whatever the corpus' size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <xgrad/text/tokenizer.hpp>

namespace xgrad::text {

// The lines of the file at `path` (each without "\n" or "\r\n"; a final newline does not start
// another line), read in chunks each time the source is called. The file must be a regular file
// (a FIFO or a device is refused before it is read, std::runtime_error naming `path`) and strict
// UTF-8 (Utf8Error naming `path`, the byte offset and the line).
LineSource utf8_file_lines(const std::string& path);
// Lines in memory, each checked as UTF-8 (`name` names them in the error, with the line).
LineSource utf8_lines(std::vector<std::string> lines, const std::string& name);

// Whether line `index` (0-based) is held out: 1 line in 10, by a seeded hash of the index
// (FNV-1a, then splitmix's finalizer), so the split depends only on the seed and the position.
bool is_held_out(std::uint64_t index, std::uint64_t seed);
// The lines of `lines` that are not held out.
LineSource training_lines(LineSource lines, std::uint64_t seed);

// One part of a tokenized corpus.
struct TokenizedPart {
  std::uint64_t lines = 0;
  std::uint64_t characters = 0;  // code points, the "\n" ending each line included
  std::uint64_t tokens = 0;      // ids in the token file
  std::uint64_t skipped = 0;     // characters outside a character tokenizer's vocabulary, not encoded
};

struct TokenizedCorpus {
  TokenizedPart train, held;
};

// Writes the training lines' ids to `train_path` and the held-out lines' to `held_path`
// (data::write_token_file: atomically, uint16 or uint32 ids as the vocabulary needs, its size
// recorded). Characters a character tokenizer does not know are skipped and counted.
TokenizedCorpus tokenize_corpus(const LineSource& lines, std::uint64_t seed, const Tokenizer& tok,
                                const std::string& train_path, const std::string& held_path);

}  // namespace xgrad::text
