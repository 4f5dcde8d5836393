// Trains a small transformer encoder from scratch to sort sequences of digits (or to reverse
// them, --task reverse): 8 digits in, the same digits in ascending order out, one prediction per
// position.
//
//   tokens (B, L) -> tok_emb + pos_emb (B, L, D) -> TransformerEncoder (pre-norm, GELU, final
//   LayerNorm) -> head Linear(D, 10) -> logits (B, L, 10) -> cross_entropy against the sorted
//   sequence
//
// AdamW with a linear warmup then cosine decay (SequentialLR), gradient clipping. Accuracy is
// measured on held-out sequences that the training batches never contain. The loop, the live
// progress line, the CSV metrics, the checkpoints (every --checkpoint-interval steps, at the end
// and on Ctrl-C) and --resume (bit for bit) are xgrad::train::Trainer's. --bf16 runs the
// forward passes under xgrad::AutocastGuard (bf16 gemms, fp32 everything else).
//
// Under `mpirun -np N` (a build with XGRAD_WITH_MPI), data-parallel: every rank draws the same
// global batch of --batch-size sequences and trains on its N-th of the rows (--batch-size must be
// divisible by N), the model wrapped in DistributedDataParallel, which averages the gradients
// over the ranks, so each step is the step of one process on the whole batch (up to rounding).
// Dropout draws from each rank's own generator. Rank 0 alone prints and writes files.
// --export-onnx FILE writes the trained model as ONNX (xgrad::onnx::export_model);
// examples/onnx/sort_digits.mjs runs it in ONNX Runtime.
//
//   mpirun -np 2 build/release/examples/train_toy_encoder            (as root: --allow-run-as-root)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include <xtensor/xview.hpp>

#include <xgrad/train/cli.hpp>
#include <xgrad/train/trainer.hpp>
#include <xgrad/xgrad.hpp>

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
namespace nn = xgrad::nn;
namespace optim = xgrad::optim;
namespace train = xgrad::train;
namespace cli = xgrad::train::cli;

// Everything that defines a run's results (the flags of train::Settings, saved in the
// checkpoint so that --resume rebuilds the same run).
struct Config {
  std::string task = "sort";
  int seq_len = 8, vocab = 10, d_model = 64, layers = 2, heads = 4, dim_feedforward = 128;
  int steps = 1000, batch_size = 64, warmup = 100, eval_interval = 50, eval_size = 1000;
  double dropout = 0.0, lr = 2e-3, weight_decay = 0.01, clip = 1.0;
  std::uint64_t seed = 0;
  bool bf16 = false;
};

// ---- the task --------------------------------------------------------------------------------

struct Batch {
  IndexArray tokens;   // (B, L) digits
  IndexArray targets;  // (B, L) the digits sorted (or reversed)
};

// A sequence as a string, one byte per digit (--vocab is at most 256): the held-out set's key.
std::string key_of(const std::int64_t* digits, int n) { return std::string(digits, digits + n); }

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
    if (c.task == "sort") std::sort(y, y + L); else std::reverse(y, y + L);
  }
  return b;
}

// The batch of step `step` depends on (seed, step) alone, so a resumed run draws the same ones.
// Of the global batch, rank r of N takes rows [r B/N, (r+1) B/N).
Batch training_batch(const Config& c, int step, const std::unordered_set<std::string>& held_out,
                     const train::World& world) {
  xgrad::Generator gen(c.seed * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(step) + 1);
  const Batch global = make_batch(c, gen, static_cast<std::size_t>(c.batch_size), &held_out);
  if (world.size() == 1) return global;
  const std::size_t rows = static_cast<std::size_t>(c.batch_size / world.size());
  const std::size_t first = rows * static_cast<std::size_t>(world.rank());
  Batch mine{IndexArray(xt::view(global.tokens, xt::range(first, first + rows), xt::all())),
             IndexArray(xt::view(global.targets, xt::range(first, first + rows), xt::all()))};
  return mine;
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
                                       std::make_shared<nn::LayerNorm<float>>(c.d_model)));
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

