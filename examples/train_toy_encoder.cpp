// Trains a small transformer encoder from scratch to sort sequences of digits (or to reverse
// them, --task reverse): 8 digits in, the same digits in ascending order out, one prediction per
// position.
//
//   tokens (B, L) -> tok_emb + pos_emb (B, L, D) -> TransformerEncoder (pre-norm, GELU, final
//   LayerNorm) -> head Linear(D, 10) -> logits (B, L, 10) -> cross_entropy against the sorted
//   sequence
//
// AdamW with a linear warmup then cosine decay (SequentialLR), gradient clipping. Accuracy is
// measured on held-out sequences that the training batches never contain. Prints a live
// progress line on a terminal (plain lines otherwise), writes the metrics to a CSV, saves a
// checkpoint every --checkpoint-interval steps, at the end and on Ctrl-C; --resume continues a
// run exactly where it stopped (the same parameters, bit for bit, as an uninterrupted run).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_set>
#include <vector>

#include <CLI/CLI.hpp>

#include <xgrad/serialize/checkpoint.hpp>
#include <xgrad/serialize/safetensors.hpp>
#include <xgrad/xgrad.hpp>

namespace {

using xgrad::IndexArray;
using xgrad::Tensor;
namespace nn = xgrad::nn;
namespace optim = xgrad::optim;

// Everything that defines a run's results; saved in the checkpoint so that --resume rebuilds the
// same run. Keys are the flag names without "--".
struct Config {
  std::string task = "sort";
  int seq_len = 8;
  int vocab = 10;
  int d_model = 64;
  int layers = 2;
  int heads = 4;
  int dim_feedforward = 128;
  double dropout = 0.0;
  int steps = 1000;
  int batch_size = 64;
  double lr = 2e-3;
  double weight_decay = 0.01;
  int warmup = 100;
  double clip = 1.0;
  std::uint64_t seed = 0;
  int eval_interval = 50;
  int eval_size = 1000;

  std::map<std::string, std::string> to_map() const {
    return {{"task", task},
            {"seq-len", std::to_string(seq_len)},
            {"vocab", std::to_string(vocab)},
            {"d-model", std::to_string(d_model)},
            {"layers", std::to_string(layers)},
            {"heads", std::to_string(heads)},
            {"dim-feedforward", std::to_string(dim_feedforward)},
            {"dropout", exact(dropout)},
            {"steps", std::to_string(steps)},
            {"batch-size", std::to_string(batch_size)},
            {"lr", exact(lr)},
            {"weight-decay", exact(weight_decay)},
            {"warmup", std::to_string(warmup)},
            {"clip", exact(clip)},
            {"seed", std::to_string(seed)},
            {"eval-interval", std::to_string(eval_interval)},
            {"eval-size", std::to_string(eval_size)}};
  }
  // Throws std::out_of_range or std::invalid_argument on a missing or malformed entry.
  static Config from_map(const std::map<std::string, std::string>& m) {
    Config c;
    c.task = m.at("task");
    c.seq_len = std::stoi(m.at("seq-len"));
    c.vocab = std::stoi(m.at("vocab"));
    c.d_model = std::stoi(m.at("d-model"));
    c.layers = std::stoi(m.at("layers"));
    c.heads = std::stoi(m.at("heads"));
    c.dim_feedforward = std::stoi(m.at("dim-feedforward"));
    c.dropout = std::stod(m.at("dropout"));
    c.steps = std::stoi(m.at("steps"));
    c.batch_size = std::stoi(m.at("batch-size"));
    c.lr = std::stod(m.at("lr"));
    c.weight_decay = std::stod(m.at("weight-decay"));
    c.warmup = std::stoi(m.at("warmup"));
    c.clip = std::stod(m.at("clip"));
    c.seed = std::stoull(m.at("seed"));
    c.eval_interval = std::stoi(m.at("eval-interval"));
    c.eval_size = std::stoi(m.at("eval-size"));
    return c;
  }
  // A double printed so that it reads back to the same bits.
  static std::string exact(double v) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
  }
};

