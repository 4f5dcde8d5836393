// The text of train_gpt: the King James Bible (Debian's bible-kjv) or a UTF-8 file, split by
// lines with a seeded tenth held out (xgrad/text/corpus.hpp), its tokenizer (characters or BPE,
// trained on the training lines, or read back from beside a checkpoint), both parts tokenized into
// token files, and prompts and samples through that tokenizer. Every failure is a
// xgrad::train::Refused line naming the flag.
#pragma once

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <xtensor/xview.hpp>

#include <xgrad/data/token_file.hpp>
#include <xgrad/models/gpt.hpp>
#include <xgrad/train/world.hpp>
#include <xgrad/xgrad.hpp>

#include <CLI/CLI.hpp>
#ifdef XGRAD_WITH_ONNX
#include "gpt_onnx.hpp"
#endif
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
    throw Refused(
        "no King James Bible: the `bible` program printed no verses (apt-get install bible-kjv), "
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

// --tokenizer names a file rather than char or bpe.
inline bool is_tokenizer_file(const std::string& tokenizer) { return tokenizer != "char" && tokenizer != "bpe"; }

// --tokenizer FILE: a tokenizer file as Tokenizer::load reads it (one saved by train_gpt, GPT-2's
// tokenizer.json, any BPE tokenizer.json of Hugging Face).
inline std::shared_ptr<text::Tokenizer> tokenizer_file(const std::string& path) {
  try {
    return std::make_shared<text::Tokenizer>(text::Tokenizer::load(path));
  } catch (const std::exception& e) {
    throw Refused("--tokenizer " + path + ": expected char, bpe or a tokenizer file: " + e.what());
  }
}

// A text, tokenized.
struct Text {
  std::string source;  // "the King James Bible" or the file
  std::uint64_t lines = 0;
  std::string hash;  // of the lines: a resumed run checks that its text is the checkpoint's
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
// given (a resumed run's, or --tokenizer FILE's), and tokenizes both parts into `tokens`.train.tok
// and `tokens`.val.tok.
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
  if (saved)
    t.tokenizer = std::move(saved);
  else
    t.tokenizer =
        std::make_shared<text::Tokenizer>(text::train_tokenizer(kind, vocab_size, text::training_lines(lines, seed)));
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
  if (now == windows)
    throw Refused(what + "the same number of" + of + " (" + std::to_string(now) + ") but another text" + todo);
  throw Refused(what + "expected " + std::to_string(windows) + of + ", got " + std::to_string(now) + todo);
}

// The text of a run: tokenized by `kind` (char or bpe of vocab_size ids trained on it, or a
// tokenizer file) or, when resuming (`resumed` not null), by the checkpoint's tokenizer, the text checked to be the
// checkpoint's; into `prefix`.train.tok and .val.tok. Each part must hold a window of block_size + 1
// tokens, the training part one more per window of a batch.
inline Text read_for_run(const std::string& path, std::uint64_t seed, const std::string& kind, std::size_t vocab_size,
                         std::size_t block_size, std::size_t batch_size, const xgrad::Checkpoint<float>* resumed,
                         const std::string& resume_path, const std::string& prefix) {
  std::shared_ptr<text::Tokenizer> tok;
  if (resumed)
    tok = std::make_shared<text::Tokenizer>(saved_tokenizer(resume_path, resumed->metadata));
  else if (is_tokenizer_file(kind))
    tok = tokenizer_file(kind);
  const Text t = read(path, seed, kind, vocab_size, tok, prefix);
  if (resumed) {
    const auto& m = resumed->metadata;
    check_same_text(t, block_size, xgrad::data::DataLoaderState::from_string(m.at("data_loader")).dataset_size,
                    m.count("text_hash") ? m.at("text_hash") : "", resume_path);
  }
  const std::size_t T = block_size;
  if (t.train->size() < T + 1 + batch_size || t.held->size() < T + 1)
    throw Refused(t.source + " is too short for --block-size " + std::to_string(T) + ": " +
                  std::to_string(t.train->size()) + " training and " + std::to_string(t.held->size()) + " held-out " +
                  t.unit() + "; expected more than " + std::to_string(T + 1 + batch_size) + " and " +
                  std::to_string(T + 1));
  return t;
}

// The prompt as ids (1, L); with characters, one outside the vocabulary is refused.
inline xgrad::IndexArray encode_prompt(const text::Tokenizer& tok, const std::string& prompt) {
  std::vector<std::int64_t> ids;
  try {
    text::check_utf8(prompt, "the --sample prompt");
    ids = tok.encode(prompt);
  } catch (const std::exception& e) {
    std::string why = e.what();
    if (why.rfind("CharTokenizer: the character", 0) == 0) {                   // "... at byte offset N is not in ..."
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
                  " with --window 0: expected at most " +
                  std::to_string(std::max<std::int64_t>(0, block - length + 1)) + ", or a --window from 1 to " +
                  std::to_string(block));
  const xgrad::IndexArray out =
      model.generate(prompt, tokens, options, &generator, /*use_cache=*/true, window < 0 ? block : window);
  return tok.decode(std::vector<std::int64_t>(out.begin(), out.end()));
}

// Rows [r B / N, (r + 1) B / N) of a global batch, for rank r of N.
inline xgrad::data::TokenBatch rows_of_rank(const xgrad::data::TokenBatch& b, const xgrad::train::World& world) {
  if (world.size() == 1) return b;
  const std::size_t B = b.x.shape(0), first = B * std::size_t(world.rank()) / std::size_t(world.size()),
                    last = B * std::size_t(world.rank() + 1) / std::size_t(world.size());
  return {xgrad::IndexArray(xt::view(b.x, xt::range(first, last), xt::all())),
          xgrad::IndexArray(xt::view(b.y, xt::range(first, last), xt::all()))};
}

// `n` windows of `length` tokens (at most the block size) spread evenly over `windows`' tokens,
// the first at 0 and the last at the end.
inline xgrad::IndexArray spread(const xgrad::data::TokenWindowDataset& windows, std::size_t n, std::size_t length) {
  std::vector<std::size_t> starts;
  for (std::size_t i = 0; i < n; ++i) starts.push_back(i * (windows.size() - 1) / std::max<std::size_t>(1, n - 1));
  return xgrad::IndexArray(xt::view(windows.batch(starts).x, xt::all(), xt::range(0, length)));
}

// The mean held-out loss (nats per token) over `batches` batches of B windows evenly spread over
// the held-out tokens, the same at every evaluation; the ranks share the batches.
inline double held_out_loss(xgrad::models::GPT<float>& model, const xgrad::data::TokenWindowDataset& held,
                            std::size_t B, int batches, bool bf16, xgrad::train::World& world) {
  xgrad::NoGradGuard no_grad;
  xgrad::AutocastGuard autocast(bf16);
  model.eval();
  const std::size_t windows = std::size_t(batches) * B, span = held.size() - 1;
  double sums[2] = {0, 0};  // loss * windows, windows
  for (int i = world.rank(); i < batches; i += world.size()) {
    std::vector<std::size_t> starts(B);
    for (std::size_t j = 0; j < B; ++j)
      starts[j] = (std::size_t(i) * B + j) * span / std::max<std::size_t>(1, windows - 1);
    const xgrad::data::TokenBatch b = held.batch(starts);
    sums[0] += double(xgrad::train::lm_loss(model.forward(b.x), b.y).item()) * double(B), sums[1] += double(B);
  }
  world.all_reduce_sum(sums, 2);
  model.train();
  return sums[0] / sums[1];
}

// The first lines train_gpt prints: the text, the tokenizer and its token counts.
inline void describe(const Text& t) {
  const auto& p = t.parts;
  std::printf(
      "text: %s, %llu %s: %llu training, %llu held out (%llu characters, %llu skipped: not in the "
      "vocabulary)\ntokenizer: %s, %zu ids: %llu training and %llu held-out tokens\n",
      t.source.c_str(), (unsigned long long)t.lines, t.source == "the King James Bible" ? "verses" : "lines",
      (unsigned long long)p.train.lines, (unsigned long long)p.held.lines, (unsigned long long)p.held.characters,
      (unsigned long long)p.held.skipped, t.tokenizer->kind(), t.tokenizer->vocab_size(),
      (unsigned long long)p.train.tokens, (unsigned long long)p.held.tokens);
}

// The progress line's held-out loss, `loss` nats per token.
inline std::string describe_loss(const Text& t, double loss) {
  char text[96];
  if (t.tokenizer->is_char())
    std::snprintf(text, sizeof text, "held-out %.4f nats/char (%.3f bits)", loss, loss / std::log(2.0));
  else
    std::snprintf(text, sizeof text, "held-out %.4f nats/token (%.3f bits/char)", loss,
                  loss * t.tokens_per_character() / std::log(2.0));
  return text;
}

// The final held-out loss, `nats_per_token`, per character too.
inline void report(const Text& t, double nats_per_token) {
  const double nats = nats_per_token * t.tokens_per_character();
  std::printf(
      "\nheld-out loss: %.4f nats per character, %.4f bits per character (%.4f nats per token; %llu "
      "held-out tokens for %llu characters)\n",
      nats, nats / std::log(2.0), nats_per_token, (unsigned long long)t.parts.held.tokens,
      (unsigned long long)(t.parts.held.characters - t.parts.held.skipped));
}

// Three samples of 200 tokens, each from a new line (nanoGPT's sample.py).
inline void print_samples(xgrad::models::GPT<float>& model, const text::Tokenizer& tok, const xgrad::SamplingOptions& o,
                          int window, std::uint64_t seed) {
  xgrad::Generator generator(seed);
  for (int i = 1; i <= 3; ++i)
    std::printf("\n-- sample %d (temperature %g%s%s) --%s\n", i, o.temperature,
                o.top_k > 0 ? (", top-k " + std::to_string(o.top_k)).c_str() : "",
                o.top_p < 1 ? (", top-p " + std::to_string(o.top_p)).c_str() : "",
                sample(model, tok, encode_prompt(tok, "\n"), 200, window, o, generator).c_str());
}

// FILE.vocab.json of --export-onnx, for examples/onnx/gpt_sample.mjs: {"block_size": T, "vocab":
// [character i, ...]}.
inline void write_vocab_json(const text::CharTokenizer& tok, std::int64_t block_size, const std::string& path) {
  std::string out = "{\"block_size\":" + std::to_string(block_size) + ",\"vocab\":[";
  for (std::size_t i = 0; i < tok.vocab_size(); ++i) {
    out += i ? ",\"" : "\"";
    const char32_t ch = tok.chars()[i];
    if (ch == U'"' || ch == U'\\')
      out += '\\', out += char(ch);
    else if (ch < 0x20) {
      char code[8];
      std::snprintf(code, sizeof code, "\\u%04x", unsigned(ch));
      out += code;
    } else
      out += text::encode_utf8(ch);
    out += '"';
  }
  out += "]}\n";
  xgrad::write_file_atomically(path, [&](std::ostream& o) { o << out; });
}

// Refuses an --export-onnx (`path`) the run cannot give: the export traces two lengths within the
// context, and FILE.vocab.json lists characters.
inline void check_export(const std::string& path, int block_size, const std::string& tokenizer) {
  if (path.empty()) return;
#ifndef XGRAD_WITH_ONNX
  throw Refused("--export-onnx: this build has no ONNX export (XGRAD_WITH_ONNX is off)");
#endif
  if (block_size < 4)
    throw Refused("--export-onnx needs --block-size 4 or more (the sequence axis is exported dynamic), got " +
                  std::to_string(block_size));
  if (tokenizer != "char")
    throw Refused(
        "--export-onnx writes a character vocabulary (for examples/onnx/gpt_sample.mjs): use --tokenizer char");
}

#ifdef XGRAD_WITH_ONNX
// --export-onnx: the model (gpt_onnx.hpp) with a sample of held-out windows at two batch sizes and
// lengths and their logits (FILE.sample.json), and FILE.vocab.json.
inline void export_onnx(xgrad::models::GPT<float>& model, const xgrad::data::TokenWindowDataset& held,
                        const text::CharTokenizer& tok, const std::string& path) {
  const std::size_t T = held.block_size();
  gpt_onnx::export_model(model, spread(held, 2, std::min<std::size_t>(T, 8)), path,
                         {spread(held, 2, T), spread(held, 3, std::max<std::size_t>(1, T / 2 - 1))});
  write_vocab_json(tok, std::int64_t(T), path + ".vocab.json");
  std::printf(
      "exported the trained model to %s (ONNX, opset 17), its vocabulary to %s.vocab.json, a sample to "
      "%s.sample.json\n",
      path.c_str(), path.c_str(), path.c_str());
}
#endif

// --attention: the attention kernel, for comparisons.
inline void add_attention_flag(CLI::App& app, std::string& attention) {
  app.add_option("--attention", attention,
                 "attention kernel: auto (tiled from 256 causal positions), tiled (memory linear in --block-size) "
                 "or materialized (quadratic; for comparison)")
      ->check(CLI::IsMember({"auto", "tiled", "materialized"}))
      ->capture_default_str();
}
inline void set_attention(const std::string& attention) {
  xgrad::set_attention_path(attention == "tiled"          ? xgrad::AttentionPath::Tiled
                            : attention == "materialized" ? xgrad::AttentionPath::Materialized
                                                          : xgrad::AttentionPath::Auto);
}

}  // namespace gpt_text