// Predictions (argmax over the vocabulary) for a batch, in eval mode without a graph.
IndexArray predict(ToyEncoder& model, const IndexArray& tokens, bool bf16) {
  xgrad::NoGradGuard no_grad;
  xgrad::AutocastGuard autocast(bf16);
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

// The fractions of digits and of whole sequences predicted right. In a distributed run each rank
// predicts its share of the rows and the counts are summed over the ranks.
std::pair<double, double> accuracy(ToyEncoder& model, const Batch& data, bool bf16, train::World& world) {
  const std::size_t n = data.tokens.shape(0), L = data.tokens.shape(1);
  const std::size_t begin = n * std::size_t(world.rank()) / std::size_t(world.size());
  const std::size_t end = n * std::size_t(world.rank() + 1) / std::size_t(world.size());
  double counts[2] = {0, 0};  // digits right, sequences right
  if (end > begin) {
    const IndexArray mine(xt::view(data.tokens, xt::range(begin, end), xt::all()));
    const IndexArray pred = predict(model, mine, bf16);
    for (std::size_t i = begin; i < end; ++i) {
      std::size_t r = 0;
      for (std::size_t j = 0; j < L; ++j) r += pred(i - begin, j) == data.targets(i, j);
      counts[0] += double(r);
      counts[1] += r == L;
    }
  }
  world.all_reduce_sum(counts, 2);
  return {counts[0] / double(n * L), counts[1] / double(n)};
}

#ifdef XGRAD_WITH_ONNX
// --export-onnx: tokens (batch, L) -> logits (batch, L, vocab) with a dynamic batch (L is the
// model's seq_len: it adds the embeddings of positions 0..seq_len-1), and the sample: held-out rows
// at two batch sizes with this program's logits.
void export_onnx(ToyEncoder& model, const IndexArray& held_out, const std::string& path) {
  const auto rows = [&](std::size_t n) { return IndexArray(xt::view(held_out, xt::range(0, n), xt::all())); };
  xgrad::onnx::export_model(
      model,
      [&model](const xgrad::onnx::Inputs& in) { return std::vector<Tensor<float>>{model.forward(in.indices(0))}; },
      {rows(2)}, path,
      xgrad::onnx::ExportOptions().input_names({"tokens"}).output_names({"logits"}).dynamic_axes(
          {{"tokens", {{0, "batch"}}}}));
  xgrad::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  std::vector<onnx_sample::Run> runs;
  for (std::size_t n : {std::size_t(1), std::min<std::size_t>(5, held_out.shape(0))})
    runs.push_back({{{"tokens", rows(n)}}, {{"logits", model.forward(rows(n))}}});
  model.train(was_training);
  onnx_sample::write(path, runs);
  std::printf("exported the trained model to %s (ONNX, opset 17), a sample to %s.sample.json\n", path.c_str(),
              path.c_str());
}
#endif

int train_model(Config& c, const train::RunOptions& run, const std::string& plot_path, train::Settings& settings,
                const CLI::App& app, double min_accuracy, const std::string& onnx_path, train::World& world) {
#ifndef XGRAD_WITH_ONNX
  if (!onnx_path.empty()) throw train::Refused("--export-onnx: this build has no ONNX export (XGRAD_WITH_ONNX is off)");
#endif
  train::Resumed resumed =
      train::prepare_run("train_toy_encoder", run, settings, world, cli::given(app));  // c: the checkpoint's
  // --steps is not a setting: with --resume a larger value extends the run. The steps the checkpoint's
  // run planned are in its metadata ("steps"; "config.steps" in checkpoints written before extension).
  int planned = c.steps;
  if (resumed.checkpoint) {
    const auto& m = resumed.checkpoint->metadata;
    const auto it = m.count("steps") ? m.find("steps") : m.find("config.steps");
    if (it == m.end()) throw train::Refused("cannot resume: " + run.resume_path + " does not record its --steps");
    planned = std::stoi(it->second);
  }
  if (!app.count("--steps")) c.steps = planned;
  if (c.steps < resumed.state.step)
    throw train::Refused("--steps " + std::to_string(c.steps) + " is below the checkpoint's step " +
                            std::to_string(resumed.state.step));
  // The training batches draw from the sequences outside the held-out set: leave them most.
  const double distinct = std::pow(double(c.vocab), double(c.seq_len));
  if (distinct < 2.0 * c.eval_size)
    throw train::Refused("--eval-size " + std::to_string(c.eval_size) + " must be at most half of the " +
                            std::to_string(std::llround(distinct)) + " distinct sequences");
  if (c.d_model % c.heads != 0)
    throw train::Refused("--heads " + std::to_string(c.heads) + " must divide --d-model " +
                            std::to_string(c.d_model));
  if (c.batch_size % world.size() != 0)
    throw train::Refused("--batch-size " + std::to_string(c.batch_size) + " must be divisible by the " +
                            std::to_string(world.size()) + " ranks (each trains on an equal part of the batch)");

  // Held-out sequences, drawn from their own stream; training batches never contain them.
  xgrad::Generator eval_gen(c.seed ^ 0xE7A1D5EEDULL);
  const Batch held_out = make_batch(c, eval_gen, static_cast<std::size_t>(c.eval_size));
  std::unordered_set<std::string> held_out_keys;
  for (std::size_t i = 0; i < held_out.tokens.shape(0); ++i)
    held_out_keys.insert(key_of(held_out.tokens.data() + i * std::size_t(c.seq_len), c.seq_len));

  xgrad::manual_seed(c.seed);
  const auto model_ptr = std::make_shared<ToyEncoder>(c);
  ToyEncoder& model = *model_ptr;
  // forward(tokens) of this rank: through DistributedDataParallel in a world of several ranks
  // (its construction makes rank 0's weights everyone's), the model itself otherwise.
  std::function<Tensor<float>(const IndexArray&)> forward = [&model](const IndexArray& t) { return model.forward(t); };
#ifdef XGRAD_WITH_MPI
  std::shared_ptr<xgrad::distributed::DistributedDataParallel<ToyEncoder>> ddp;
  if (world.size() > 1) {
    ddp = std::make_shared<xgrad::distributed::DistributedDataParallel<ToyEncoder>>(model_ptr);
    forward = [ddp](const IndexArray& t) { return ddp->forward(t); };
  }
#endif
  // Dropout: rank 0 goes on with the stream the weights came from, the others with their own.
  if (world.rank() > 0) xgrad::manual_seed(c.seed + 0xD1B54A32D192ED03ULL * static_cast<std::uint64_t>(world.rank()));
  optim::AdamW<float> optimizer(model.parameters(), optim::AdamWOptions(c.lr).weight_decay(c.weight_decay));
  // Warmup from lr/100 to lr over `warmup` steps, then cosine down to 0 at the last step (of the
  // extended run, when --resume gets a larger --steps; the warmup stays the planned run's).
  const int warmup = std::min(c.warmup, planned - 1);
  std::vector<std::shared_ptr<optim::LRScheduler<float>>> phases;
  std::vector<int> milestones;
  if (warmup > 0) {
    phases.push_back(std::make_shared<optim::LinearLR<float>>(optimizer, 0.01, 1.0, warmup));
    milestones.push_back(warmup);
  }
  phases.push_back(std::make_shared<optim::CosineAnnealingLR<float>>(optimizer, std::max(1, c.steps - warmup)));
  optim::SequentialLR<float> schedule(optimizer, phases, milestones);

  train::Trainer trainer("train_toy_encoder", run, settings, std::move(resumed), model, optimizer, &schedule,
                         {c.steps, c.eval_interval, c.clip}, world);
  if (const int done = trainer.first_step(); c.steps != planned && done > warmup)  // extended: the lr follows the
    optimizer.param_groups()[0].options().set_lr(  // cosine of a run planned for c.steps from the start
        c.lr * (1 + std::cos(M_PI * (done - warmup) / (c.steps - warmup))) / 2);
  const auto save_steps = std::make_shared<train::LambdaCallback>();
  save_steps->save_checkpoint = [&](train::Trainer&, std::map<std::string, std::string>& metadata) {
    metadata["steps"] = std::to_string(c.steps);
  };
  trainer.add_callback(save_steps);
  std::size_t count = 0;
  for (const auto& p : model.parameters()) count += p.numel();
  if (world.is_main()) {
    std::printf(
        "task: %s %d digits (0-%d) | model: d_model %d, %d layers, %d heads, ff %d, %zu parameters\n"
        "training: %d steps of %d sequences, AdamW lr %g (warmup %d, cosine), clip %g; held-out: %d sequences\n"
        "precision: %s\n",
        c.task.c_str(), c.seq_len, c.vocab - 1, c.d_model, c.layers, c.heads, c.dim_feedforward, count, c.steps,
        c.batch_size, c.lr, warmup, c.clip, c.eval_size, train::precision_description(c.bf16).c_str());
    if (world.size() > 1)
      std::printf("data parallel: %d ranks, %d sequences each per step\n", world.size(), c.batch_size / world.size());
  }

  // logits (B, L, V) -> (B L, V) against targets (B L); with --bf16 the forward and the loss under
  // autocast (the backward follows the forward's choice).
  const auto loss = [&](int step) {
    const Batch batch = training_batch(c, step, held_out_keys, world);
    xgrad::AutocastGuard autocast(c.bf16);
    return xgrad::cross_entropy(xgrad::reshape(forward(batch.tokens), {-1, c.vocab}),
                                IndexArray(xt::reshape_view(batch.targets, {batch.targets.size()})));
  };
  if (const auto stopped = trainer.fit(loss, [&] { return accuracy(model, held_out, c.bf16, world).first; }))
    return *stopped;

  const auto [tokens, sequences] = accuracy(model, held_out, c.bf16, world);
  if (!world.is_main()) return tokens < min_accuracy ? 1 : 0;
  std::printf("\nheld-out accuracy: %.2f%% of digits, %.2f%% of whole sequences (%d sequences never trained on)\n",
              100 * tokens, 100 * sequences, c.eval_size);
  const IndexArray pred = predict(model, held_out.tokens, c.bf16);
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
  trainer.finish();
  plot::render(run.csv_path, plot_path);
#ifdef XGRAD_WITH_ONNX
  if (!onnx_path.empty()) export_onnx(model, held_out.tokens, onnx_path);
#endif
  if (tokens < min_accuracy) {
    std::printf("accuracy %.4f is below --min-accuracy %.4f\n", tokens, min_accuracy);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  xgrad::allocator_tuning_from_env();  // keep freed tensor memory for the next step
  Config c;
  train::Settings settings;
  train::RunOptions run("toy_encoder.ckpt", "toy_encoder.csv");
  std::string plot_path = "toy_encoder.png";
  double min_accuracy = 0;

  CLI::App app{
      "Trains a small transformer encoder from scratch to sort (or reverse) sequences of digits.\n"
      "With the defaults it reaches >= 99% token accuracy on held-out sequences in under a minute on 2 cores."};
  app.get_formatter()->column_width(44);
  const auto setting = [&](const std::string& flag, auto& value, const std::string& help) {  // saved in checkpoints
    return cli::add_setting(app, settings, flag, value, help);
  };
  setting("--task", c.task, "sort or reverse")->check(CLI::IsMember({"sort", "reverse"}));
  setting("--seq-len", c.seq_len, "digits per sequence")->check(cli::integer_in(2, 64));
  setting("--vocab", c.vocab, "distinct digits")->check(cli::integer_in(2, 256));
  setting("--d-model", c.d_model, "model width")->check(cli::integer_in(1, 4096));
  setting("--layers", c.layers, "encoder layers")->check(cli::integer_in(1, 64));
  setting("--heads", c.heads, "attention heads (must divide --d-model)")->check(cli::integer_in(1, 256));
  setting("--dim-feedforward", c.dim_feedforward, "feed-forward width")->check(cli::integer_in(1, 65536));
  setting("--dropout", c.dropout, "dropout probability")->check(cli::number_in(0.0, 0.9));
  app.add_option("--steps", c.steps, "training steps (with --resume: more extends the run)")
      ->check(cli::integer_in(1, 100000000))
      ->capture_default_str();
  setting("--batch-size", c.batch_size, "sequences per step")->check(cli::integer_in(1, 1000000));
  setting("--lr", c.lr, "peak learning rate (AdamW)")->check(cli::positive());
  setting("--weight-decay", c.weight_decay, "AdamW weight decay")->check(cli::non_negative());
  setting("--warmup", c.warmup, "linear warmup steps, then cosine decay")->check(cli::integer_from(0));
  setting("--clip", c.clip, "max gradient norm")->check(cli::positive());
  setting("--seed", c.seed, "seed of the weights, data and dropout");
  setting("--eval-interval", c.eval_interval, "steps between evaluations (and CSV rows)")
      ->check(cli::integer_in(1, 100000000));
  setting("--eval-size", c.eval_size, "held-out sequences")->check(cli::integer_in(1, 1000000));
  cli::add_bf16_flag(app, settings, c.bf16);
  cli::add_run_flags(app, run);
  std::string profile_path;
  cli::add_profile_flag(app, profile_path);
  plot::add_flag(app, plot_path);
  app.add_option("--min-accuracy", min_accuracy, "exit with 1 if the final held-out token accuracy is lower")
      ->check(cli::number_in(0.0, 1.0));
  std::string onnx_path;
  app.add_option("--export-onnx", onnx_path,
                 "after training, export the model to this ONNX file (and a sample of inputs with their outputs "
                 "to FILE.sample.json)")
      ->check(cli::not_special_file());
  CLI11_PARSE(app, argc, argv);
  const cli::ProfileRun profiling(profile_path);  // --profile: until main returns
  // Under mpirun -np N > 1 (a build with MPI): the ranks' process group, until main returns.
#ifdef XGRAD_WITH_MPI
  const std::unique_ptr<train::World> world = xgrad::distributed::make_world();
#else
  const std::unique_ptr<train::World> world = std::make_unique<train::World>();
#endif
  return train::guarded(
      "train_toy_encoder",
      [&] { return train_model(c, run, plot_path, settings, app, min_accuracy, onnx_path, *world); },
      *world);
}
