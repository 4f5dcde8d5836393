// Trains a small transformer encoder from scratch to sort sequences of digits (or to reverse
// them, --task reverse): 8 digits in, the same digits in ascending order out, one prediction per
// position (the task and the model: support/sort_digits.hpp).
//
// AdamW with a linear warmup then cosine decay (xgrad::optim::warmup_cosine_lr), gradient
// clipping. Accuracy is measured on held-out sequences that the training batches never contain.
// The run is xgrad::train::Trainer's: the loop, the progress line, the CSV
// (step,loss,val_accuracy,lr,elapsed), the checkpoints (every --checkpoint-interval steps, at the
// end and on Ctrl-C), --resume (bit for bit), a larger --steps extending a run, and the output
// paths checked before training. --bf16 runs the forward passes under xgrad::AutocastGuard (bf16 gemms, fp32 everything
// else).
//
// Under `mpirun -np N` (a build with XGRAD_WITH_MPI), data-parallel: every rank draws the same
// global batch of --batch-size sequences and trains on its N-th of the rows (--batch-size must be
// divisible by N), the model wrapped in DistributedDataParallel (xgrad::train::DataParallel), so
// each step is the step of one process on the whole batch (up to rounding). Rank 0 alone prints
// and writes files. --export-onnx FILE writes the trained model as ONNX; with --resume of a
// finished run and no larger --steps it exports that checkpoint without training (nor rewriting
// it); examples/onnx/sort_digits.mjs runs it in ONNX Runtime.
//
//   mpirun -np 2 build/release/examples/train_toy_encoder            (as root: --allow-run-as-root)
//   train_toy_encoder --resume toy_encoder.ckpt --export-onnx toy.onnx   (export only, ~1 s)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <unordered_set>

#include <xgrad/train/cli.hpp>
#include <xgrad/train/data_parallel.hpp>
#include <xgrad/train/trainer.hpp>
#include <xgrad/xgrad.hpp>

#include "support/output_paths.hpp"
#include "support/plot.hpp"
#include "support/sort_digits.hpp"

