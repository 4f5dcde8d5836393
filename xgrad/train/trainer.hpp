// xgrad::train::Trainer: the training loop of a program, in the spirit of PyTorch Lightning's
// Trainer.fit and Keras' Model.fit, but minimal. The program gives the Trainer its options (ONE
// struct, TrainerOptions, with Lightning's names where they exist) and its settings; the Trainer
// then owns the run (this header includes its parts: callback.hpp, progress.hpp, files.hpp):
//   - resuming (TrainerOptions::ckpt_path): the constructor reads the checkpoint and sets the
//     Settings to its values, so that the program builds the same model; fit() restores model,
//     optimizer, schedule and generator, and the resumed run continues bit for bit (its batches
//     must depend on (seed, step) or on state tracked by Trainer::track, a DataLoader's position);
//   - extending a run: a max_steps larger than the one the checkpoint's run planned (recorded in
//     the checkpoint as "max_steps") goes on to the new count, the learning-rate schedule continued
//     as that of a run planned that long from the start (the program builds its schedule for
//     max_steps() and its warmup from planned_steps(): the warmup stays the planned run's);
//     max_steps = -1 (the default) when resuming: the checkpoint's planned count. Resuming a
//     finished run with no more steps trains nothing and rewrites nothing (to export or sample);
//   - the output paths (checkpoint, CSV, weights), checked in the constructor, before anything
//     is trained, the error naming the flag of cli::add_trainer_flags;
//   - the steps: zero_grad, backward, gradient clipping (clip_grad_norm_), optimizer and schedule
//     steps, the model in training mode;
//   - a progress line redrawn in place on a terminal (a plain line per evaluation, or every
//     log_every_n_steps steps, on a pipe); the metric shows "-" until the first evaluation;
//   - a CSV row per evaluation: step,loss,<metric.column>,lr,elapsed (loss: the mean training loss
//     since the previous evaluation; lr: the one of the step's update; metric.column names the
//     validation value, "val_accuracy" unless told otherwise, e.g. "val_loss");
//   - checkpoints (xgrad::save_checkpoint, written atomically) every checkpoint_every_n_steps
//     steps, at the end, at stop_at and on Ctrl-C (SIGINT: the step in flight ends, the checkpoint
//     is saved, fit() returns 130; a second Ctrl-C ends the program at once; the program's own
//     SIGINT handler is given back when fit() returns or throws);
//   - seeding: seed_everything(seed) before the model is built; in a World of several ranks,
//     fit() then gives rank r > 0 a stream of its own (dropout) after rank 0's weights were drawn;
//   - a World of several ranks (xgrad::train::MPIWorld, launched_world() of
//     xgrad/train/data_parallel.hpp, which also wraps the model in DistributedDataParallel): every
//     rank runs the same loop, the loss shown is the mean over ranks, rank 0 alone prints and
//     writes files, the checkpoint holds every rank's generator state and records the world size
//     (resuming with another is refused), and Ctrl-C on any rank stops every rank at the same step.
//
// compile: snippet given: double lr = 1e-3; std::uint64_t seed = 0; Tensor<float> x, y;
//   xgrad::train::Settings settings;
//   settings.add("lr", lr);                  // saved in every checkpoint, the checkpoint's on resume
//   xgrad::train::TrainerOptions options;    // Lightning's names: max_steps, val_check_interval...
//   options.max_steps = 1000;
//   options.checkpoint_path = "my.ckpt";
//   const int status = xgrad::train::guarded("my_program", [&] {
//     xgrad::train::Trainer trainer("my_program", options, settings);  // lr: the checkpoint's
//     trainer.seed_everything(seed);
//     nn::Linear<float> model(4, 1);
//     optim::AdamW<float> optimizer(model.parameters(), optim::AdamWOptions(lr));
//     optim::CosineAnnealingLR<float> schedule(optimizer, trainer.max_steps());
//     const auto loss = [&](int /*step*/) { return mse_loss(model.forward(x), y); };  // the step's batch
//     const auto accuracy = [&] { return 0.0; };                                     // a held-out metric
//     if (auto stopped = trainer.fit(model, optimizer, &schedule, loss, accuracy))
//       return *stopped;  // 130 after Ctrl-C, 0 at stop_at: the checkpoint is saved
//     trainer.finish();   // wall time, TrainerOptions::weights_path
//     return 0;
//   });
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <xgrad/core/tensor.hpp>
#include <xgrad/nn/module.hpp>
#include <xgrad/optim/lr_scheduler.hpp>
#include <xgrad/optim/optimizer.hpp>
#include <xgrad/serialize/checkpoint.hpp>
#include <xgrad/train/callback.hpp>
#include <xgrad/train/files.hpp>
#include <xgrad/train/progress.hpp>
#include <xgrad/train/settings.hpp>
#include <xgrad/train/world.hpp>

