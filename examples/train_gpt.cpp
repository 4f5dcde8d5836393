// A character-level GPT (xgrad::models::GPT, nanoGPT's model) trained on the King James Bible, then
// sampled from. The text comes from Debian's bible-kjv at run time (`COLUMNS=1000 bible
// "gen1:1-rev22:21"`: 31,102 verses, their references stripped), or from any UTF-8 file with
// --text FILE (split by lines). A seeded hash holds out about 10% of the verses (lines), never
// trained on; the vocabulary is the training text's characters.
//
//   text -> windows of --block-size characters (x) and the same shifted by one (y), drawn at random
//   from the training text by xgrad::data::DataLoader -> GPT -> logits (B, T, V) -> cross_entropy
//
// AdamW (betas 0.9, 0.99; weight decay 0.1 on the matrices only, as nanoGPT), linear warmup then
// cosine decay to --min-lr, gradient clipping at 1.0. The held-out loss (nats per character, and
// bits per character) is measured at each evaluation on fixed windows spread over the held-out
// text. The loop, progress line, CSV, checkpoints, --resume (bit for bit) and extension with a
// larger --iters are xgrad::train::Trainer's; the DataLoader's position is in the checkpoint.
// Under `mpirun -np N` every rank draws the same global batch and trains on its N-th of the rows
// (DistributedDataParallel averages the gradients), as train_toy_encoder.
//
//   build/release/examples/train_gpt                          # about 5 minutes on 2 cores
//   build/release/examples/train_gpt --sample "In the beginning" --temperature 0.8 --top-k 40
//
// Long contexts: attention runs the tiled kernel (memory linear in the context) from 256 positions
// up, so --block-size 4096 or 8192 trains in a few hundred MiB (docs/examples.md has the measured
// peaks); --attention materialized forces the quadratic kernel, for comparison.
//   build/release/examples/train_gpt --block-size 4096 --batch-size 1 --eval-iters 2
//
// --export-onnx FILE writes the trained model as ONNX (xgrad::onnx::export_model), its vocabulary
// and context to FILE.vocab.json (for examples/onnx/gpt_sample.mjs) and a sample of inputs with
// this program's logits to FILE.sample.json.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <xtensor/xview.hpp>

#include <xgrad/models/gpt.hpp>
#include <xgrad/train/cli.hpp>
#include <xgrad/train/trainer.hpp>
#include <xgrad/xgrad.hpp>

#include "support/files.hpp"
#include "support/plot.hpp"
#ifdef XGRAD_WITH_ONNX
#include "support/onnx_sample.hpp"
#endif
#ifdef XGRAD_WITH_MPI
#include <xgrad/distributed/ddp.hpp>
#include <xgrad/train/mpi_world.hpp>
#endif

namespace {

using xgrad::IndexArray;
using xgrad::Tensor;
using Model = xgrad::models::GPT<float>;
namespace data = xgrad::data;
namespace optim = xgrad::optim;
namespace train = xgrad::train;
namespace cli = xgrad::train::cli;

const char* const kProgram = "train_gpt";
const char* const kBibleCommand = "COLUMNS=1000 bible \"gen1:1-rev22:21\" 2>/dev/null";

// The settings (saved in checkpoints; --resume rebuilds the same run from them).
struct Config {
  std::string text;  // empty: the King James Bible
  int n_layer = 4, n_head = 4, n_embd = 128, block_size = 64, batch_size = 12;
  double dropout = 0.0, lr = 1e-3, min_lr = 1e-4, weight_decay = 0.1, clip = 1.0;
  int warmup = 100, iters = 2000, eval_interval = 250, eval_iters = 20;
  std::uint64_t seed = 1337;
  std::string init_weights;  // safetensors of the same model to start from (benchmarks/gpt_compare.py)
  bool bf16 = false;
};

// How text is drawn from a model: at the end of training (three samples) and with --sample.
struct Sampling {
  std::string prompt;        // --sample
  xgrad::SamplingOptions options;
  int tokens = 300;          // new characters
  int window = -1;           // context kept past block_size; -1: block_size (nanoGPT's crop), 0: none
  std::uint64_t seed = 1;
};

// ---- text ------------------------------------------------------------------------------------

std::string hex_bytes(const std::string& s, std::size_t i, std::size_t n) {
  std::string out;
  for (std::size_t k = i; k < std::min(s.size(), i + n); ++k) {
    char h[8];
    std::snprintf(h, sizeof h, "%s0x%02X", k > i ? " " : "", unsigned(static_cast<unsigned char>(s[k])));
    out += h;
  }
  return out;
}

std::string code_point(char32_t c) {
  char h[16];
  std::snprintf(h, sizeof h, "U+%04X", unsigned(c));
  return h;
}

// UTF-8 -> code points, strictly (RFC 3629, as Python's decoder): no overlong form, no surrogate
// (U+D800..U+DFFF), nothing past U+10FFFF. `where` names the text in the error, which gives the
// byte offset and what was found there; for a file (`file` not empty) also the line and how to
// convert a Latin-1 file.
std::u32string decode_utf8(const std::string& s, const std::string& where, const std::string& file = "") {
  std::u32string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const unsigned char b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      out.push_back(b);
      ++i;
      continue;
    }
    // The length a lead byte announces (C0, C1 and F5..F7 only start sequences refused below).
    const std::size_t n = (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    std::string found;
    char32_t c = n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
    if (n == 0) {
      found = (b >> 6) == 2 ? "the byte " + hex_bytes(s, i, 1) + ", a continuation byte with no character to continue"
                            : "the byte " + hex_bytes(s, i, 1) + ", which UTF-8 never uses";
    } else {
      for (std::size_t k = 1; found.empty() && k < n; ++k) {
        if (i + k >= s.size()) {
          found = "the byte " + hex_bytes(s, i, 1) + " starts a " + std::to_string(n) +
                  "-byte character but the text ends after " + std::to_string(k);
        } else if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) {
          found = "the byte " + hex_bytes(s, i, 1) + " starts a " + std::to_string(n) +
                  "-byte character but is followed by " + hex_bytes(s, i + k, 1);
        } else {
          c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
        }
      }
      if (found.empty()) {
        const char32_t least = n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;
        if (c < least)
          found = "an overlong encoding of " + code_point(c) + " (" + hex_bytes(s, i, n) + ")";
        else if (c >= 0xD800 && c <= 0xDFFF)
          found = "the surrogate " + code_point(c) + " (" + hex_bytes(s, i, n) + "), which is not a character";
        else if (c > 0x10FFFF)
          found = code_point(c) + " (" + hex_bytes(s, i, n) + "), beyond the last code point U+10FFFF";
      }
    }
    if (!found.empty()) {
      std::string message = where + " is not UTF-8: at byte offset " + std::to_string(i);
      if (!file.empty())
        message += " (line " + std::to_string(std::count(s.begin(), s.begin() + std::ptrdiff_t(i), '\n') + 1) + ")";
      message += ", " + found;
      if (!file.empty())
        message +=
            "; a Latin-1 (ISO-8859-1) file converts with: iconv -f latin1 -t utf-8 " + file + " > " + file + ".utf8";
      throw train::Refused(message);
    }
    out.push_back(c);
    i += n;
  }
  return out;
}