namespace {

using sort_digits::Batch;
namespace train = xgrad::train;
namespace cli = xgrad::train::cli;

// Everything that defines a run's results (the flags of train::Settings, saved in the
// checkpoint so that --resume rebuilds the same run).
struct Config {
  std::string task = "sort";
  int seq_len = 8, vocab = 10, batch_size = 64, warmup = 100, eval_interval = 50, eval_size = 1000;
  sort_digits::ModelOptions model;
  double lr = 2e-3, weight_decay = 0.01, clip = 1.0;
  std::uint64_t seed = 0;
  bool bf16 = false;
};

struct Outputs {  // what is not a setting
  std::string plot = "toy_encoder.png", onnx, profile;
  double min_accuracy = 0;
};

// The batch of step `step` depends on (seed, step) alone, so a resumed run draws the same ones;
// rank r of N takes its share of the rows.
Batch training_batch(const Config& c, const sort_digits::Task& task, int step,
                     const std::unordered_set<std::string>& held_out, const train::World& world) {
  xgrad::Generator gen(c.seed * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(step) + 1);
  const Batch global = sort_digits::make_batch(task, gen, static_cast<std::size_t>(c.batch_size), &held_out);
  if (world.size() == 1) return global;
  const auto [begin, end] = sort_digits::share(global.tokens.shape(0), world);
  return {sort_digits::rows(global.tokens, begin, end), sort_digits::rows(global.targets, begin, end)};
}

int train_model(Config& c, train::TrainerOptions& options, const Outputs& out, train::Settings& settings,
                const CLI::App& app, train::World& world) {
  std::vector<train::RunPath> own = {output_paths::plot(out.plot, options.csv_path),
                                     train::RunPath::output("--profile", out.profile)};
  for (train::RunPath& p : output_paths::onnx(out.onnx)) own.push_back(std::move(p));
  output_paths::check(options, own);  // every path, before anything is read or written
#ifndef XGRAD_WITH_ONNX
  if (!out.onnx.empty()) throw train::Refused("--export-onnx: this build has no ONNX export (XGRAD_WITH_ONNX is off)");
#endif
  train::Trainer trainer("train_toy_encoder", options, settings, world, cli::given(app));  // c: the checkpoint's
  const cli::ProfileRun profiling(out.profile);  // the paths checked: until train_model() returns
  trainer.options().val_check_interval = c.eval_interval;
  trainer.options().gradient_clip_val = c.clip;
  const sort_digits::Task task{c.task == "sort", c.seq_len, c.vocab};
  // The training batches draw from the sequences outside the held-out set: leave them most.
  const double distinct = std::pow(double(c.vocab), double(c.seq_len));
  if (distinct < 2.0 * c.eval_size)
    throw train::Refused("--eval-size " + std::to_string(c.eval_size) + " must be at most half of the " +
                         std::to_string(std::llround(distinct)) + " distinct sequences");
  if (c.model.d_model % c.model.heads != 0)
    throw train::Refused("--heads " + std::to_string(c.model.heads) + " must divide --d-model " +
                         std::to_string(c.model.d_model));
  if (c.batch_size % world.size() != 0)
    throw train::Refused("--batch-size " + std::to_string(c.batch_size) + " must be divisible by the " +
                         std::to_string(world.size()) + " ranks (each trains on an equal part of the batch)");

  // Held-out sequences, drawn from their own stream; training batches never contain them.
  xgrad::Generator eval_gen(c.seed ^ 0xE7A1D5EEDULL);
  const Batch held_out = sort_digits::make_batch(task, eval_gen, static_cast<std::size_t>(c.eval_size));
  std::unordered_set<std::string> held_out_keys;
  for (std::size_t i = 0; i < held_out.tokens.shape(0); ++i)
    held_out_keys.insert(sort_digits::key_of(held_out.tokens.data() + i * std::size_t(c.seq_len), c.seq_len));

  trainer.seed_everything(c.seed);
  const auto model = std::make_shared<sort_digits::ToyEncoder>(task, c.model);
  const train::DataParallel<sort_digits::ToyEncoder> forward(model, world);  // DDP over several ranks
  xgrad::optim::AdamW<float> optimizer(model->parameters(),
                                       xgrad::optim::AdamWOptions(c.lr).weight_decay(c.weight_decay));
  // The planned run's warmup (an extended run keeps it), at most planned - 1: the cosine needs a step.
  const int warmup = std::max(0, std::min(c.warmup, trainer.planned_steps() - 1));
  const auto lr_schedule = xgrad::optim::warmup_cosine_lr(optimizer, warmup, trainer.max_steps());
  std::size_t count = 0;
  for (const auto& p : model->parameters()) count += p.numel();
  if (world.is_main()) {
    std::printf(
        "task: %s %d digits (0-%d) | model: d_model %d, %d layers, %d heads, ff %d, %zu parameters\n"
        "training: %d steps of %d sequences, AdamW lr %g (warmup %d, cosine), clip %g; held-out: %d sequences\n"
        "precision: %s\n",
        c.task.c_str(), c.seq_len, c.vocab - 1, c.model.d_model, c.model.layers, c.model.heads, c.model.dim_feedforward,
        count, trainer.max_steps(), c.batch_size, c.lr, warmup, c.clip, c.eval_size,
        train::precision_description(c.bf16).c_str());
    if (world.size() > 1)
      std::printf("data parallel: %d ranks, %d sequences each per step\n", world.size(), c.batch_size / world.size());
  }

  // logits (B, L, V) -> (B L, V) against targets (B L); with --bf16 the forward and the loss under
  // autocast (the backward follows the forward's choice).
  const auto loss = [&](int step) {
    const Batch batch = training_batch(c, task, step, held_out_keys, world);
    xgrad::AutocastGuard autocast(c.bf16);
    return train::lm_loss(forward(batch.tokens), batch.targets);
  };
  const auto validation = [&] { return sort_digits::accuracy(*model, held_out, c.bf16, world).first; };
  if (const auto stopped = trainer.fit(*model, optimizer, lr_schedule.get(), loss, validation)) return *stopped;

  const auto [tokens, sequences] = sort_digits::accuracy(*model, held_out, c.bf16, world);
  if (!world.is_main()) return tokens < out.min_accuracy ? 1 : 0;
  std::printf("\nheld-out accuracy: %.2f%% of digits, %.2f%% of whole sequences (%d sequences never trained on)\n",
              100 * tokens, 100 * sequences, c.eval_size);
  sort_digits::print_examples(*model, held_out, c.bf16, 3);
  trainer.finish();
  plot::render(trainer.options().csv_path, out.plot, "train_toy_encoder");
#ifdef XGRAD_WITH_ONNX
  if (!out.onnx.empty()) sort_digits::export_onnx(*model, held_out.tokens, out.onnx);
#endif
  if (tokens < out.min_accuracy) {
    std::printf("accuracy %.4f is below --min-accuracy %.4f\n", tokens, out.min_accuracy);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  xgrad::allocator_tuning_from_env();  // keep freed tensor memory for the next step
  Config c;
  Outputs out;
  int steps = 1000;
  train::Settings settings;
  train::TrainerOptions options;  // the CSV's metric: val_accuracy
  options.checkpoint_path = "toy_encoder.ckpt";
  options.csv_path = "toy_encoder.csv";

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
  setting("--d-model", c.model.d_model, "model width")->check(cli::integer_in(1, 4096));
  setting("--layers", c.model.layers, "encoder layers")->check(cli::integer_in(1, 64));
  setting("--heads", c.model.heads, "attention heads (must divide --d-model)")->check(cli::integer_in(1, 256));
  setting("--dim-feedforward", c.model.dim_feedforward, "feed-forward width")->check(cli::integer_in(1, 65536));
  setting("--dropout", c.model.dropout, "dropout probability")->check(cli::number_in(0.0, 0.9));
  cli::add_max_steps_flag(app, steps, "--steps", "training steps");
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
  cli::add_trainer_flags(app, options);
  cli::add_profile_flag(app, out.profile);
  plot::add_flag(app, out.plot);
  app.add_option("--min-accuracy", out.min_accuracy, "exit with 1 if the final held-out token accuracy is lower")
      ->check(cli::number_in(0.0, 1.0));
  app.add_option("--export-onnx", out.onnx,
                 "after training, export the model to this ONNX file (and a sample of inputs with their outputs "
                 "to FILE.sample.json); with --resume of a finished run and no larger --steps: export it without "
                 "training")
      ->check(cli::not_special_file());
  CLI11_PARSE(app, argc, argv);
  cli::finish_max_steps(app, options, "--steps", steps);
  const std::unique_ptr<train::World> world = train::launched_world();  // MPI under mpirun -np N > 1
  return train::guarded(
      "train_toy_encoder", [&] { return train_model(c, options, out, settings, app, *world); }, *world);
}
