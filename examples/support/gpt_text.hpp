// The text of train_gpt: the King James Bible (Debian's bible-kjv) or a UTF-8 file, split by
// lines with a seeded tenth held out (xgrad/text/corpus.hpp), its tokenizer (characters or BPE,
// trained on the training lines, or read back from beside a checkpoint), both parts tokenized into
// token files, and prompts and samples through that tokenizer. Every failure is a
// xgrad::train::Refused line naming the flag.
#pragma once

#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <xgrad/data/token_file.hpp>
#include <xgrad/models/gpt.hpp>
#include <xgrad/text/corpus.hpp>
#include <xgrad/text/utf8.hpp>
#include <xgrad/train/trainer.hpp>

namespace gpt_text {

namespace text = xgrad::text;
using xgrad::train::Refused;

// The verses of the King James Bible, their references ("  1 " after each "Book N" header) stripped.
inline text::LineSource bible() {
  FILE* pipe = popen("COLUMNS=1000 bible \"gen1:1-rev22:21\" 2>/dev/null", "r");
  std::string all;
  if (pipe != nullptr) {
    char buffer[1 << 16];
    for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) all.append(buffer, n);
    pclose(pipe);
  }
  std::vector<std::string> verses;
  std::istringstream lines(all);
  for (std::string line; std::getline(lines, line);) {
    std::size_t i = line.find_first_not_of(' ');
    if (i == 0 || i == std::string::npos || !std::isdigit(static_cast<unsigned char>(line[i]))) continue;  // header
    while (i < line.size() && std::isdigit(static_cast<unsigned char>(line[i]))) ++i;
    if (i < line.size() && line[i] == ' ') verses.push_back(line.substr(i + 1));
  }
  if (verses.empty())
    throw Refused("no King James Bible: the `bible` program printed no verses (apt-get install bible-kjv), "
                  "or pass --text FILE");
  return text::utf8_lines(std::move(verses), "the King James Bible");
}

// The tokenizer file beside a checkpoint.
inline std::string tokenizer_path(const std::string& checkpoint) { return checkpoint + ".tokenizer.json"; }

// The tokenizer of the checkpoint at `path`: the file beside it, else the copy in its metadata (a
// checkpoint copied without its tokenizer file), else, for checkpoints of older builds, the
// characters recorded there.
inline text::Tokenizer saved_tokenizer(const std::string& path, const std::map<std::string, std::string>& metadata) {
  try {
    if (std::filesystem::exists(tokenizer_path(path))) return text::Tokenizer::load(tokenizer_path(path));
    if (const auto json = metadata.find("tokenizer"); json != metadata.end())
      return text::Tokenizer::from_json(json->second, path + "'s tokenizer");
    if (const auto vocab = metadata.find("vocab"); vocab != metadata.end())
      return text::CharTokenizer(text::decode_utf8(vocab->second, path + "'s vocabulary"));
  } catch (const std::exception& e) {
    throw Refused(std::string("cannot read the tokenizer of ") + path + ": " + e.what());
  }
  throw Refused(path + " has no tokenizer: expected " + tokenizer_path(path) + " beside it");
}

// A text, tokenized.
struct Text {
  std::string source;                 // "the King James Bible" or the file
  std::uint64_t lines = 0;
  std::string hash;                   // of the lines: a resumed run checks that its text is the checkpoint's
  std::shared_ptr<text::Tokenizer> tokenizer;
  text::TokenizedCorpus parts;
  std::shared_ptr<const xgrad::data::TokenFile> train, held;
  const char* unit() const { return tokenizer->is_char() ? "characters" : "tokens"; }
  // Held-out tokens per character (1 for characters): nats per token times this is nats per character.
  double tokens_per_character() const {
    return double(parts.held.tokens) / double(std::max<std::uint64_t>(1, parts.held.characters - parts.held.skipped));
  }
};

// Reads the text (`path`, or the Bible when empty), checks it has a held-out line, learns the
// tokenizer from its training lines (`kind`: char or bpe of `vocab_size` ids) unless `saved` is
// given, and tokenizes both parts into `tokens`.train.tok and `tokens`.val.tok.
inline Text read(const std::string& path, std::uint64_t seed, const std::string& kind, std::size_t vocab_size,
                 std::shared_ptr<text::Tokenizer> saved, const std::string& tokens) {
  Text t;
  t.source = path.empty() ? std::string("the King James Bible") : path;
  text::LineSource lines = path.empty() ? bible() : text::utf8_file_lines(path);
  std::uint64_t h = 1469598103934665603ULL, held = 0;
  bool any = false;
  const auto fnv = [&h](std::string_view bytes) {
    for (unsigned char b : bytes) h = (h ^ b) * 1099511628211ULL;
  };
  try {
    lines([&](std::string_view line) {
      held += text::is_held_out(t.lines++, seed);
      any = any || line.find_first_not_of(" \t") != std::string_view::npos;
      fnv(line), fnv("\n");
    });
  } catch (const text::Utf8Error& e) {
    if (path.empty()) throw Refused(e.what());
    throw Refused("--text " + std::string(e.what()) +
                  "; a Latin-1 (ISO-8859-1) file converts with: iconv -f latin1 -t utf-8 " + path + " > " + path +
                  ".utf8");
  } catch (const std::runtime_error& e) {
    throw Refused("cannot read --text " + path + ": expected a readable UTF-8 or ASCII text file (" + e.what() + ")");
  }
  if (!any) throw Refused("--text " + path + " is empty: expected UTF-8 or ASCII text");
  if (held == 0)
    throw Refused(t.source + " has no held-out line (1 line in 10, chosen by --seed " + std::to_string(seed) +
                  "): use a longer text");
  char hash[24];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(h));
  t.hash = hash;
  if (saved) t.tokenizer = std::move(saved);
  else t.tokenizer = std::make_shared<text::Tokenizer>(text::train_tokenizer(kind, vocab_size, text::training_lines(lines, seed)));
  t.parts = text::tokenize_corpus(lines, seed, *t.tokenizer, tokens + ".train.tok", tokens + ".val.tok");
  t.train = std::make_shared<const xgrad::data::TokenFile>(tokens + ".train.tok");
  t.held = std::make_shared<const xgrad::data::TokenFile>(tokens + ".val.tok");
  return t;
}