std::string encode_utf8(const std::u32string& s) {
  std::string out;
  for (char32_t c : s) {
    if (c < 0x80) {
      out += char(c);
    } else if (c < 0x800) {
      out += char(0xC0 | (c >> 6)), out += char(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      out += char(0xE0 | (c >> 12)), out += char(0x80 | ((c >> 6) & 0x3F)), out += char(0x80 | (c & 0x3F));
    } else {
      out += char(0xF0 | (c >> 18)), out += char(0x80 | ((c >> 12) & 0x3F));
      out += char(0x80 | ((c >> 6) & 0x3F)), out += char(0x80 | (c & 0x3F));
    }
  }
  return out;
}

// The verses of the King James Bible, their references ("  1 " after each "Book N" header) stripped.
std::vector<std::string> read_bible() {
  FILE* pipe = popen(kBibleCommand, "r");
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
    throw train::Refused("no King James Bible: the `bible` program printed no verses (apt-get install bible-kjv), "
                         "or pass --text FILE");
  return verses;
}

// The lines of --text (without their "\n" or "\r\n"), decoded. A FIFO or a device is refused
// before it is opened, and at most the size fstat gives is read.
std::vector<std::u32string> read_text_lines(const std::string& path) {
  const std::string bytes = files::read("--text", path, "a readable UTF-8 or ASCII text file");
  const std::u32string text = decode_utf8(bytes, "--text " + path, path);
  std::vector<std::u32string> lines;
  bool any = false;
  for (std::size_t begin = 0; begin < text.size();) {
    std::size_t end = text.find(U'\n', begin);
    if (end == std::u32string::npos) end = text.size();
    std::u32string line = text.substr(begin, end - begin);
    if (!line.empty() && line.back() == U'\r') line.pop_back();
    any = any || line.find_first_not_of(U" \t") != std::u32string::npos;
    lines.push_back(std::move(line));
    begin = end + 1;
  }
  if (!any) throw train::Refused("--text " + path + " is empty: expected UTF-8 or ASCII text");
  return lines;
}

// 1 verse (line) in 10, by a seeded FNV-1a + splitmix hash of its index.
bool is_held_out(std::size_t index, std::uint64_t seed) {
  std::uint64_t h = 1469598103934665603ULL ^ (seed * 0x9E3779B97F4A7C15ULL);
  for (int k = 0; k < 8; ++k) h = (h ^ ((index >> (8 * k)) & 0xFF)) * 1099511628211ULL;
  return (((h ^ (h >> 31)) * 0xBF58476D1CE4E5B9ULL) >> 29) % 10 == 0;
}

// The characters of the training text, sorted: token i is vocab[i].
struct Vocabulary {
  std::u32string chars;
  std::map<char32_t, std::int64_t> index;

  explicit Vocabulary(std::u32string sorted) : chars(std::move(sorted)) {
    for (std::size_t i = 0; i < chars.size(); ++i) index[chars[i]] = std::int64_t(i);
  }
  std::int64_t size() const { return std::int64_t(chars.size()); }
};

struct Corpus {
  std::string source;                      // "the King James Bible" or the file
  std::vector<std::int64_t> train, held;   // tokens, each verse (line) followed by '\n'
  std::size_t train_units = 0, held_units = 0, dropped = 0;  // dropped: held-out chars not in the vocabulary
  std::u32string vocab;
};

Corpus load_corpus(const Config& c) {
  Corpus corpus;
  corpus.source = c.text.empty() ? std::string("the King James Bible") : c.text;
  std::vector<std::u32string> units;
  if (c.text.empty()) {
    for (const std::string& verse : read_bible()) units.push_back(decode_utf8(verse, corpus.source));
  } else {
    units = read_text_lines(c.text);
  }
  std::u32string train_text, held_text;
  for (std::size_t i = 0; i < units.size(); ++i) {
    const bool held = is_held_out(i, c.seed);
    (held ? held_text : train_text) += units[i];
    (held ? held_text : train_text) += U'\n';
    ++(held ? corpus.held_units : corpus.train_units);
  }
  if (corpus.held_units == 0)
    throw train::Refused(corpus.source + " has no held-out line (1 line in 10, chosen by --seed " +
                         std::to_string(c.seed) + "): use a longer text");
  const std::set<char32_t> distinct(train_text.begin(), train_text.end());
  corpus.vocab = std::u32string(distinct.begin(), distinct.end());
  const Vocabulary v(corpus.vocab);
  for (char32_t ch : train_text) corpus.train.push_back(v.index.at(ch));
  for (char32_t ch : held_text) {
    const auto it = v.index.find(ch);
    if (it == v.index.end()) ++corpus.dropped;
    else corpus.held.push_back(it->second);
  }
  const std::size_t need = std::size_t(c.block_size) + 1;
  if (corpus.train.size() < need + std::size_t(c.batch_size) || corpus.held.size() < need)
    throw train::Refused(corpus.source + " is too short for --block-size " + std::to_string(c.block_size) + ": " +
                         std::to_string(corpus.train.size()) + " training and " + std::to_string(corpus.held.size()) +
                         " held-out characters; expected more than " + std::to_string(need + c.batch_size) + " and " +
                         std::to_string(need));
  return corpus;
}

// FNV-1a of the tokens of the training and held-out text and of the vocabulary: a resumed run
// checks that its text is the checkpoint's.
std::string text_fingerprint(const Corpus& corpus) {
  std::uint64_t h = 1469598103934665603ULL;
  const auto mix = [&h](std::uint64_t v) {
    for (int k = 0; k < 8; ++k) h = (h ^ ((v >> (8 * k)) & 0xFF)) * 1099511628211ULL;
  };
  for (const auto* tokens : {&corpus.train, &corpus.held}) {
    mix(tokens->size());
    for (std::int64_t t : *tokens) mix(std::uint64_t(t));
  }
  for (char32_t ch : corpus.vocab) mix(ch);
  char text[24];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}

// --resume with a text that is not the checkpoint's (the file was changed since): refused before
// the model (whose embedding is the vocabulary's size) or the DataLoader's position is restored.
void check_same_text(const Corpus& corpus, const Config& c, const xgrad::Checkpoint<float>& checkpoint,
                     const std::string& path) {
  const auto& m = checkpoint.metadata;
  const std::size_t windows = corpus.train.size() - std::size_t(c.block_size);
  std::size_t saved_windows = windows;
  if (const auto it = m.find("data_loader"); it != m.end()) {
    try {
      saved_windows = data::DataLoaderState::from_string(it->second).dataset_size;
    } catch (const std::exception& e) {
      throw train::Refused("cannot resume from " + path + ": its DataLoader state: " + e.what());
    }
  }
  const auto vocab_it = m.find("vocab");
  const auto fingerprint_it = m.find("text_fingerprint");  // absent in checkpoints of older builds
  const bool same_vocab = vocab_it == m.end() || vocab_it->second == encode_utf8(corpus.vocab);
  const bool same_tokens = fingerprint_it == m.end() || fingerprint_it->second == text_fingerprint(corpus);
  if (saved_windows == windows && same_vocab && same_tokens) return;
  const std::string saved_vocab =
      vocab_it == m.end() ? std::string()
                          : ", " + std::to_string(decode_utf8(vocab_it->second, path + "'s vocabulary").size()) +
                                " distinct characters";
  const std::string what = "cannot resume from " + path + ": it was made with another text than the one in " +
                           corpus.source + " now (changed since?): ";
  const std::string todo = "; resume with the text the checkpoint was trained on, or start a new run without --resume";
  if (saved_windows == windows)
    throw train::Refused(what + "the same number of training windows (" + std::to_string(windows) + " of " +
                         std::to_string(c.block_size) + " characters) but other characters" + todo);
  throw train::Refused(what + "expected " + std::to_string(saved_windows) + " training windows of " +
                       std::to_string(c.block_size) + " characters (" +
                       std::to_string(saved_windows + std::size_t(c.block_size)) + " training characters" +
                       saved_vocab + "), got " + std::to_string(windows) + " (" + std::to_string(corpus.train.size()) +
                       " training characters, " + std::to_string(corpus.vocab.size()) + " distinct characters)" + todo);
}

// ---- batches ---------------------------------------------------------------------------------

// Example i: the window of block_size tokens starting at i (x) and the one starting at i + 1 (y).
struct Window {
  std::size_t start;
};

class Windows : public data::Dataset<Window> {
 public:
  Windows(std::size_t tokens, std::size_t block_size) : size_(tokens - block_size) {}
  std::size_t size() const override { return size_; }
  Window get(std::size_t index) const override { return {index}; }

 private:
  std::size_t size_;
};

struct Batch {
  IndexArray x, y;  // (B, T)
};

Batch gather(const std::vector<std::int64_t>& tokens, const std::vector<std::size_t>& starts, std::size_t T) {
  Batch b{IndexArray::from_shape({starts.size(), T}), IndexArray::from_shape({starts.size(), T})};
  for (std::size_t i = 0; i < starts.size(); ++i)
    for (std::size_t t = 0; t < T; ++t) {
      b.x(i, t) = tokens[starts[i] + t];
      b.y(i, t) = tokens[starts[i] + t + 1];
    }
  return b;
}

// Rows [r B / N, (r + 1) B / N) of a global batch, for rank r of N.
Batch rows_of_rank(const Batch& global, const train::World& world) {
  if (world.size() == 1) return global;
  const std::size_t B = global.x.shape(0), first = B * std::size_t(world.rank()) / std::size_t(world.size()),
                    last = B * std::size_t(world.rank() + 1) / std::size_t(world.size());
  return {IndexArray(xt::view(global.x, xt::range(first, last), xt::all())),
          IndexArray(xt::view(global.y, xt::range(first, last), xt::all()))};
}

Tensor<float> lm_loss(const Tensor<float>& logits, const IndexArray& y) {
  const std::int64_t V = logits.size(-1);
  return xgrad::cross_entropy(xgrad::reshape(logits, {-1, V}), IndexArray(xt::reshape_view(y, {y.size()})));
}

// The mean held-out loss (nats per character) over eval_iters batches of windows evenly spread
// over the held-out text, the same at every evaluation; the ranks share the batches.
double held_out_loss(Model& model, const Corpus& corpus, const Config& c, train::World& world) {
  xgrad::NoGradGuard no_grad;
  xgrad::AutocastGuard autocast(c.bf16);
  const bool was_training = model.is_training();
  model.eval();
  const std::size_t T = std::size_t(c.block_size), B = std::size_t(c.batch_size);
  const std::size_t windows = std::size_t(c.eval_iters) * B, span = corpus.held.size() - T - 1;
  double sums[2] = {0, 0};  // loss * windows, windows
  for (int i = world.rank(); i < c.eval_iters; i += world.size()) {
    std::vector<std::size_t> starts(B);
    for (std::size_t j = 0; j < B; ++j) starts[j] = (std::size_t(i) * B + j) * span / std::max<std::size_t>(1, windows - 1);
    const Batch b = gather(corpus.held, starts, T);
    sums[0] += double(lm_loss(model.forward(b.x), b.y).item()) * double(B);
    sums[1] += double(B);
  }
  world.all_reduce_sum(sums, 2);
  model.train(was_training);
  return sums[0] / sums[1];
}

// nanoGPT's get_lr as a factor of --lr: linear warmup over `warmup` steps, then cosine to min_lr
// at step `iters`.
double lr_factor(int step, const Config& c, int warmup) {
  if (step < warmup) return double(step + 1) / double(warmup + 1);
  const double progress = std::min(1.0, double(step - warmup) / double(std::max(1, c.iters - warmup)));
  const double floor = c.min_lr / c.lr;
  return floor + (1.0 - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

xgrad::models::GPTConfig model_config(const Config& c, std::int64_t vocab_size) {
  xgrad::models::GPTConfig g;
  g.vocab_size = vocab_size;
  g.block_size = c.block_size;
  g.n_layer = c.n_layer;
  g.n_head = c.n_head;
  g.n_embd = c.n_embd;
  g.dropout = c.dropout;
  return g;
}

// ---- sampling --------------------------------------------------------------------------------

// The characters on one line, a newline as \n.
std::string printable(const std::u32string& chars) {
  std::string out;
  for (char32_t ch : chars) out += ch == U'\n' ? std::string("\\n") : encode_utf8(std::u32string(1, ch));
  return out;
}

// The prompt's characters as tokens; a character outside the vocabulary is refused.
IndexArray encode_prompt(const std::string& prompt, const std::u32string& vocab) {
  const std::u32string chars = decode_utf8(prompt, "the --sample prompt");
  if (chars.empty()) throw train::Refused("--sample: expected a prompt of at least one character, got ''");
  const Vocabulary v(vocab);
  IndexArray idx = IndexArray::from_shape({std::size_t(1), chars.size()});
  for (std::size_t i = 0; i < chars.size(); ++i) {
    const auto it = v.index.find(chars[i]);
    if (it == v.index.end()) {
      char code[16];
      std::snprintf(code, sizeof code, "U+%04X", unsigned(chars[i]));
      throw train::Refused("--sample: the prompt's character '" + encode_utf8(std::u32string(1, chars[i])) + "' (" +
                           code + ") is not in the model's vocabulary of " + std::to_string(vocab.size()) +
                           " characters: " + printable(vocab));
    }
    idx(0, i) = it->second;
  }
  return idx;
}

// The prompt followed by `tokens` characters drawn from the model.
std::string sample_text(Model& model, const IndexArray& prompt, const std::u32string& vocab, const Sampling& s,
                        xgrad::Generator& generator) {
  const std::int64_t block = model.config().block_size;
  const std::int64_t window = s.window < 0 ? block : s.window;
  const std::int64_t length = std::int64_t(prompt.shape(1));
  if (window == 0 && length + s.tokens - 1 > block)
    throw train::Refused("--tokens " + std::to_string(s.tokens) + " after a prompt of " + std::to_string(length) +
                         " characters goes beyond the model's context of " + std::to_string(block) +
                         " characters with --window 0: expected at most " +
                         std::to_string(std::max<std::int64_t>(0, block - length + 1)) +
                         ", or a --window from 1 to " + std::to_string(block));
  const IndexArray out = model.generate(prompt, s.tokens, s.options, &generator, /*use_cache=*/true, window);
  std::u32string text;
  for (std::int64_t t : out) text += vocab[std::size_t(t)];
  return encode_utf8(text);
}

// --sample: text from the model of --checkpoint.
int sample(Config& c, const Sampling& s, train::RunOptions& run, train::Settings& settings, const CLI::App& app) {
  files::refuse_special("--checkpoint", run.checkpoint_path, "a checkpoint of train_gpt");
  if (!std::ifstream(run.checkpoint_path))  // a regular file or nothing: the open cannot block
    throw train::Refused("--sample: no checkpoint " + run.checkpoint_path + ": train first, or pass --checkpoint FILE");
  run.resume_path = run.checkpoint_path;  // the model's settings come from the checkpoint
  const auto given = cli::given(app);
  const train::Resumed saved = train::prepare_run(kProgram, run, settings, train::single_process_world(),
                                                  [&](const std::string& key) { return key != "seed" && given(key); });
  const auto vocab_it = saved.checkpoint->metadata.find("vocab");
  if (vocab_it == saved.checkpoint->metadata.end())
    throw train::Refused("--sample: " + run.checkpoint_path + " does not record its vocabulary");
  const std::u32string vocab = decode_utf8(vocab_it->second, run.checkpoint_path + "'s vocabulary");
  const IndexArray prompt = encode_prompt(s.prompt, vocab);
  if (s.window > c.block_size)
    throw train::Refused("--window " + std::to_string(s.window) + " is beyond the model's context of " +
                         std::to_string(c.block_size) + " characters: expected 0 to " + std::to_string(c.block_size));
  Model model(model_config(c, std::int64_t(vocab.size())));
  model.load_state_dict(saved.checkpoint->model);
  xgrad::Generator generator(s.seed);
  std::printf("%s\n", sample_text(model, prompt, vocab, s, generator).c_str());
  return 0;
}

#ifdef XGRAD_WITH_ONNX
// --export-onnx: idx (batch, seq) int64 -> logits (batch, seq, V), batch and seq dynamic (seq up to
// the context); FILE.vocab.json: {"block_size": T, "vocab": [character i, ...]}; FILE.sample.json:
// windows of the held-out text (of the training text when that is too short) at two batch sizes and
// lengths, with this program's logits.
std::string json_string(const std::u32string& s) {
  std::string out = "\"";
  for (char32_t ch : s) {
    if (ch == U'"' || ch == U'\\') out += '\\', out += char(ch);
    else if (ch < 0x20) {
      char code[8];
      std::snprintf(code, sizeof code, "\\u%04x", unsigned(ch));
      out += code;
    } else out += encode_utf8(std::u32string(1, ch));
  }
  return out + "\"";
}

void export_onnx(Model& model, const Corpus& corpus, const Config& c, const std::string& path) {
  const std::size_t block = std::size_t(c.block_size);
  const std::vector<std::int64_t>& text = corpus.held.size() > 3 * block + 1 ? corpus.held : corpus.train;
  if (text.size() <= 3 * block + 1)
    throw train::Refused("--export-onnx: the text is too short for sample windows of " + std::to_string(block) +
                         " characters");
  const auto windows = [&](std::size_t n, std::size_t T) {  // n windows of T characters spread over the text
    std::vector<std::size_t> starts;
    for (std::size_t i = 0; i < n; ++i) starts.push_back(i * (text.size() - T - 1) / n);
    return gather(text, starts, T).x;
  };
  const IndexArray example = windows(2, std::min<std::size_t>(block, 8));
  xgrad::onnx::export_model(
      model,
      [&model](const xgrad::onnx::Inputs& in) { return std::vector<Tensor<float>>{model.forward(in.indices(0))}; },
      {example}, path,
      xgrad::onnx::ExportOptions().input_names({"idx"}).output_names({"logits"}).dynamic_axes(
          {{"idx", {{0, "batch"}, {1, "seq"}}}}));
  xgrad::NoGradGuard no_grad;
  model.eval();
  std::vector<onnx_sample::Run> runs;
  for (const IndexArray& idx : {windows(2, block), windows(3, std::max<std::size_t>(1, block / 2 - 1))})
    runs.push_back({{{"idx", idx}}, {{"logits", model.forward(idx)}}});
  model.train();
  onnx_sample::write(path, runs);
  std::string vocab = "{\"block_size\":" + std::to_string(block) + ",\"vocab\":[";
  for (std::size_t i = 0; i < corpus.vocab.size(); ++i)
    vocab += (i ? "," : "") + json_string(corpus.vocab.substr(i, 1));
  vocab += "]}\n";
  xgrad::write_file_atomically(path + ".vocab.json", [&](std::ostream& out) { out << vocab; });
  std::printf("exported the trained model to %s (ONNX, opset 17), its vocabulary to %s.vocab.json, a sample to "
              "%s.sample.json\n", path.c_str(), path.c_str(), path.c_str());
}
#endif

// ---- training --------------------------------------------------------------------------------

int train_model(Config& c, const Sampling& sampling, const train::RunOptions& run, const std::string& plot_path,
                train::Settings& settings, const CLI::App& app, train::World& world, const std::string& onnx_path) {
#ifndef XGRAD_WITH_ONNX
  if (!onnx_path.empty()) throw train::Refused("--export-onnx: this build has no ONNX export (XGRAD_WITH_ONNX is off)");
#endif
  train::Resumed resumed = train::prepare_run(kProgram, run, settings, world, cli::given(app));  // c: the checkpoint's
  const int planned = resumed.checkpoint ? std::stoi(resumed.checkpoint->metadata.at("iters")) : c.iters;
  if (!app.count("--iters")) c.iters = planned;  // a larger --iters extends the run
  if (c.iters < resumed.state.step)
    throw train::Refused("--iters " + std::to_string(c.iters) + " is below the checkpoint's step " +
                         std::to_string(resumed.state.step));
  if (c.n_embd % c.n_head != 0)
    throw train::Refused("--n-head " + std::to_string(c.n_head) + " must divide --n-embd " + std::to_string(c.n_embd));
  if (c.batch_size % world.size() != 0)
    throw train::Refused("--batch-size " + std::to_string(c.batch_size) + " must be divisible by the " +
                         std::to_string(world.size()) + " ranks (each trains on an equal part of the batch)");
  if (sampling.window > c.block_size)
    throw train::Refused("--window " + std::to_string(sampling.window) + " is beyond --block-size " +
                         std::to_string(c.block_size) + ": expected 0 to " + std::to_string(c.block_size));
  if (c.min_lr > c.lr)
    throw train::Refused("--min-lr " + std::to_string(c.min_lr) + " must be at most --lr " + std::to_string(c.lr));
  if (!onnx_path.empty() && c.block_size < 4)  // the export traces two lengths, both within the context
    throw train::Refused("--export-onnx needs --block-size 4 or more (the sequence axis is exported dynamic), got " +
                         std::to_string(c.block_size));

  const Corpus corpus = load_corpus(c);
  if (resumed.checkpoint) check_same_text(corpus, c, *resumed.checkpoint, run.resume_path);
  const std::int64_t V = std::int64_t(corpus.vocab.size());
  xgrad::manual_seed(c.seed);
  const auto model_ptr = std::make_shared<Model>(model_config(c, V));
  Model& model = *model_ptr;
  if (!c.init_weights.empty()) {
    files::refuse_special("--init-weights", c.init_weights, "a safetensors file");
    if (!std::ifstream(c.init_weights))  // a regular file or nothing: the open cannot block
      throw train::Refused("cannot read --init-weights " + c.init_weights + ": expected a safetensors file");
    try {
      model.load_state_dict(xgrad::load_safetensors_state_dict<float>(c.init_weights));
    } catch (const std::exception& e) {
      throw train::Refused("--init-weights " + c.init_weights + " does not fit this model: " + e.what());
    }
  }
  std::function<Tensor<float>(const IndexArray&)> forward = [&model](const IndexArray& x) { return model.forward(x); };
#ifdef XGRAD_WITH_MPI
  std::shared_ptr<xgrad::distributed::DistributedDataParallel<Model>> ddp;
  if (world.size() > 1) {
    ddp = std::make_shared<xgrad::distributed::DistributedDataParallel<Model>>(model_ptr);
    forward = [ddp](const IndexArray& x) { return ddp->forward(x); };
  }
#endif
  if (world.rank() > 0) xgrad::manual_seed(c.seed + 0xD1B54A32D192ED03ULL * static_cast<std::uint64_t>(world.rank()));

  // nanoGPT's configure_optimizers: weight decay on the matrices (and embeddings) only.
  std::vector<Tensor<float>> decay, no_decay;
  for (const auto& p : model.parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  const auto options = optim::AdamWOptions(c.lr).betas({0.9, 0.99}).weight_decay(c.weight_decay);
  optim::AdamW<float> optimizer(
      {optim::ParamGroup<float>(decay), optim::ParamGroup<float>(no_decay, optim::AdamWOptions(options).weight_decay(0))},
      options);
  const int warmup = std::min(c.warmup, planned - 1);
  optim::LambdaLR<float> schedule(optimizer, [&c, warmup](int step) { return lr_factor(step, c, warmup); });

  // Random windows of the training text, in the order of the DataLoader's seeded sampler.
  auto loader = data::make_data_loader(
      std::make_shared<Windows>(corpus.train.size(), std::size_t(c.block_size)),
      data::DataLoaderOptions().batch_size(std::size_t(c.batch_size)).shuffle(true).drop_last(true)
          .generator(xgrad::Generator(c.seed + 1)),
      [&corpus, T = std::size_t(c.block_size)](const std::vector<Window>& windows) {
        std::vector<std::size_t> starts;
        for (const Window& w : windows) starts.push_back(w.start);
        return gather(corpus.train, starts, T);
      });
  if (resumed.checkpoint)
    loader.load_state_dict(data::DataLoaderState::from_string(resumed.checkpoint->metadata.at("data_loader")));

  train::TrainerOptions trainer_options{c.iters, c.eval_interval, c.clip};
  trainer_options.metric.column = "val_loss";
  trainer_options.metric.format = [](double loss) {
    char text[80];
    if (loss == 0) return std::string("held-out loss -");  // before the first evaluation
    std::snprintf(text, sizeof text, "held-out %.4f nats/char (%.3f bits)", loss, loss / std::log(2.0));
    return std::string(text);
  };
  train::Trainer trainer(kProgram, run, settings, std::move(resumed), model, optimizer, &schedule, trainer_options,
                         world);
  const auto save_state = std::make_shared<train::LambdaCallback>();
  save_state->save_checkpoint = [&](train::Trainer&, std::map<std::string, std::string>& metadata) {
    metadata["data_loader"] = loader.state_dict().to_string();
    metadata["iters"] = std::to_string(c.iters);
    metadata["vocab"] = encode_utf8(corpus.vocab);  // for --sample
    metadata["text_fingerprint"] = text_fingerprint(corpus);  // for --resume
  };
  trainer.add_callback(save_state);

  std::size_t count = 0;
  for (const auto& p : model.parameters()) count += std::size_t(p.numel());
  if (world.is_main()) {
    std::printf("text: %s, %zu %s: %zu training (%zu characters), %zu held out (%zu characters)%s\n"
                "vocabulary: %lld characters | model: %d layers, %d heads, n_embd %d, context %d, %zu parameters\n"
                "training: %d iterations of %d windows, AdamW lr %g (warmup %d, cosine to %g), clip %g | %s\n",
                corpus.source.c_str(), corpus.train_units + corpus.held_units, c.text.empty() ? "verses" : "lines",
                corpus.train_units, corpus.train.size(),
                corpus.held_units, corpus.held.size(),
                corpus.dropped ? (", " + std::to_string(corpus.dropped) + " held-out characters outside the vocabulary "
                                  "skipped").c_str() : "",
                static_cast<long long>(V), c.n_layer, c.n_head, c.n_embd, c.block_size, count, c.iters, c.batch_size,
                c.lr, warmup, c.min_lr, c.clip, train::precision_description(c.bf16).c_str());
    if (world.size() > 1)
      std::printf("data parallel: %d ranks, %d windows each per step\n", world.size(), c.batch_size / world.size());
  }

  const auto loss = [&](int) {
    auto batch = loader.next();
    if (!batch) batch = loader.next();  // the next epoch
    const Batch mine = rows_of_rank(*batch, world);
    xgrad::AutocastGuard autocast(c.bf16);
    return lm_loss(forward(mine.x), mine.y);
  };
  if (const auto stopped = trainer.fit(loss, [&] { return held_out_loss(model, corpus, c, world); })) return *stopped;
  const double final_loss = trainer.state().accuracy;
  if (!world.is_main()) return 0;
  std::printf("\nheld-out loss: %.4f nats per character, %.4f bits per character (%zu characters never trained on)\n",
              final_loss, final_loss / std::log(2.0), corpus.held.size());
  // Three samples, each starting from a new line (nanoGPT's sample.py).
  xgrad::Generator generator(sampling.seed);
  Sampling end = sampling;
  end.tokens = 200;
  for (int i = 1; i <= 3; ++i)
    std::printf("\n-- sample %d (temperature %g%s%s) --%s\n", i, sampling.options.temperature,
                sampling.options.top_k > 0 ? (", top-k " + std::to_string(sampling.options.top_k)).c_str() : "",
                sampling.options.top_p < 1 ? (", top-p " + std::to_string(sampling.options.top_p)).c_str() : "",
                sample_text(model, encode_prompt("\n", corpus.vocab), corpus.vocab, end, generator).c_str());
  trainer.finish();
  plot::render(run.csv_path, plot_path);
#ifdef XGRAD_WITH_ONNX
  if (!onnx_path.empty()) export_onnx(model, corpus, c, onnx_path);
#endif
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  xgrad::allocator_tuning_from_env();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Config c;
  train::Settings settings;
  train::RunOptions run("gpt.ckpt", "gpt.csv");
  run.threads = 2;
  std::string plot_path = "gpt.png";
  Sampling sampling;
  sampling.options.temperature = 0.8;

  CLI::App app{"Trains a character-level GPT on the King James Bible (or --text FILE), then samples from it."};
  app.get_formatter()->column_width(44);
  const auto setting = [&](const std::string& flag, auto& value, const std::string& help) {  // saved in checkpoints
    return cli::add_setting(app, settings, flag, value, help);
  };
  setting("--text", c.text, "train on this UTF-8 text file (split by lines) instead of the Bible")
      ->check(cli::not_special_file());
  setting("--n-layer", c.n_layer, "transformer blocks")->check(cli::integer_in(1, 64));
  setting("--n-head", c.n_head, "attention heads (dividing --n-embd)")->check(cli::integer_in(1, 256));
  setting("--n-embd", c.n_embd, "model width")->check(cli::integer_in(1, 4096));
  setting("--block-size", c.block_size, "context length in characters")->check(cli::integer_in(1, 65536));
  setting("--batch-size", c.batch_size, "windows per step")->check(cli::integer_in(1, 1000000));
  setting("--dropout", c.dropout, "dropout probability")->check(cli::number_in(0.0, 0.9));
  setting("--lr", c.lr, "peak learning rate (AdamW)")->check(cli::positive());
  setting("--min-lr", c.min_lr, "learning rate at the end of the cosine decay")->check(cli::non_negative());
  setting("--weight-decay", c.weight_decay, "AdamW weight decay of the matrices")->check(cli::non_negative());
  setting("--warmup", c.warmup, "linear warmup steps, then cosine decay")->check(cli::integer_from(0));
  setting("--clip", c.clip, "max gradient norm")->check(cli::positive());
  app.add_option("--iters", c.iters, "training steps (with --resume: more extends the run)")
      ->check(cli::integer_in(1, 100000000))
      ->capture_default_str();
  setting("--eval-interval", c.eval_interval, "steps between evaluations (and CSV rows)")
      ->check(cli::integer_in(1, 100000000));
  setting("--eval-iters", c.eval_iters, "held-out batches per evaluation")->check(cli::integer_in(1, 1000000));
  setting("--seed", c.seed, "seed of the split, the weights, the batch order and dropout");
  setting("--init-weights", c.init_weights, "start from these weights (safetensors of the same model)")
      ->check(cli::not_special_file());
  cli::add_bf16_flag(app, settings, c.bf16);
  cli::add_run_flags(app, run);
  std::string profile_path;
  cli::add_profile_flag(app, profile_path);
  plot::add_flag(app, plot_path);
  app.add_option("--sample", sampling.prompt, "print a continuation of this prompt by --checkpoint's model");
  app.add_option("--temperature", sampling.options.temperature, "divides the logits before sampling")
      ->check(CLI::Validator(
          [](std::string& v) {
            double x = 0;
            return cli::detail::to_double(v, x) && x > 0 && std::isfinite(x)
                       ? std::string()
                       : "expected a number > 0 (for argmax decoding pass --greedy)" + cli::detail::got(v);
          },
          "> 0"))
      ->capture_default_str();
  app.add_option("--top-k", sampling.options.top_k, "sample among the k most likely characters (default: all)")
      ->check(cli::integer_in(1, 1000000000));
  app.add_option("--top-p", sampling.options.top_p, "nucleus sampling: the most likely characters reaching p, in (0, 1]")
      ->check(CLI::Validator(
          [](std::string& v) {
            double x = 0;
            return cli::detail::to_double(v, x) && x > 0 && x <= 1 ? std::string()
                                                                   : "expected a number in (0, 1]" + cli::detail::got(v);
          },
          "(0, 1]"))
      ->capture_default_str();
  app.add_flag("--greedy", sampling.options.greedy, "the most likely character each time (argmax)");
  app.add_option("--tokens", sampling.tokens, "characters --sample generates")->check(cli::integer_in(1, 1000000))
      ->capture_default_str();
  app.add_option("--window", sampling.window,
                 "past the context, keep generating from the last W characters; 0: refuse going past it "
                 "(default: the context length)")
      ->check(cli::integer_in(0, 65536));
  std::string attention = "auto";
  app.add_option("--attention", attention,
                 "attention kernel: auto (tiled from 256 causal positions), tiled (memory linear in "
                 "--block-size) or materialized (quadratic; for comparison)")
      ->check(CLI::IsMember({"auto", "tiled", "materialized"}))
      ->capture_default_str();
  std::string onnx_path;
  app.add_option("--export-onnx", onnx_path,
                 "after training, export the model to this ONNX file (with FILE.vocab.json, and a sample of inputs "
                 "with their logits in FILE.sample.json)")
      ->check(cli::not_special_file());
  CLI11_PARSE(app, argc, argv);
  const cli::ProfileRun profiling(profile_path);  // --profile: until main returns
  xgrad::set_attention_path(attention == "tiled"          ? xgrad::AttentionPath::Tiled
                            : attention == "materialized" ? xgrad::AttentionPath::Materialized
                                                          : xgrad::AttentionPath::Auto);
  if (app.count("--seed") > 0) sampling.seed = c.seed;  // --sample draws from its own --seed (default 1)
#ifdef XGRAD_WITH_MPI
  const std::unique_ptr<train::World> world = xgrad::distributed::make_world();
#else
  const std::unique_ptr<train::World> world = std::make_unique<train::World>();
#endif
  return train::guarded(
      kProgram,
      [&] {
        if (sampling.prompt.empty() && app.count("--sample") == 0)
          return train_model(c, sampling, run, plot_path, settings, app, *world, onnx_path);
        if (!onnx_path.empty()) throw train::Refused("--export-onnx exports after training, not with --sample");
        return sample(c, sampling, run, settings, app);
      },
      *world);
}