// ---- the task --------------------------------------------------------------------------------

struct Batch {
  IndexArray tokens;   // (B, L) digits
  IndexArray targets;  // (B, L) the digits sorted (or reversed)
};

// A sequence as a string, one byte per digit (--vocab is at most 256): the held-out set's key.
std::string key_of(const std::int64_t* digits, int n) {
  std::string key(static_cast<std::size_t>(n), '\0');
  for (int i = 0; i < n; ++i) key[static_cast<std::size_t>(i)] = static_cast<char>(digits[i]);
  return key;
}

// n random sequences, none of them in `exclude`.
Batch make_batch(const Config& c, xgrad::Generator& gen, std::size_t n,
                 const std::unordered_set<std::string>* exclude = nullptr) {
  const auto L = static_cast<std::size_t>(c.seq_len);
  Batch b{IndexArray::from_shape({n, L}), IndexArray::from_shape({n, L})};
  for (std::size_t i = 0; i < n; ++i) {
    std::int64_t* x = b.tokens.data() + i * L;
    do {
      for (std::size_t j = 0; j < L; ++j) x[j] = static_cast<std::int64_t>(gen.next_u64() % std::uint64_t(c.vocab));
    } while (exclude != nullptr && exclude->count(key_of(x, c.seq_len)) != 0);
    std::int64_t* y = b.targets.data() + i * L;
    std::copy(x, x + L, y);
    if (c.task == "sort") {
      std::sort(y, y + L);
    } else {
      std::reverse(y, y + L);
    }
  }
  return b;
}

// The batch of step `step` depends on (seed, step) alone, so a resumed run draws the same ones.
Batch training_batch(const Config& c, int step, const std::unordered_set<std::string>& held_out) {
  xgrad::Generator gen(c.seed * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(step) + 1);
  return make_batch(c, gen, static_cast<std::size_t>(c.batch_size), &held_out);
}

// ---- the model -------------------------------------------------------------------------------

class ToyEncoder : public nn::Module<float> {
 public:
  explicit ToyEncoder(const Config& c) : Module("ToyEncoder"), seq_len_(c.seq_len) {
    tok_emb = register_module("tok_emb", std::make_shared<nn::Embedding<float>>(c.vocab, c.d_model));
    pos_emb = register_module("pos_emb", std::make_shared<nn::Embedding<float>>(c.seq_len, c.d_model));
    const auto options = nn::TransformerEncoderLayerOptions(c.d_model, c.heads)
                             .dim_feedforward(c.dim_feedforward)
                             .dropout(c.dropout)
                             .activation("gelu")
                             .batch_first(true)
                             .norm_first(true);
    encoder =
        register_module("encoder", std::make_shared<nn::TransformerEncoder<float>>(
                                       std::make_shared<nn::TransformerEncoderLayer<float>>(options), c.layers,
                                       std::make_shared<nn::LayerNorm<float>>(static_cast<std::size_t>(c.d_model))));
    head = register_module("head", std::make_shared<nn::Linear<float>>(c.d_model, c.vocab));
  }

  // tokens (B, L) -> logits (B, L, vocab)
  Tensor<float> forward(const IndexArray& tokens) {
    IndexArray positions = IndexArray::from_shape({static_cast<std::size_t>(seq_len_)});
    for (int i = 0; i < seq_len_; ++i) positions(i) = i;
    const Tensor<float> x = tok_emb->forward(tokens) + pos_emb->forward(positions);  // (B, L, D) + (L, D)
    return head->forward(encoder->forward(x));
  }

  std::shared_ptr<nn::Embedding<float>> tok_emb, pos_emb;
  std::shared_ptr<nn::TransformerEncoder<float>> encoder;
  std::shared_ptr<nn::Linear<float>> head;

 private:
  int seq_len_;
};

struct Accuracy {
  double tokens = 0;     // fraction of positions predicted right
  double sequences = 0;  // fraction of sequences entirely right
};

