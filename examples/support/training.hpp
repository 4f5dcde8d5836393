// The plumbing of a training program, shared by the examples; it knows nothing of the task.
//
// - Settings: the flags that define a run's results. Each is declared once (flag, variable, help);
//   they are saved in every checkpoint ("config.<flag>") and --resume restores them, refusing a
//   flag given again with another value.
//   A boolean flag (add_flag) is saved as 0 or 1; a checkpoint from before it existed resumes with
//   it off. --bf16 (add_bf16_flag) is one: bfloat16 autocast around the forward passes.
// - RunOptions: the flags that do not change the results (--checkpoint, --checkpoint-interval,
//   --resume, --csv, --plot, --save-weights, --stop-at, --threads).
// - Trainer: the loop around the task's loss -- zero_grad, backward, gradient clipping, optimizer
//   and schedule steps -- with a live progress line on a terminal (plain lines otherwise), a CSV
//   row per evaluation (step,loss,accuracy,lr,elapsed), a checkpoint every N steps, at the end and
//   on Ctrl-C (exit status 130), and --stop-at. A resumed run continues bit for bit.
//
//   Config c;
//   CLI::App app{"..."};
//   training::Settings settings;
//   settings.add(app, "--d-model", c.d_model, "model width")->check(CLI::Range(1, 4096));
//   training::RunOptions run{"my.ckpt", "my.csv", "my.png"};
//   training::add_run_flags(app, run);
//   CLI11_PARSE(app, argc, argv);
//   return training::guarded("my_program", [&] {
//     training::Resumed resumed = training::prepare("my_program", run, settings, app);  // c = the checkpoint's
//     MyModel model(c);  AdamW optimizer(...);  SequentialLR schedule(...);
//     training::Trainer trainer("my_program", run, settings, std::move(resumed), model, optimizer, &schedule,
//                               {c.steps, c.eval_interval, c.clip});
//     if (auto stopped = trainer.train([&](int step) { return loss_of_batch(step); },
//                                      [&] { return held_out_accuracy(); }))
//       return *stopped;  // Ctrl-C (130) or --stop-at (0)
//     ... print results ...
//     trainer.finish();  // wall time, --save-weights, --plot
//     return 0;
//   });
//
// Distributed runs (mpirun -np N, a build with XGRAD_WITH_MPI): main() holds a ProcessGroup, the
// program splits each global batch across world().size ranks and wraps its model in
// DistributedDataParallel; the rest is the Trainer's: every rank runs the same loop; rank 0
// alone prints, writes the CSV, the plot, --save-weights and the checkpoint (with every rank's
// generator state, gathered to it); every rank resumes from the same file and takes its own
// generator state back, so a resumed N-rank run continues bit for bit. The loss shown is the mean
// over ranks. A checkpoint records its world size; resuming it with another is refused. An
// exception on any rank ends the whole job (MPI_Abort) instead of leaving the others waiting.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "flags.hpp"  // flags::positive() and the other checks with short messages

#include <xgrad/serialize/checkpoint.hpp>
#include <xgrad/xgrad.hpp>

namespace training {

// A refusal of the flags or of a checkpoint: guarded() prints the message alone and exits with 2.
class Refused : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Runs body(); a Refused prints its message and gives 2, any other exception prints
// "program: message" and gives 1. In a world of more than one rank, either ends the whole job
// (MPI_Abort with that status) after printing, so that no rank waits for the failed one.
int guarded(const std::string& program, const std::function<int()>& body);

// ---- distributed runs ------------------------------------------------------------------------

// This process's place in the run: rank in [0, size).
struct World {
  int rank = 0;
  int size = 1;
  bool is_main() const { return rank == 0; }
};

// For main()'s scope: when the program was started by mpirun with more than one process
// (OMPI_COMM_WORLD_SIZE > 1 in the environment), initializes xgrad::distributed's process group,
// and finalizes it when destroyed; otherwise (a plain run, or mpirun -np 1) nothing: a world of 1
// without MPI. Under mpirun -np N > 1, a build without XGRAD_WITH_MPI throws Refused.
class ProcessGroup {
 public:
  ProcessGroup();
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;
};

// The world of the ProcessGroup alive (0 of 1 when none is, or none was initialized).
const World& world();

// Sums values[0, count) over the ranks, in place, on every rank (a collective: every rank calls
// it); nothing in a world of 1.
void sum_over_ranks(double* values, std::size_t count);

// True when this build has xgrad::distributed (the CMake option XGRAD_WITH_MPI).
bool built_with_mpi();

// ---- flags -----------------------------------------------------------------------------------

// The flags that do not change the results of a run; the constructor takes the default file names.
struct RunOptions {
  std::string checkpoint_path;
  std::string csv_path;
  std::string plot_path;
  int checkpoint_interval = 250;
  std::string resume_path;
  std::string weights_path;
  int stop_at = 0;
  int threads = 1;