namespace xgrad::train {

// Runs body(); a Refused prints its message and gives 2, any other exception prints
// "program: message" and gives 1. In a world of more than one rank, either ends the whole job
// (World::abort with that status) so that no rank waits for the failed one.
int guarded(const std::string& program, const std::function<int()>& body, World& world = single_process_world());

// What the loop carries from step to step besides the model, optimizer, schedule and generator.
struct LoopState {
  int step = 0;         // steps done
  double loss_sum = 0;  // training loss summed since the last evaluation
  int loss_count = 0;
  double val_metric = 0;  // the validation value at the last evaluation (TrainerOptions::metric)
  double elapsed = 0;     // seconds of training over every run
};

// "float32", or "bfloat16 autocast, gemm: <the bf16 gemm path>", for a run's header.
std::string precision_description(bool bf16);

// The Trainer's options, with PyTorch Lightning's names where Lightning has the option. The
// first four are the loop's; the rest (added with the Trainer that owns the run) say where its
// files go and how it resumes; their flags (cli::add_trainer_flags) are in brackets.
struct TrainerOptions {
  // In all, counting the steps of the runs resumed. -1: when resuming, the count the checkpoint's
  // run planned; more than that extends the run (a run without ckpt_path needs a count).
  int max_steps = -1;
  // How messages name max_steps: the program's flag ("--iters", set by cli::finish_max_steps);
  // empty: "max_steps".
  std::string max_steps_flag = {};
  int val_check_interval = 50;  // steps between evaluations (and CSV rows); the last step is evaluated too
  // max gradient norm (clip_grad_norm_); 0: none; infinity: the norm measured, nothing clipped;
  // NaN or negative: refused (std::invalid_argument)
  double gradient_clip_val = 0;
  ValidationMetric metric = {};  // a held-out accuracy unless told otherwise

  // Folder of the files below given as relative paths (created when missing); empty: the
  // working folder. Lightning's default_root_dir.
  std::string default_root_dir = {};
  std::string ckpt_path = {};        // resume the run saved in this checkpoint [--resume]
  bool enable_checkpointing = true;  // false: no checkpoint written, whatever checkpoint_path says
  std::string checkpoint_path = {};  // the run's checkpoint, written atomically [--checkpoint]
  // Steps between checkpoints (Lightning's ModelCheckpoint every_n_train_steps); 0: only at the
  // end and when stopped [--checkpoint-interval].
  int checkpoint_every_n_steps = 250;
  std::string csv_path = {};  // step,loss,<metric.column>,lr,elapsed; empty: none [--csv]
  // On a pipe or file, a progress line every this many steps besides the evaluations' (0: at the
  // evaluations only); a terminal's line is redrawn at each step anyway.
  int log_every_n_steps = 0;
  bool enable_progress_bar = true;  // false: no progress line (the CSV is written all the same)
  std::string weights_path = {};    // the final weights as safetensors, by finish() [--save-weights]
  int stop_at = 0;                  // stop at this step with a checkpoint, as Ctrl-C does; 0: never [--stop-at]
  int num_threads = 1;              // xgrad::set_num_threads, applied by the constructor [--threads]
};

// The files a Trainer with `options` reads and writes, resolved in default_root_dir, as
// check_run_paths takes them: --resume (an input), --checkpoint (which may rewrite the checkpoint
// resumed), --csv and --save-weights (outputs). The Trainer's constructor checks them; a program
// with files of its own checks them together with these, before its work:
//   std::vector<RunPath> paths = run_paths(options);
//   paths.push_back(RunPath::output("--plot", plot_path));
//   check_run_paths(paths);
std::vector<RunPath> run_paths(const TrainerOptions& options);

namespace detail {

// A tracked state as the text of a checkpoint's metadata, and back (Trainer::track).
inline std::string state_text(const std::string& state) { return state; }
template <class State>
std::string state_text(const State& state) {
  return state.to_string();
}
template <class State>
State state_from_text(const std::string& text) {
  if constexpr (std::is_same_v<State, std::string>)
    return text;
  else
    return State::from_string(text);
}

}  // namespace detail

class Trainer {
 public:
  // The Trainer that owns the run. Checks `options`' paths (run_paths: resolved in
  // default_root_dir, no two naming the same file) before anything is read or trained (Refused
  // naming the flag, or both flags), applies num_threads, refuses a program started
  // by mpirun with a world of another size, and, with options.ckpt_path, reads the checkpoint and
  // sets `settings` to its values (a setting the user gave, given_on_command_line(key), must agree:
  // otherwise Refused naming both) and resolves max_steps (see TrainerOptions::max_steps; below the
  // checkpoint's step: Refused). `settings` and `world` must outlive the Trainer.
  Trainer(std::string program, TrainerOptions options, Settings& settings, World& world = single_process_world(),
          const std::function<bool(const std::string& key)>& given_on_command_line = {});

  void add_callback(std::shared_ptr<Callback> callback);