// Predictions (argmax over the vocabulary) for a batch, in eval mode without a graph.
IndexArray predict(ToyEncoder& model, const IndexArray& tokens) {
  xgrad::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  const xgrad::Array<float> logits = model.forward(tokens).value();
  model.train(was_training);
  const std::size_t V = logits.shape(2);
  IndexArray out = IndexArray::from_shape({tokens.shape(0), tokens.shape(1)});
  for (std::size_t i = 0; i < out.size(); ++i) {
    const float* row = logits.data() + i * V;
    out.data()[i] = std::max_element(row, row + V) - row;
  }
  return out;
}

Accuracy evaluate(ToyEncoder& model, const Batch& data) {
  const IndexArray pred = predict(model, data.tokens);
  const std::size_t n = data.tokens.shape(0), L = data.tokens.shape(1);
  std::size_t right = 0, whole = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t r = 0;
    for (std::size_t j = 0; j < L; ++j) r += pred(i, j) == data.targets(i, j);
    right += r;
    whole += r == L;
  }
  return {double(right) / double(n * L), double(whole) / double(n)};
}

// ---- progress, CSV, plot ---------------------------------------------------------------------

// Ctrl-C sets the flag, which the loop checks after each step; a second Ctrl-C ends the program
// at once (a checkpoint being written is then left as it was before: saves are atomic).
volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void on_sigint(int) {
  g_interrupted = 1;
  std::signal(SIGINT, SIG_DFL);
}

std::string format_duration(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

// One line redrawn in place with '\r' on a terminal (at most 10 times a second); on a pipe or
// file, one plain line per evaluation.
class Progress {
 public:
  Progress() : tty_(isatty(STDOUT_FILENO) != 0) {}

  // steps_run and seconds: this run's, for the speed and the time left.
  void update(int step, int steps, double loss, double accuracy, int steps_run, double seconds, bool row) {
    const double rate = seconds > 0 ? steps_run / seconds : 0;
    const double left = rate > 0 ? (steps - step) / rate : 0;
    char line[200];
    char acc[16] = "     -";
    if (accuracy >= 0) std::snprintf(acc, sizeof acc, "%6.2f%%", 100 * accuracy);
    std::snprintf(line, sizeof line, "step %*d/%d | loss %.4f | held-out accuracy %s | %5.1f steps/s | %s left",
                  int(std::to_string(steps).size()), step, steps, loss, acc, rate, format_duration(left).c_str());
    if (tty_) {
      const auto now = std::chrono::steady_clock::now();
      if (!row && step != steps && now - last_draw_ < std::chrono::milliseconds(100)) return;
      last_draw_ = now;
      std::printf("\r%s\033[K", line);
    } else if (row) {
      std::printf("%s\n", line);
    }
    std::fflush(stdout);
    drawn_ = tty_;
  }
  // A message on its own line, keeping the progress line below it.
  void note(const std::string& message) {
    finish();
    std::printf("%s\n", message.c_str());
    std::fflush(stdout);
  }
  // Ends the redrawn line.
  void finish() {
    if (drawn_) std::printf("\n");
    drawn_ = false;
  }

 private:
  bool tty_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
};

// step,loss,accuracy,lr,elapsed: one row per evaluation. A resumed run keeps the rows up to its
// step (a run stopped after its last checkpoint may have written more) and appends.
class CsvLog {
 public:
  CsvLog(const std::string& path, int resumed_step) : path_(path) {
    if (path.empty()) return;
    std::vector<std::string> kept;
    if (resumed_step > 0) {
      std::ifstream in(path);
      std::string line;
      while (std::getline(in, line))
        if (!line.empty() && std::isdigit(static_cast<unsigned char>(line[0])) && std::stoi(line) <= resumed_step)
          kept.push_back(line);
    }
    out_.open(path, std::ios::trunc);
    if (!out_) throw std::runtime_error("cannot write " + path);
    out_ << "step,loss,accuracy,lr,elapsed\n";
    for (const auto& line : kept) out_ << line << '\n';
    out_.flush();
  }
  void row(int step, double loss, double accuracy, double lr, double elapsed) {
    if (!out_.is_open()) return;
    char buf[160];
    std::snprintf(buf, sizeof buf, "%d,%.9g,%.9g,%.9g,%.3f\n", step, loss, accuracy, lr, elapsed);
    out_ << buf;
    out_.flush();
  }

 private:
  std::string path_;
  std::ofstream out_;
};

// Renders the CSV to a PNG with examples/plot_loss.sh when gnuplot is installed.
void plot(const std::string& csv, const std::string& png) {
  std::fflush(stdout);  // before the script's own output
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    std::printf(
        "loss curve not rendered: gnuplot is not installed (apt-get install gnuplot-nox), then:\n"
        "  sh %s/plot_loss.sh %s %s\n",
        XGRAD_EXAMPLES_DIR, csv.c_str(), png.c_str());
    return;
  }
  const std::string command = std::string("sh '") + XGRAD_EXAMPLES_DIR + "/plot_loss.sh' '" + csv + "' '" + png + "'";
  if (std::system(command.c_str()) != 0) std::printf("plot_loss.sh failed\n");
}

