// xgrad::train::Trainer: the training loop of a program, in the spirit of PyTorch Lightning's
// Trainer.fit and Keras' Model.fit, but minimal. The program builds its model, optimizer and
// schedule and gives the Trainer two functions: the loss of a step's batch and a validation
// metric. The Trainer owns everything else:
//   - the steps: zero_grad, backward, gradient clipping (clip_grad_norm_), optimizer and schedule
//     steps, the model in training mode;
//   - a progress line redrawn in place on a terminal (a plain line per evaluation on a pipe);
//   - a CSV row per evaluation: step,loss,accuracy,lr,elapsed (loss: the mean training loss since
//     the previous evaluation; lr: the one of the step's update; accuracy: the validation value,
//     under another name and shown otherwise with TrainerOptions::metric);
//   - checkpoints (xgrad::save_checkpoint, written atomically) every RunOptions::checkpoint_interval
//     steps, at the end, at RunOptions::stop_at and on Ctrl-C (SIGINT: the step in flight ends, the
//     checkpoint is saved, fit() returns 130; a second Ctrl-C ends the program at once; the
//     program's own SIGINT handler is given back when fit() returns or throws);
//   - resuming: prepare_run() reads RunOptions::resume_path and sets the Settings to the
//     checkpoint's; the Trainer restores model, optimizer, schedule and generator, so the resumed
//     run continues bit for bit (its batches must depend on (seed, step) or on state saved through
//     Callback::on_save_checkpoint); a larger step count than the saved run's extends it;
//   - a World of several ranks (xgrad::distributed::MPIWorld): every rank runs the same loop, the
//     loss shown is the mean over ranks, rank 0 alone prints and writes files, the checkpoint holds
//     every rank's generator state and records the world size (resuming with another is refused),
//     and Ctrl-C on any rank stops every rank at the same step.
//
//   xgrad::train::Settings settings;  settings.add("lr", lr);  ...
//   xgrad::train::RunOptions run("my.ckpt", "my.csv");
//   return xgrad::train::guarded("my_program", [&] {
//     auto resumed = xgrad::train::prepare_run("my_program", run, settings);  // lr: the checkpoint's
//     MyModel model;  xgrad::optim::AdamW<float> optimizer(...);
//     xgrad::train::Trainer trainer("my_program", run, settings, std::move(resumed), model, optimizer,
//                                   nullptr, {/*max_steps=*/1000, /*val_check_interval=*/50});
//     if (auto stopped = trainer.fit([&](int step) { return loss_of_batch(step); },
//                                    [&] { return held_out_accuracy(); }))
//       return *stopped;  // 130 after Ctrl-C, 0 at --stop-at: the checkpoint is saved
//     trainer.finish();   // wall time, RunOptions::weights_path
//     return 0;
//   });
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <xgrad/core/tensor.hpp>
#include <xgrad/nn/module.hpp>
#include <xgrad/optim/lr_scheduler.hpp>
#include <xgrad/optim/optimizer.hpp>
#include <xgrad/serialize/checkpoint.hpp>
#include <xgrad/train/settings.hpp>
#include <xgrad/train/world.hpp>

namespace xgrad::train {

// Runs body(); a Refused prints its message and gives 2, any other exception prints
// "program: message" and gives 1. In a world of more than one rank, either ends the whole job
// (World::abort with that status) so that no rank waits for the failed one.
int guarded(const std::string& program, const std::function<int()>& body, World& world = single_process_world());

// What the program chooses about a run without changing its results: where files go, when to
// checkpoint, where to stop. Empty paths: no such file.
struct RunOptions {
  std::string checkpoint_path;   // written atomically
  std::string csv_path;          // step,loss,accuracy,lr,elapsed
  int checkpoint_interval = 250; // steps between checkpoints; 0: only at the end (and when stopped)
  std::string resume_path;       // continue the run saved in this checkpoint
  std::string weights_path;      // the final weights as safetensors, written by Trainer::finish()
  int stop_at = 0;               // stop at this step with a checkpoint, as Ctrl-C does; 0: never
  int threads = 1;               // xgrad::set_num_threads, applied by prepare_run()