  RunOptions(std::string checkpoint, std::string csv, std::string plot)
      : checkpoint_path(std::move(checkpoint)), csv_path(std::move(csv)), plot_path(std::move(plot)) {}
};
void add_run_flags(CLI::App& app, RunOptions& run);

// A setting's text, written so that it reads back to the same value (doubles with 17 digits).
std::string format_setting(int v);
std::string format_setting(std::uint64_t v);
std::string format_setting(double v);
std::string format_setting(const std::string& v);
// Throws std::logic_error (std::invalid_argument, std::out_of_range) on malformed text.
void parse_setting(const std::string& text, int& v);
void parse_setting(const std::string& text, std::uint64_t& v);
void parse_setting(const std::string& text, double& v);
void parse_setting(const std::string& text, std::string& v);
std::string format_setting(bool v);
void parse_setting(const std::string& text, bool& v);

// The flags that define a run's results, bound to the program's own variables.
class Settings {
 public:
  // Declares the flag (with its default shown in --help) and binds it; returns it for ->check().
  template <class T>
  CLI::Option* add(CLI::App& app, const std::string& flag, T& value, const std::string& help) {
    entries_.push_back({flag.substr(2), [&value] { return format_setting(value); },
                        [&value](const std::string& text) { parse_setting(text, value); }});
    return app.add_option(flag, value, help)->capture_default_str();
  }
  // A flag without a value (given: true, default false).
  CLI::Option* add_flag(CLI::App& app, const std::string& flag, bool& value, const std::string& help);
  // Key (the flag without "--") -> value, in the order declared.
  std::vector<std::pair<std::string, std::string>> values() const;
  // Sets every variable from `saved`; throws std::logic_error on a missing or malformed entry.
  void assign(const std::map<std::string, std::string>& saved);
  // Adds to `saved` the boolean flags it lacks, as off (a checkpoint written before they existed).
  void complete(std::map<std::string, std::string>& saved) const;

 private:
  struct Entry {
    std::string key;
    std::function<std::string()> get;
    std::function<void(const std::string&)> set;
    bool is_flag = false;
  };
  std::vector<Entry> entries_;
};

// --bf16: train under xgrad::AutocastGuard (bf16 gemms in linear, matmul and attention, fp32
// everywhere else), saved with the settings.
CLI::Option* add_bf16_flag(CLI::App& app, Settings& settings, bool& bf16);
// "float32", or "bfloat16 autocast, gemm: <xgrad::autocast_gemm_path()>", for the run's header.
std::string precision_description(bool bf16);

// ---- resuming --------------------------------------------------------------------------------

// What the loop carries from step to step besides the model, optimizer, schedule and generator.
struct LoopState {
  int step = 0;         // steps done
  double loss_sum = 0;  // training loss summed since the last evaluation
  int loss_count = 0;
  double accuracy = 0;  // at the last evaluation
  double elapsed = 0;   // seconds of training over every run
};

struct Resumed {
  std::optional<xgrad::Checkpoint<float>> checkpoint;  // empty without --resume
  LoopState state;
};

// Applies --threads (Refused under mpirun -np N > 1 without a ProcessGroup: N copies of a
// single-process program would write the same files). With --resume, reads the checkpoint and sets `settings` to its values; a flag
// given again on the command line must agree (otherwise Refused), and so must the world size.
Resumed prepare(const std::string& program, const RunOptions& run, Settings& settings, const CLI::App& app);

// ---- the loop --------------------------------------------------------------------------------

// One line redrawn in place with '\r' on a terminal (at most 10 times a second); on a pipe or
// file, one plain line per evaluation.
class Progress {
 public:
  Progress();
  // steps_run and seconds: this run's, for the speed and the time left; accuracy < 0: none yet.
  void update(int step, int steps, double loss, double accuracy, int steps_run, double seconds, bool row);
  void note(const std::string& message);  // a line of its own, above the progress line
  void finish();                          // ends the redrawn line

 private:
  bool tty_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
};

struct LoopOptions {
  int steps;          // in all, counting the steps of the runs resumed
  int eval_interval;  // steps between evaluations (and CSV rows); the last step is evaluated too
  double clip;        // max gradient norm (clip_grad_norm_); 0: none
};

class Trainer {
 public:
  // Restores model, optimizer, schedule and the default generator (this rank's) from `resumed`
  // (Refused on a mismatch); built from the same settings, they continue the saved run bit for
  // bit. In a distributed run, `model` is the module DistributedDataParallel wraps.
  Trainer(std::string program, const RunOptions& run, const Settings& settings, Resumed resumed,
          xgrad::nn::Module<float>& model, xgrad::optim::Optimizer<float>& optimizer,
          xgrad::optim::LRScheduler<float>* schedule, LoopOptions loop);

  // Trains to the last step, in training mode. loss(step) is the loss of the batch of that step
  // (0-based; draw it from (seed, step) so that a resumed run sees the same batches; in a
  // distributed run, this rank's part of it); accuracy() evaluates on held-out data, on every
  // rank. Returns the exit status when the run stops early (130 on Ctrl-C, 0 at --stop-at) after
  // saving a checkpoint; nothing when every step is done.
  std::optional<int> train(const std::function<xgrad::Tensor<float>(int step)>& loss,
                           const std::function<double()>& accuracy);

  // Prints the wall time, writes --save-weights and renders --plot.
  void finish();

  // Metadata of the program's own added to every checkpoint (a DataLoader's position); set before
  // train(). Its keys must not start with "config." nor be the loop's own (nor "world_size" and
  // "rank_generators", a distributed run's).
  std::function<std::map<std::string, std::string>()> extra_metadata;

  int first_step() const { return first_step_; }  // where this run started
  double elapsed() const;                          // seconds over every run

 private:
  void save(const char* why);

  std::string program_;
  const RunOptions& run_;
  const Settings& settings_;
  xgrad::nn::Module<float>& model_;
  xgrad::optim::Optimizer<float>& optimizer_;
  xgrad::optim::LRScheduler<float>* schedule_;
  LoopOptions loop_;
  LoopState state_;
  int first_step_;
  double elapsed_before_;
  std::chrono::steady_clock::time_point start_;
  Progress progress_;
};

}  // namespace training