// ---- checkpoints -----------------------------------------------------------------------------

// What the loop carries from step to step besides the model, optimizer, schedule and generator.
struct TrainState {
  int step = 0;         // steps done
  double loss_sum = 0;  // training loss summed since the last evaluation
  int loss_count = 0;
  double accuracy = 0;  // at the last evaluation
  double elapsed = 0;   // seconds of training over every run
};

// Checkpoint metadata: the configuration ("config.<flag>") and the TrainState. Doubles are
// written in hexadecimal (%a) so that they read back to the same bits.
std::map<std::string, std::string> metadata_of(const Config& c, const TrainState& state) {
  std::map<std::string, std::string> m;
  for (const auto& [key, value] : c.to_map()) m["config." + key] = value;
  const auto hex = [](double v) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%a", v);
    return std::string(buf);
  };
  m["loss_sum"] = hex(state.loss_sum);
  m["loss_count"] = std::to_string(state.loss_count);
  m["accuracy"] = hex(state.accuracy);
  m["elapsed"] = hex(state.elapsed);
  return m;
}

// The configuration and loop state a checkpoint was saved with; throws naming the file when the
// metadata is not this program's.
std::pair<Config, TrainState> read_metadata(const std::map<std::string, std::string>& m, std::int64_t step,
                                            const std::string& path) {
  try {
    std::map<std::string, std::string> config;
    for (const auto& [key, value] : m)
      if (key.rfind("config.", 0) == 0) config[key.substr(7)] = value;
    TrainState state;
    state.step = static_cast<int>(step);
    state.loss_sum = std::stod(m.at("loss_sum"));
    state.loss_count = std::stoi(m.at("loss_count"));
    state.accuracy = std::stod(m.at("accuracy"));
    state.elapsed = std::stod(m.at("elapsed"));
    return {Config::from_map(config), state};
  } catch (const std::logic_error&) {  // std::out_of_range, std::invalid_argument
    throw std::runtime_error(path +
                             " is not a checkpoint of train_toy_encoder (its metadata lacks the run's settings)");
  }
}

// The flags that do not change the results of a run.
struct RunOptions {
  std::string checkpoint_path = "toy_encoder.ckpt";
  int checkpoint_interval = 250;
  std::string resume_path;
  std::string csv_path = "toy_encoder.csv";
  std::string plot_path = "toy_encoder.png";
  std::string weights_path;
  int stop_at = 0;
  double min_accuracy = 0;
  int threads = 1;
};

int train(Config c, const RunOptions& run, const CLI::App& app);

}  // namespace