  RunOptions() = default;
  RunOptions(std::string checkpoint, std::string csv)
      : checkpoint_path(std::move(checkpoint)), csv_path(std::move(csv)) {}
};

// What the loop carries from step to step besides the model, optimizer, schedule and generator.
struct LoopState {
  int step = 0;         // steps done
  double loss_sum = 0;  // training loss summed since the last evaluation
  int loss_count = 0;
  double accuracy = 0;  // the validation metric at the last evaluation
  double elapsed = 0;   // seconds of training over every run
};

struct Resumed {
  std::optional<xgrad::Checkpoint<float>> checkpoint;  // empty when not resuming
  LoopState state;
};

// Applies RunOptions::threads and, with RunOptions::resume_path, reads the checkpoint and sets
// `settings` to its values. given_on_command_line(key), when set, tells whether the user gave a
// setting explicitly: such a value must agree with the checkpoint's (otherwise Refused, naming
// both). The checkpoint's world size must be world.size() (otherwise Refused), and so must the
// number of processes mpirun started (a program started by mpirun -np N > 1 in a world of 1 would
// have N copies writing the same files).
Resumed prepare_run(const std::string& program, const RunOptions& run, Settings& settings,
                    World& world = single_process_world(),
                    const std::function<bool(const std::string& key)>& given_on_command_line = {});

// What `path` is when it exists and is not a regular file (after symbolic links): "a FIFO (named
// pipe)", "a character device", "a folder", ...; empty for a regular file or nothing there. A
// program's path flags refuse those: reading a FIFO blocks, /dev/zero never ends. Uses stat(),
// which opens nothing.
std::string special_file_kind(const std::string& path);

// "float32", or "bfloat16 autocast, gemm: <the bf16 gemm path>", for a run's header.
std::string precision_description(bool bf16);

// One line redrawn in place with '\r' on a terminal (at most 10 times a second); on a pipe or
// file, one plain line per evaluation:
//   step  50/300 | loss 1.2345 | held-out accuracy  71.20% | 120.3 steps/s | 0:02 left
class Progress {
 public:
  Progress();
  // steps_run and seconds: this run's, for the speed and the time left; metric: the validation
  // value as ValidationMetric::describe shows it.
  void update(int step, int steps, double loss, const std::string& metric, int steps_run, double seconds, bool row);
  void note(const std::string& message);  // a line of its own, above the progress line
  void finish();                          // ends the redrawn line

 private:
  bool tty_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
};

// The loop's numbers at an evaluation.
struct Metrics {
  int step;        // steps done
  double loss;     // mean training loss since the previous evaluation (mean over ranks)
  double accuracy; // the validation function's value
  double lr;       // the learning rate of this step's update
  double elapsed;  // seconds of training over every run
};

class Trainer;

// User code called by the loop (Lightning's Callback, Keras' callbacks). Every hook runs on every
// rank; the default ones do nothing.
class Callback {
 public:
  virtual ~Callback() = default;
  // After each optimizer step; `loss` is the step's loss, the mean over ranks.
  virtual void on_train_batch_end(Trainer& trainer, int step, double loss);
  // After each evaluation, once its CSV row and progress line are written.
  virtual void on_validation_end(Trainer& trainer, const Metrics& metrics);
  // Before each checkpoint is written: add the program's own state (a DataLoader's position) to
  // `metadata`. The Trainer's keys are read-only: changing, removing or adding a "config." key or
  // one of the loop's own (loss_sum, loss_count, accuracy, elapsed, world_size, rank_generators)
  // throws std::invalid_argument naming the key, and nothing is written.
  virtual void on_save_checkpoint(Trainer& trainer, std::map<std::string, std::string>& metadata);
  // When every step is done (not when the run stops early).
  virtual void on_fit_end(Trainer& trainer);
};

// A Callback made of functions (Keras' LambdaCallback); an empty one is not called.
struct LambdaCallback : Callback {
  std::function<void(Trainer&, int, double)> train_batch_end;
  std::function<void(Trainer&, const Metrics&)> validation_end;
  std::function<void(Trainer&, std::map<std::string, std::string>&)> save_checkpoint;
  std::function<void(Trainer&)> fit_end;