// --resume with a text that is not the checkpoint's (the file was changed since): refused before
// the model or the DataLoader's position is restored. `windows`: the checkpoint's training windows.
inline void check_same_text(const Text& t, std::size_t block_size, std::size_t windows, const std::string& hash,
                            const std::string& path) {
  const std::size_t now = t.train->size() > block_size ? t.train->size() - block_size : 0;
  if (now == windows && (hash.empty() || hash == t.hash)) return;
  const std::string what = "cannot resume from " + path + ": it was made with another text than the one in " +
                           t.source + " now (changed since?): ";
  const std::string todo = "; resume with the text the checkpoint was trained on, or start a new run without --resume";
  const std::string of = " training windows of " + std::to_string(block_size) + " " + t.unit();
  if (now == windows) throw Refused(what + "the same number of" + of + " (" + std::to_string(now) + ") but another text" + todo);
  throw Refused(what + "expected " + std::to_string(windows) + of + ", got " + std::to_string(now) + todo);
}

// The prompt as ids (1, L); with characters, one outside the vocabulary is refused.
inline xgrad::IndexArray encode_prompt(const text::Tokenizer& tok, const std::string& prompt) {
  std::vector<std::int64_t> ids;
  try {
    text::check_utf8(prompt, "the --sample prompt");
    ids = tok.encode(prompt);
  } catch (const std::exception& e) {
    std::string why = e.what();
    if (why.rfind("CharTokenizer: the character", 0) == 0) {  // "... at byte offset N is not in ..."
      const std::string c = why.substr(19, why.find(" at byte offset") - 19);  // "character 'x' (U+0078)"
      std::string vocab;
      for (char32_t ch : tok.as_char()->chars()) vocab += ch == U'\n' ? std::string("\\n") : text::encode_utf8(ch);
      why = "the prompt's " + c + " is not in the model's vocabulary of " + std::to_string(tok.vocab_size()) +
            " characters: " + vocab;
    }
    throw Refused("--sample: " + why);
  }
  if (ids.empty()) throw Refused("--sample: expected a prompt of at least one character, got ''");
  xgrad::IndexArray idx = xgrad::IndexArray::from_shape({std::size_t(1), ids.size()});
  std::copy(ids.begin(), ids.end(), idx.begin());
  return idx;
}

// The prompt followed by `tokens` drawn from the model, past its context from the last `window`
// (-1: the context length; 0: refused past it).
inline std::string sample(xgrad::models::GPT<float>& model, const text::Tokenizer& tok, const xgrad::IndexArray& prompt,
                          int tokens, int window, const xgrad::SamplingOptions& options, xgrad::Generator& generator) {
  const std::int64_t block = model.config().block_size, length = std::int64_t(prompt.shape(1));
  const std::string unit = tok.is_char() ? " characters" : " tokens";
  if (window == 0 && length + tokens - 1 > block)
    throw Refused("--tokens " + std::to_string(tokens) + " after a prompt of " + std::to_string(length) + unit +
                  " goes beyond the model's context of " + std::to_string(block) + unit +
                  " with --window 0: expected at most " + std::to_string(std::max<std::int64_t>(0, block - length + 1)) +
                  ", or a --window from 1 to " + std::to_string(block));
  const xgrad::IndexArray out =
      model.generate(prompt, tokens, options, &generator, /*use_cache=*/true, window < 0 ? block : window);
  return tok.decode(std::vector<std::int64_t>(out.begin(), out.end()));
}

// FILE.vocab.json of --export-onnx, for examples/onnx/gpt_sample.mjs: {"block_size": T, "vocab":
// [character i, ...]}.
inline void write_vocab_json(const text::CharTokenizer& tok, std::int64_t block_size, const std::string& path) {
  std::string out = "{\"block_size\":" + std::to_string(block_size) + ",\"vocab\":[";
  for (std::size_t i = 0; i < tok.vocab_size(); ++i) {
    out += i ? ",\"" : "\"";
    const char32_t ch = tok.chars()[i];
    if (ch == U'"' || ch == U'\\') out += '\\', out += char(ch);
    else if (ch < 0x20) {
      char code[8];
      std::snprintf(code, sizeof code, "\\u%04x", unsigned(ch));
      out += code;
    } else out += text::encode_utf8(ch);
    out += '"';
  }
  out += "]}\n";
  xgrad::write_file_atomically(path, [&](std::ostream& o) { o << out; });
}

}  // namespace gpt_text