int main(int argc, char** argv) {
  xgrad::allocator_tuning_from_env();  // keep freed tensor memory for the next step
  Config c;
  RunOptions run;

  CLI::App app{
      "Trains a small transformer encoder from scratch to sort (or reverse) sequences of digits.\n"
      "With the defaults it reaches >= 99% token accuracy on held-out sequences in under a minute on 2 cores."};
  app.get_formatter()->column_width(44);
  app.add_option("--task", c.task, "sort or reverse")->check(CLI::IsMember({"sort", "reverse"}))->capture_default_str();
  app.add_option("--seq-len", c.seq_len, "digits per sequence")->check(CLI::Range(2, 64))->capture_default_str();
  app.add_option("--vocab", c.vocab, "distinct digits")->check(CLI::Range(2, 256))->capture_default_str();
  app.add_option("--d-model", c.d_model, "model width")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--layers", c.layers, "encoder layers")->check(CLI::Range(1, 64))->capture_default_str();
  app.add_option("--heads", c.heads, "attention heads (must divide --d-model)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--dim-feedforward", c.dim_feedforward, "feed-forward width")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  app.add_option("--dropout", c.dropout, "dropout probability")->check(CLI::Range(0.0, 0.9))->capture_default_str();
  app.add_option("--steps", c.steps, "training steps")->check(CLI::Range(1, 100000000))->capture_default_str();
  app.add_option("--batch-size", c.batch_size, "sequences per step")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--lr", c.lr, "peak learning rate (AdamW)")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--weight-decay", c.weight_decay, "AdamW weight decay")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--warmup", c.warmup, "linear warmup steps, then cosine decay")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--clip", c.clip, "max gradient norm")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--seed", c.seed, "seed of the weights, data and dropout")->capture_default_str();
  app.add_option("--eval-interval", c.eval_interval, "steps between evaluations (and CSV rows)")
      ->check(CLI::Range(1, 100000000))
      ->capture_default_str();
  app.add_option("--eval-size", c.eval_size, "held-out sequences")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--checkpoint", run.checkpoint_path, "checkpoint file (written atomically); empty: none")
      ->capture_default_str();
  app.add_option("--checkpoint-interval", run.checkpoint_interval, "steps between checkpoints; 0: only at the end")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--resume", run.resume_path, "continue the run saved in this checkpoint")->check(CLI::ExistingFile);
  app.add_option("--csv", run.csv_path, "metrics file (step,loss,accuracy,lr,elapsed); empty: none")
      ->capture_default_str();
  app.add_option("--plot", run.plot_path, "loss curve PNG rendered with gnuplot at the end; empty: none")
      ->capture_default_str();
  app.add_option("--save-weights", run.weights_path, "write the final weights as safetensors (loads in PyTorch)");
  app.add_option("--stop-at", run.stop_at, "stop at this step with a checkpoint, as Ctrl-C does")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--min-accuracy", run.min_accuracy, "exit with 1 if the final held-out token accuracy is lower")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--threads", run.threads,
                 "xgrad::set_num_threads; one is fastest for a model this small (0: xgrad's default, every core); "
                 "a resumed run should use the same count to continue bit for bit")
      ->check(CLI::Range(0, 256))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return train(c, run, app);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "\ntrain_toy_encoder: %s\n", e.what());
    return 1;
  }
}