  void on_train_batch_end(Trainer& trainer, int step, double loss) override;
  void on_validation_end(Trainer& trainer, const Metrics& metrics) override;
  void on_save_checkpoint(Trainer& trainer, std::map<std::string, std::string>& metadata) override;
  void on_fit_end(Trainer& trainer) override;
};

// How the validation value is shown: its CSV column and its text on the progress line.
struct ValidationMetric {
  std::string column = "accuracy";
  // The value -> the progress line's text; null: "held-out accuracy  71.20%" (a fraction).
  std::function<std::string(double)> format;

  std::string describe(double value) const;
};

struct TrainerOptions {
  int max_steps;                 // in all, counting the steps of the runs resumed
  int val_check_interval;        // steps between evaluations (and CSV rows); the last step is evaluated too
  // max gradient norm (clip_grad_norm_); 0: none; infinity: the norm measured, nothing clipped;
  // NaN or negative: refused (std::invalid_argument)
  double gradient_clip_val = 0;
  ValidationMetric metric = {};  // a held-out accuracy unless told otherwise
};

class Trainer {
 public:
  // Restores model, optimizer, schedule and the default generator (this rank's) from `resumed`
  // (Refused on a mismatch); built from the same settings, they continue the saved run bit for
  // bit. In a distributed run, `model` is the module DistributedDataParallel wraps. Every reference
  // must outlive the Trainer.
  Trainer(std::string program, const RunOptions& run, const Settings& settings, Resumed resumed,
          xgrad::nn::Module<float>& model, xgrad::optim::Optimizer<float>& optimizer,
          xgrad::optim::LRScheduler<float>* schedule, TrainerOptions options, World& world = single_process_world());

  void add_callback(std::shared_ptr<Callback> callback);

  // Trains to options.max_steps, in training mode. training_step(step) is the loss of the batch of
  // that step (0-based; in a distributed run, this rank's part of the batch; an undefined tensor is
  // refused naming the step); validation_step() evaluates (on every rank: it may use the World's
  // collectives), as in Lightning with the model in eval mode and under a NoGradGuard, every
  // module's training flag given back afterwards (also when it throws, or when it calls train() or
  // eval() itself). Returns the exit status when the
  // run stops early, after saving a checkpoint: 130 on Ctrl-C, 0 at RunOptions::stop_at; nothing
  // when every step is done (the final checkpoint saved).
  std::optional<int> fit(const std::function<xgrad::Tensor<float>(int step)>& training_step,
                         const std::function<double()>& validation_step);

  // Prints the wall time and writes RunOptions::weights_path (rank 0).
  void finish();

  int first_step() const { return first_step_; }  // where this run started
  int global_step() const { return state_.step; }  // steps done, over every run
  const LoopState& state() const { return state_; }
  const TrainerOptions& options() const { return options_; }
  World& world() const { return world_; }
  double elapsed() const;  // seconds over every run

 private:
  void save(const char* why);
  void check_callback_metadata(const std::map<std::string, std::string>& own,
                               const std::map<std::string, std::string>& metadata) const;

  std::string program_;
  const RunOptions& run_;
  const Settings& settings_;
  xgrad::nn::Module<float>& model_;
  xgrad::optim::Optimizer<float>& optimizer_;
  xgrad::optim::LRScheduler<float>* schedule_;
  TrainerOptions options_;
  World& world_;
  std::vector<std::shared_ptr<Callback>> callbacks_;
  LoopState state_;
  int first_step_;
  double elapsed_before_;
  std::chrono::steady_clock::time_point start_;
  Progress progress_;
};

}  // namespace xgrad::train