  // Saves `stateful`'s state in every checkpoint (the metadata key `name`) and restores it on
  // resume, in fit() before the first step (torch.distributed.checkpoint's Stateful): anything
  // with state_dict() and load_state_dict(state), the state a std::string or a type with
  // to_string() and a static from_string(text) (a DataLoader's DataLoaderState). Called before
  // fit(); `stateful` must outlive the Trainer. A `name` that is empty, tracked already or one of
  // the Trainer's own keys (config.*, loss_sum, max_steps...) throws std::invalid_argument. On
  // resume, a checkpoint without the key, or a state its load_state_dict refuses, is Refused
  // naming the checkpoint and the key. The key is the one a program writing
  // metadata[name] = stateful.state_dict().to_string() in on_save_checkpoint used: its checkpoints
  // resume as they are.
  template <class Stateful>
  void track(const std::string& name, Stateful& stateful) {
    using State = std::decay_t<decltype(stateful.state_dict())>;
    track_state(
        name, [&stateful] { return detail::state_text(stateful.state_dict()); },
        [&stateful](const std::string& text) { stateful.load_state_dict(detail::state_from_text<State>(text)); });
  }

  // xgrad::manual_seed(seed), before the program builds its model; fit() then gives rank r > 0 of
  // a World of several ranks a stream of its own (seed + r * 0xD1B54A32D192ED03) for dropout, after
  // rank 0's weights were drawn (and broadcast by DistributedDataParallel).
  void seed_everything(std::uint64_t seed);

  // Restores model, optimizer, schedule and generator from the checkpoint being resumed (Refused
  // on a mismatch; built from the same settings, they continue the saved run bit for bit; an
  // extended run's schedule is stepped afresh to the checkpoint's step, so that its lr is that of
  // a run planned for max_steps() from the start), then trains to max_steps(), in training mode.
  // In a distributed run, `model` is the module DistributedDataParallel wraps. Every reference
  // must outlive the Trainer. Called once.
  //
  // training_step(step) is the loss of the batch of that step (0-based; in a distributed run,
  // this rank's part of the batch; an undefined tensor is refused naming the step);
  // validation_step() evaluates (on every rank: it may use the World's collectives), as in
  // Lightning with the model in eval mode and under a NoGradGuard, every module's training flag
  // given back afterwards (also when it throws, or when it calls train() or eval() itself).
  // Returns the exit status when the run stops early, after saving a checkpoint: 130 on Ctrl-C, 0
  // at TrainerOptions::stop_at; nothing when every step is done (the final checkpoint saved).
  std::optional<int> fit(xgrad::nn::Module<float>& model, xgrad::optim::Optimizer<float>& optimizer,
                         xgrad::optim::LRScheduler<float>* schedule,
                         const std::function<xgrad::Tensor<float>(int step)>& training_step,
                         const std::function<double()>& validation_step);

  // Prints the wall time and writes weights_path (rank 0).
  void finish();

  int first_step() const { return first_step_; }  // where this run started
  int global_step() const { return state_.step; }  // steps done, over every run
  bool resumed() const { return checkpoint_.has_value() || first_step_ > 0; }
  // The steps of this run in all (TrainerOptions::max_steps resolved), and the count the run
  // planned when it started: max_steps() of its first run, which a schedule's warmup keeps.
  int max_steps() const { return options_.max_steps; }
  int planned_steps() const { return planned_steps_; }
  const LoopState& state() const { return state_; }
  // The options, paths resolved. A loop option that is a setting read from the checkpoint
  // (val_check_interval, gradient_clip_val...) may be set here after the constructor, before fit().
  TrainerOptions& options() { return options_; }
  const TrainerOptions& options() const { return options_; }
  // The checkpoint being resumed (its metadata holds the program's own state); null otherwise.
  const xgrad::Checkpoint<float>* checkpoint() const { return checkpoint_ ? &*checkpoint_ : nullptr; }
  World& world() const { return world_; }
  double elapsed() const;  // seconds over every run

 private:
  void save(const char* why);
  void restore();
  std::optional<int> loop(const std::function<xgrad::Tensor<float>(int step)>& training_step,
                          const std::function<double()>& validation_step);
  void track_state(const std::string& name, std::function<std::string()> save,
                   std::function<void(const std::string&)> load);
  void restore_tracked();
  void check_callback_metadata(const std::map<std::string, std::string>& own,
                               const std::map<std::string, std::string>& metadata) const;

  std::string program_;
  const Settings* settings_;
  xgrad::nn::Module<float>* model_ = nullptr;
  xgrad::optim::Optimizer<float>* optimizer_ = nullptr;
  xgrad::optim::LRScheduler<float>* schedule_ = nullptr;
  TrainerOptions options_;
  World& world_;
  std::optional<xgrad::Checkpoint<float>> checkpoint_;  // read by the constructor, restored by fit()
  int planned_steps_ = 0;
  std::optional<std::uint64_t> seed_;
  bool fitted_ = false;
  bool evaluated_ = false;  // the metric holds an evaluation's value
  std::vector<std::shared_ptr<Callback>> callbacks_;
  struct Tracked {  // track(): a state saved under `name`
    std::string name;
    std::function<std::string()> save;
    std::function<void(const std::string&)> load;
  };
  std::vector<Tracked> tracked_;
  LoopState state_;
  int first_step_ = 0;
  double elapsed_before_ = 0;
  std::chrono::steady_clock::time_point start_;
  Progress progress_;
};

}  // namespace xgrad::train