namespace {

int train(Config c, const RunOptions& run, const CLI::App& app) {
  // A resumed run takes its configuration from the checkpoint; a flag given again must agree.
  Progress progress;
  std::optional<xgrad::Checkpoint<float>> resumed;
  TrainState state;
  if (!run.resume_path.empty()) {
    try {
      resumed = xgrad::load_checkpoint<float>(run.resume_path);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cannot resume: %s\n", e.what());
      return 2;
    }
    Config saved;
    try {
      std::tie(saved, state) = read_metadata(resumed->metadata, resumed->step, run.resume_path);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cannot resume: %s\n", e.what());
      return 2;
    }
    const auto given = c.to_map();
    for (const auto& [key, value] : saved.to_map()) {
      if (app.count("--" + key) != 0 && given.at(key) != value) {
        std::fprintf(stderr, "--%s %s differs from the checkpoint's %s (%s)\n", key.c_str(), given.at(key).c_str(),
                     value.c_str(), run.resume_path.c_str());
        return 2;
      }
    }
    c = saved;
  }
  // The training batches draw from the sequences outside the held-out set: leave them most.
  if (std::pow(double(c.vocab), double(c.seq_len)) < 2.0 * c.eval_size) {
    std::fprintf(stderr, "--eval-size %d must be at most half of the %.0f distinct sequences\n", c.eval_size,
                 std::pow(double(c.vocab), double(c.seq_len)));
    return 2;
  }
  if (c.d_model % c.heads != 0) {
    std::fprintf(stderr, "--heads %d must divide --d-model %d\n", c.heads, c.d_model);
    return 2;
  }
  if (run.threads > 0) xgrad::set_num_threads(run.threads);

  // Held-out sequences, drawn from their own stream; training batches never contain them.
  xgrad::Generator eval_gen(c.seed ^ 0xE7A1D5EEDULL);
  const Batch held_out = make_batch(c, eval_gen, static_cast<std::size_t>(c.eval_size));
  std::unordered_set<std::string> held_out_keys;
  for (std::size_t i = 0; i < held_out.tokens.shape(0); ++i)
    held_out_keys.insert(key_of(held_out.tokens.data() + i * std::size_t(c.seq_len), c.seq_len));

  xgrad::manual_seed(c.seed);
  ToyEncoder model(c);
  const std::vector<Tensor<float>> params = model.parameters();
  optim::AdamW<float> optimizer(params, optim::AdamWOptions(c.lr).weight_decay(c.weight_decay));
  // Warmup from lr/100 to lr over `warmup` steps, then cosine down to 0 at the last step.
  const int warmup = std::min(c.warmup, c.steps - 1);
  std::vector<std::shared_ptr<optim::LRScheduler<float>>> phases;
  std::vector<int> milestones;
  if (warmup > 0) {
    phases.push_back(std::make_shared<optim::LinearLR<float>>(optimizer, 0.01, 1.0, warmup));
    milestones.push_back(warmup);
  }
  phases.push_back(std::make_shared<optim::CosineAnnealingLR<float>>(optimizer, std::max(1, c.steps - warmup)));
  optim::SequentialLR<float> schedule(optimizer, phases, milestones);

  if (resumed) {
    try {
      resumed->restore(model, optimizer, &schedule, xgrad::default_generator());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cannot resume from %s: %s\n", run.resume_path.c_str(), e.what());
      return 2;
    }
    std::printf("resumed from %s at step %d of %d\n", run.resume_path.c_str(), state.step, c.steps);
    resumed.reset();
  }
  std::size_t count = 0;
  for (const auto& p : params) count += p.numel();
  std::printf(
      "task: %s %d digits (0-%d) | model: d_model %d, %d layers, %d heads, ff %d, %zu parameters\n"
      "training: %d steps of %d sequences, AdamW lr %g (warmup %d, cosine), clip %g; held-out: %d sequences\n",
      c.task.c_str(), c.seq_len, c.vocab - 1, c.d_model, c.layers, c.heads, c.dim_feedforward, count, c.steps,
      c.batch_size, c.lr, warmup, c.clip, c.eval_size);

  CsvLog csv(run.csv_path, state.step);
  const auto save = [&](const char* why) {
    if (run.checkpoint_path.empty()) return;
    xgrad::save_checkpoint(run.checkpoint_path, model, optimizer, &schedule, xgrad::default_generator(), state.step,
                           metadata_of(c, state));
    progress.note(std::string("checkpoint ") + run.checkpoint_path + " (step " + std::to_string(state.step) + ", " +
                  why + ")");
  };
  const std::string how_to_continue = run.checkpoint_path.empty() ? "no checkpoint written (--checkpoint is empty)"
                                                                  : "continue with --resume " + run.checkpoint_path;
  std::signal(SIGINT, on_sigint);

  const auto start = std::chrono::steady_clock::now();
  const double elapsed_before = state.elapsed;
  const int first_step = state.step;
  const auto elapsed = [&] {
    return elapsed_before + std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  model.train();
  while (state.step < c.steps) {
    const Batch batch = training_batch(c, state.step, held_out_keys);
    // logits (B, L, V) -> (B L, V) against targets (B L)
    const Tensor<float> logits = model.forward(batch.tokens);
    const Tensor<float> loss = xgrad::cross_entropy(
        xgrad::reshape(logits, {-1, c.vocab}), IndexArray(xt::reshape_view(batch.targets, {batch.targets.size()})));
    optimizer.zero_grad();
    loss.backward();
    optim::clip_grad_norm_(params, c.clip);
    const double lr = optimizer.param_groups()[0].options().get_lr();
    optimizer.step();
    schedule.step();
    ++state.step;
    state.loss_sum += loss.item();
    ++state.loss_count;

    if (state.step % c.eval_interval == 0 || state.step == c.steps) {
      state.accuracy = evaluate(model, held_out).tokens;
      const double mean_loss = state.loss_sum / state.loss_count;
      csv.row(state.step, mean_loss, state.accuracy, lr, elapsed());
      progress.update(state.step, c.steps, mean_loss, state.accuracy, state.step - first_step,
                      elapsed() - elapsed_before,
                      /*row=*/true);
      state.loss_sum = 0;
      state.loss_count = 0;
    } else {
      progress.update(state.step, c.steps, state.loss_sum / state.loss_count, state.accuracy, state.step - first_step,
                      elapsed() - elapsed_before, /*row=*/false);
    }
    state.elapsed = elapsed();
    if (g_interrupted) {
      save("interrupted");
      progress.finish();
      std::printf("stopped by Ctrl-C at step %d; %s\n", state.step, how_to_continue.c_str());
      return 130;
    }
    if (state.step == run.stop_at && state.step < c.steps) {
      save("--stop-at");
      progress.finish();
      std::printf("stopped at step %d (--stop-at); %s\n", state.step, how_to_continue.c_str());
      return 0;
    }
    if (run.checkpoint_interval > 0 && state.step % run.checkpoint_interval == 0 && state.step < c.steps)
      save("periodic");
  }
  save("final");
  progress.finish();

  const Accuracy final_accuracy = evaluate(model, held_out);
  std::printf("\nheld-out accuracy: %.2f%% of digits, %.2f%% of whole sequences (%d sequences never trained on)\n",
              100 * final_accuracy.tokens, 100 * final_accuracy.sequences, c.eval_size);
  const IndexArray pred = predict(model, held_out.tokens);
  for (std::size_t i = 0; i < std::min<std::size_t>(3, held_out.tokens.shape(0)); ++i) {
    std::string line = "  ";
    for (std::size_t j = 0; j < held_out.tokens.shape(1); ++j) line += std::to_string(held_out.tokens(i, j)) + " ";
    line += "->";
    bool right = true;
    for (std::size_t j = 0; j < held_out.tokens.shape(1); ++j) {
      line += " " + std::to_string(pred(i, j));
      right = right && pred(i, j) == held_out.targets(i, j);
    }
    std::printf("%s  %s\n", line.c_str(), right ? "(right)" : "(wrong)");
  }
  std::printf("wall time: %.1f s for %d steps in this run (%.1f s in total)\n", elapsed() - elapsed_before,
              state.step - first_step, elapsed());
  if (!run.weights_path.empty()) {
    xgrad::save_safetensors(model, run.weights_path);
    std::printf("weights: %s\n", run.weights_path.c_str());
  }
  if (!run.csv_path.empty() && !run.plot_path.empty()) plot(run.csv_path, run.plot_path);
  if (final_accuracy.tokens < run.min_accuracy) {
    std::printf("accuracy %.4f is below --min-accuracy %.4f\n", final_accuracy.tokens, run.min_accuracy);
    return 1;
  }
  return 0;
}

}  // namespace
