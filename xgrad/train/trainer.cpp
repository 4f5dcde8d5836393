#include "trainer.hpp"

#include <signal.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <limits>

#include <xgrad/backend/autocast.hpp>
#include <xgrad/backend/bf16.hpp>
#include <xgrad/backend/gemm.hpp>
#include <xgrad/backend/parallel.hpp>
#include <xgrad/base/input.hpp>
#include <xgrad/base/random.hpp>
#include <xgrad/core/grad_mode.hpp>
#include <xgrad/optim/clip_grad.hpp>
#include <xgrad/serialize/checkpoint.hpp>
#include <xgrad/serialize/safetensors.hpp>

namespace xgrad::train {

namespace optim = xgrad::optim;

namespace {

// Metadata key of the number of processes that wrote a checkpoint (absent: 1).
constexpr const char* kWorldSizeKey = "world_size";
// Metadata keys of the steps the run was to make (TrainerOptions::max_steps) and of those its
// first run planned (Trainer::planned_steps).
constexpr const char* kMaxStepsKey = "max_steps";
constexpr const char* kPlannedStepsKey = "planned_steps";

// The keys of a checkpoint's metadata that are the Trainer's: the settings, the loop's state
// (metadata_of), and the world size and the ranks' generators that save() adds.
bool is_trainer_key(const std::string& key) {
  for (const char* own : {"loss_sum", "loss_count", "accuracy", "elapsed", kWorldSizeKey, xgrad::kRankGeneratorsKey,
                          kMaxStepsKey, kPlannedStepsKey})
    if (key == own) return true;
  return key.rfind("config.", 0) == 0;
}

// Prints `message` and returns `status`; in a world of several ranks, ends the whole job first.
int fail(World& world, const std::string& message, int status) {
  std::fflush(stdout);
  if (world.size() > 1) world.abort(message, status);
  std::fprintf(stderr, "%s\n", message.c_str());
  return status;
}

}  // namespace

int guarded(const std::string& program, const std::function<int()>& body, World& world) {
  try {
    return body();
  } catch (const Refused& e) {
    return fail(world, e.what(), 2);
  } catch (const std::exception& e) {
    return fail(world, (world.size() > 1 ? "" : "\n") + program + ": " + e.what(), 1);
  }
}

std::string precision_description(bool bf16) {
  return bf16 ? std::string("bfloat16 autocast, gemm: ") + xgrad::autocast_gemm_path() : "float32";
}

// ---- resuming --------------------------------------------------------------------------------

namespace {

// Checkpoint metadata: the settings ("config.<key>") and the LoopState (its val_metric under
// "accuracy", the key of the first checkpoints). Doubles are written in hexadecimal (%a) so that
// they read back to the same bits.
std::map<std::string, std::string> metadata_of(const Settings& settings, const LoopState& state) {
  std::map<std::string, std::string> m;
  for (const auto& [key, value] : settings.values()) m["config." + key] = value;
  const auto hex = [](double v) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%a", v);
    return std::string(buf);
  };
  m["loss_sum"] = hex(state.loss_sum);
  m["loss_count"] = std::to_string(state.loss_count);
  m["accuracy"] = hex(state.val_metric);
  m["elapsed"] = hex(state.elapsed);
  return m;
}

// A step count of the metadata of the checkpoint `path`: an integer in [0, 2^31 - 1], or Refused
// naming the key.
int metadata_count(const std::string& path, const std::map<std::string, std::string>& m, const std::string& key) {
  try {
    return xgrad::parse_integer<int>(path + ": metadata " + key, m.at(key), 0);
  } catch (const xgrad::FormatError& e) {
    throw Refused(std::string("cannot resume: ") + e.what());
  }
}

// A number of the metadata of the checkpoint `path` (written with %a), or Refused naming the key.
double metadata_number(const std::string& path, const std::map<std::string, std::string>& m, const std::string& key,
                       double lo, double hi, bool allow_nan) {
  try {
    return xgrad::parse_number(path + ": metadata " + key, m.at(key), lo, hi, allow_nan);
  } catch (const xgrad::FormatError& e) {
    throw Refused(std::string("cannot resume: ") + e.what());
  }
}

// The step count a checkpoint's run was to make: "max_steps", or, in checkpoints of the examples
// written before the Trainer recorded it, their own "steps", "iters" or "config.steps"; 0: none.
int saved_max_steps(const std::string& path, const std::map<std::string, std::string>& m) {
  for (const char* key : {kMaxStepsKey, "steps", "iters", "config.steps"})
    if (m.count(key)) return metadata_count(path, m, key);
  return 0;
}

// A program started by mpirun with N > 1 processes in a world of another size would have N copies
// writing the same files.
void check_launched_world(const std::string& program, const World& world) {
  if (launched_world_size() != world.size())
    throw Refused(program + " was started by mpirun with " + std::to_string(launched_world_size()) +
                  " processes but trains in a world of " + std::to_string(world.size()) +
                  " (data parallelism needs a build with MPI, -DXGRAD_WITH_MPI=ON with Open MPI installed, and a "
                  "program that trains data-parallel): start it without mpirun, or with mpirun -np 1");
}

xgrad::Checkpoint<float> read_checkpoint(const std::string& path) {
  try {
    return xgrad::load_checkpoint<float>(path);
  } catch (const std::exception& e) {
    throw Refused(std::string("cannot resume: ") + e.what());
  }
}

// Sets `settings` to the checkpoint's (a setting given on the command line must agree) and
// returns the loop's state saved in it; refuses a checkpoint of another program or world size.
LoopState resume_settings(const std::string& program, const std::string& path, const xgrad::Checkpoint<float>& ckpt,
                          Settings& settings, const World& world,
                          const std::function<bool(const std::string& key)>& given_on_command_line) {
  const std::map<std::string, std::string>& m = ckpt.metadata;
  std::map<std::string, std::string> saved;
  for (const auto& [key, value] : m)
    if (key.rfind("config.", 0) == 0) saved[key.substr(7)] = value;
  settings.complete(saved);
  const auto given = settings.values();
  try {
    settings.assign(saved, "config.");   // checks that every setting is there before comparing
  } catch (const std::logic_error& e) {  // std::out_of_range, std::invalid_argument, naming the key
    throw Refused("cannot resume: " + path + " is not a checkpoint of " + program + " (its metadata: " + e.what() +
                  ")");
  }
  for (const char* key : {"loss_sum", "loss_count", "accuracy", "elapsed"})
    if (!m.count(key))
      throw Refused("cannot resume: " + path + " is not a checkpoint of " + program + " (its metadata: no key '" + key +
                    "')");
  if (ckpt.step < 0 || ckpt.step > std::numeric_limits<int>::max())
    throw Refused("cannot resume: " + path + ": step: expected an integer in [0, " +
                  std::to_string(std::numeric_limits<int>::max()) + "], got " + std::to_string(ckpt.step));
  constexpr double kInf = std::numeric_limits<double>::infinity();
  LoopState state;
  state.step = static_cast<int>(ckpt.step);
  state.loss_sum = metadata_number(path, m, "loss_sum", -kInf, kInf, true);  // a diverged run's NaN too
  state.loss_count = metadata_count(path, m, "loss_count");
  state.val_metric = metadata_number(path, m, "accuracy", -kInf, kInf, true);
  state.elapsed = metadata_number(path, m, "elapsed", 0, std::numeric_limits<double>::max(), false);
  const auto world_size = m.find(kWorldSizeKey);
  const std::string saved_world = world_size == m.end() ? "1" : world_size->second;
  if (saved_world != std::to_string(world.size()))
    throw Refused("cannot resume: " + path + " was written by a run of " + saved_world + " process(es), this one has " +
                  std::to_string(world.size()) + " (start it with mpirun -np " + saved_world + ")");
  if (given_on_command_line)
    for (const auto& [key, value] : given) {
      const std::string& theirs = saved.at(key);
      if (given_on_command_line(key) && value != theirs)
        throw Refused("--" + key + " " + value + " differs from the checkpoint's " + theirs + " (" + path + ")");
    }
  return state;
}

}  // namespace

// ---- signals, modes --------------------------------------------------------------------------

namespace {

// Ctrl-C sets the flag, which the loop checks after each step; a second Ctrl-C ends the program
// at once (a checkpoint being written is then left as it was before: saves are atomic).
// Installed with SA_RESETHAND, so that the handler is back to SIG_DFL once it has run.
volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void on_sigint(int) { g_interrupted = 1; }

// Installs on_sigint for the duration of fit() and gives the program's own SIGINT disposition
// back when fit() returns or throws.
class SigintScope {
 public:
  SigintScope() {
    struct sigaction action {};
    action.sa_handler = on_sigint;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESETHAND;  // a second Ctrl-C ends the program at once
    g_interrupted = 0;
    installed_ = ::sigaction(SIGINT, &action, &previous_) == 0;
  }
  ~SigintScope() {
    if (installed_) ::sigaction(SIGINT, &previous_, nullptr);
  }
  SigintScope(const SigintScope&) = delete;
  SigintScope& operator=(const SigintScope&) = delete;

 private:
  struct sigaction previous_ {};
  bool installed_ = false;
};

// Puts every module of `model` in eval mode for a validation and gives each its own training
// flag back afterwards, also when the validation throws (Lightning's validation loop).
class EvalScope {
 public:
  explicit EvalScope(xgrad::nn::Module<float>& model) {
    for (const auto& [name, module] : model.named_modules()) modes_.emplace_back(module, module->is_training());
    model.eval();
  }
  ~EvalScope() {
    // Parents before children (named_modules' order): a parent's train() sets its descendants,
    // which then get their own flag back.
    for (const auto& [module, training] : modes_) module->train(training);
  }
  EvalScope(const EvalScope&) = delete;
  EvalScope& operator=(const EvalScope&) = delete;

 private:
  std::vector<std::pair<std::shared_ptr<xgrad::nn::Module<float>>, bool>> modes_;
};

// ---- the loop --------------------------------------------------------------------------------

// A path of the options resolved in default_root_dir (a relative one), as Lightning's.
std::string in_root(const std::string& root, const std::string& path) {
  if (root.empty() || path.empty() || std::filesystem::path(path).is_absolute()) return path;
  return (std::filesystem::path(root) / path).string();
}

}  // namespace

std::vector<RunPath> run_paths(const TrainerOptions& o) {
  const std::string& root = o.default_root_dir;
  return {RunPath::input("--resume", in_root(root, o.ckpt_path)),
          RunPath::output("--checkpoint", o.enable_checkpointing ? in_root(root, o.checkpoint_path) : "")
              .may_replace("--resume"),  // read whole by the constructor, rewritten atomically
          RunPath::output("--csv", in_root(root, o.csv_path)),
          RunPath::output("--save-weights", in_root(root, o.weights_path))};
}

namespace {

void check_options(const TrainerOptions& o) {
  if (o.max_steps < 0)
    throw std::invalid_argument("Trainer: expected max_steps >= 0, got " + std::to_string(o.max_steps));
  if (o.val_check_interval < 1)
    throw std::invalid_argument("Trainer: expected val_check_interval >= 1, got " +
                                std::to_string(o.val_check_interval));
  if (!(o.gradient_clip_val >= 0))  // NaN too
    throw std::invalid_argument(
        "Trainer: expected gradient_clip_val >= 0 (0: no clipping, infinity: the gradient "
        "norm measured without clipping, as clip_grad_norm_), got " +
        format_setting(o.gradient_clip_val));
  if (o.checkpoint_every_n_steps < 0)
    throw std::invalid_argument("Trainer: expected checkpoint_every_n_steps >= 0, got " +
                                std::to_string(o.checkpoint_every_n_steps));
  if (o.log_every_n_steps < 0)
    throw std::invalid_argument("Trainer: expected log_every_n_steps >= 0, got " + std::to_string(o.log_every_n_steps));
  if (o.stop_at < 0) throw std::invalid_argument("Trainer: expected stop_at >= 0, got " + std::to_string(o.stop_at));
}

}  // namespace

Trainer::Trainer(std::string program, TrainerOptions options, Settings& settings, World& world,
                 const std::function<bool(const std::string& key)>& given_on_command_line)
    : program_(std::move(program)), settings_(&settings), options_(std::move(options)), world_(world) {
  TrainerOptions& o = options_;
  if (o.num_threads < 1)
    throw std::invalid_argument("Trainer: expected num_threads >= 1, got " + std::to_string(o.num_threads));
  if (!o.default_root_dir.empty()) {
    check_output_folder("--default-root-dir", o.default_root_dir);
    if (world_.is_main()) std::filesystem::create_directories(o.default_root_dir);
    world_.barrier();
  }
  // Before anything is read or trained: a typo or two flags naming one file fail at once.
  check_run_paths(run_paths(o));
  o.ckpt_path = in_root(o.default_root_dir, o.ckpt_path);
  o.checkpoint_path = o.enable_checkpointing ? in_root(o.default_root_dir, o.checkpoint_path) : std::string();
  o.csv_path = in_root(o.default_root_dir, o.csv_path);
  o.weights_path = in_root(o.default_root_dir, o.weights_path);
  check_launched_world(program_, world_);
  xgrad::set_num_threads(o.num_threads);
  if (!o.ckpt_path.empty()) {
    checkpoint_ = read_checkpoint(o.ckpt_path);
    state_ = resume_settings(program_, o.ckpt_path, *checkpoint_, settings, world_, given_on_command_line);
    const auto& m = checkpoint_->metadata;
    const int saved = saved_max_steps(o.ckpt_path, m);
    const std::string steps_flag = o.max_steps_flag.empty() ? "max_steps" : o.max_steps_flag;
    if (o.max_steps < 0) {
      if (saved <= 0)
        throw Refused("cannot resume: " + o.ckpt_path + " does not record its max_steps: give " + steps_flag);
      o.max_steps = saved;
    }
    if (o.max_steps < state_.step)
      throw Refused(steps_flag + " " + std::to_string(o.max_steps) + " is below the checkpoint's step " +
                    std::to_string(state_.step) + " (" + o.ckpt_path + "): expected at least " +
                    std::to_string(state_.step));
    const auto planned = m.find(kPlannedStepsKey);
    planned_steps_ =
        planned != m.end() ? metadata_count(o.ckpt_path, m, kPlannedStepsKey) : (saved > 0 ? saved : o.max_steps);
  } else {
    if (o.max_steps < 0)
      throw std::invalid_argument("Trainer: expected max_steps >= 0 (-1 only when resuming, ckpt_path), got " +
                                  std::to_string(o.max_steps));
    planned_steps_ = o.max_steps;
  }
  first_step_ = state_.step;
  elapsed_before_ = state_.elapsed;
  start_ = std::chrono::steady_clock::now();
}

// Model, optimizer, schedule and this rank's generator from checkpoint_.
void Trainer::restore() {
  const std::string& path = options_.ckpt_path;
  try {
    checkpoint_->restore(*model_, *optimizer_, schedule_, xgrad::default_generator());
  } catch (const std::exception& e) {
    throw Refused("cannot resume from " + path + ": " + e.what());
  }
  if (world_.size() > 1) {
    // This rank's generator, from the states of every rank.
    try {
      const auto states = xgrad::rank_generators_from_string(checkpoint_->metadata.at(xgrad::kRankGeneratorsKey));
      xgrad::default_generator().set_state(states.at(static_cast<std::size_t>(world_.rank())));
    } catch (const std::exception& e) {
      throw Refused("cannot resume from " + path + ": its generator states: " + e.what());
    }
  }
  if (world_.is_main())
    std::printf("resumed from %s at step %d of %d\n", path.c_str(), state_.step, options_.max_steps);
}

void Trainer::seed_everything(std::uint64_t seed) {
  xgrad::manual_seed(seed);
  seed_ = seed;
}

std::optional<int> Trainer::fit(xgrad::nn::Module<float>& model, optim::Optimizer<float>& optimizer,
                                optim::LRScheduler<float>* schedule,
                                const std::function<xgrad::Tensor<float>(int step)>& training_step,
                                const std::function<double()>& validation_step) {
  if (fitted_)
    throw std::logic_error("Trainer::fit: expected one call of fit(model, optimizer, schedule, ...) per Trainer");
  check_options(options_);
  fitted_ = true;
  // A resumed run has evaluated when it is past its first evaluation (its metric was saved).
  evaluated_ = state_.step >= options_.val_check_interval;
  model_ = &model;
  optimizer_ = &optimizer;
  schedule_ = schedule;
  // Dropout: rank 0 goes on with the stream the weights came from, the others with their own.
  if (seed_ && world_.rank() > 0) xgrad::manual_seed(*seed_ + 0xD1B54A32D192ED03ULL * std::uint64_t(world_.rank()));
  if (checkpoint_) {
    const int saved = saved_max_steps(options_.ckpt_path, checkpoint_->metadata);
    const bool extended = saved > 0 && saved != options_.max_steps && schedule != nullptr;
    // The lrs and the schedule's state of a fresh run, which an extended run steps afresh.
    std::vector<double> fresh_lrs;
    for (auto& group : optimizer.param_groups()) fresh_lrs.push_back(group.options().get_lr());
    const optim::LRSchedulerState fresh = schedule ? schedule->state() : optim::LRSchedulerState{};
    restore();
    restore_tracked();
    if (extended) {
      // A schedule built for the new max_steps, at the checkpoint's step: the lr of a run planned
      // that long from the start (the optimizer's moments stay the checkpoint's).
      schedule->load_state(fresh);
      for (std::size_t i = 0; i < fresh_lrs.size(); ++i) optimizer.param_groups()[i].options().set_lr(fresh_lrs[i]);
      for (int i = 0; i < state_.step; ++i) schedule->step();
    }
  }
  return loop(training_step, validation_step);
}

void Trainer::track_state(const std::string& name, std::function<std::string()> save,
                          std::function<void(const std::string&)> load) {
  if (fitted_) throw std::logic_error("Trainer::track('" + name + "'): expected before fit() (it restores the state)");
  if (name.empty()) throw std::invalid_argument("Trainer::track: expected a name (its checkpoint key), got ''");
  if (is_trainer_key(name))
    throw std::invalid_argument("Trainer::track('" + name +
                                "'): the name is a checkpoint key of the Trainer's own (config.*, the loop's state): "
                                "expected a key of the program's own");
  for (const Tracked& t : tracked_)
    if (t.name == name) throw std::invalid_argument("Trainer::track('" + name + "'): the name is tracked already");
  tracked_.push_back({name, std::move(save), std::move(load)});
}

// Every tracked state from checkpoint_.
void Trainer::restore_tracked() {
  const std::string& path = options_.ckpt_path;
  for (const Tracked& t : tracked_) {
    const auto it = checkpoint_->metadata.find(t.name);
    if (it == checkpoint_->metadata.end())
      throw Refused("cannot resume from " + path + ": its metadata has no key '" + t.name +
                    "' (the state the program tracks under that name): a checkpoint of another program?");
    try {
      t.load(it->second);
    } catch (const std::exception& e) {
      throw Refused("cannot resume from " + path + ": its '" + t.name + "': " + e.what());
    }
  }
}

void Trainer::add_callback(std::shared_ptr<Callback> callback) {
  if (!callback) throw std::invalid_argument("Trainer::add_callback: expected a callback, got a null pointer");
  callbacks_.push_back(std::move(callback));
}

double Trainer::elapsed() const {
  return elapsed_before_ + std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Trainer::save(const char* why) {
  if (options_.checkpoint_path.empty()) return;
  std::map<std::string, std::string> own = metadata_of(*settings_, state_);
  own[kMaxStepsKey] = std::to_string(options_.max_steps);
  own[kPlannedStepsKey] = std::to_string(planned_steps_);
  for (const Tracked& t : tracked_) own[t.name] = t.save();
  std::map<std::string, std::string> metadata = own;
  for (const auto& callback : callbacks_) callback->on_save_checkpoint(*this, metadata);
  check_callback_metadata(own, metadata);
  if (world_.size() > 1) {
    // Every rank's generator, gathered to every rank; rank 0 alone writes, the others wait for the
    // file (a failed write ends the job through guarded()).
    metadata[kWorldSizeKey] = std::to_string(world_.size());
    std::vector<xgrad::GeneratorState> states;
    const std::string mine = xgrad::rank_generators_to_string({xgrad::default_generator().get_state()});
    for (const std::string& text : world_.all_gather_string(mine))
      states.push_back(xgrad::rank_generators_from_string(text).at(0));
    metadata[xgrad::kRankGeneratorsKey] = xgrad::rank_generators_to_string(states);
  }
  if (world_.is_main())
    xgrad::save_checkpoint(options_.checkpoint_path, *model_, *optimizer_, schedule_, xgrad::default_generator(),
                           state_.step, std::move(metadata));
  world_.barrier();
  if (world_.is_main())
    progress_.note("checkpoint " + options_.checkpoint_path + " (step " + std::to_string(state_.step) + ", " + why +
                   ")");
}

// The run's settings, the loop's state and the tracked states in a checkpoint are read-only to
// callbacks: a changed, removed or added key of the Trainer's would make a resumed run another one.
void Trainer::check_callback_metadata(const std::map<std::string, std::string>& own,
                                      const std::map<std::string, std::string>& metadata) const {
  const std::string who = "Trainer: a callback's on_save_checkpoint ";
  const auto why = [&](const std::string& key) -> std::string {
    if (!is_trainer_key(key)) return " (the state of track('" + key + "'), which the Trainer saves)";
    return " (the run's settings, config.*, and the loop's state are the Trainer's and read-only; "
           "store the program's own state under a key of its own)";
  };
  for (const auto& [key, value] : own) {
    const auto it = metadata.find(key);
    if (it == metadata.end()) throw std::invalid_argument(who + "removed the metadata key '" + key + "'" + why(key));
    if (it->second != value)
      throw std::invalid_argument(who + "changed the metadata key '" + key + "' from '" + value + "' to '" +
                                  it->second + "'" + why(key));
  }
  for (const auto& [key, value] : metadata)
    if (own.count(key) == 0 && is_trainer_key(key))
      throw std::invalid_argument(who + "added the metadata key '" + key + "'" + why(key));
}

std::optional<int> Trainer::loop(const std::function<xgrad::Tensor<float>(int step)>& training_step,
                                 const std::function<double()>& validation_step) {
  const bool main = world_.is_main();
  const int ranks = world_.size();
  const int steps = options_.max_steps;
  if (state_.step >= steps) {
    // Nothing to train (a finished run resumed to export or sample): nothing rewritten.
    for (const auto& callback : callbacks_) callback->on_fit_end(*this);
    return std::nullopt;
  }
  detail::CsvLog csv(main ? options_.csv_path : std::string(), state_.step, options_.metric.column);
  const std::string how_to_continue = options_.checkpoint_path.empty()
                                          ? "no checkpoint written (--checkpoint is empty)"
                                          : "continue with --resume " + options_.checkpoint_path;
  const SigintScope sigint;  // the program's own handler is back when fit() returns or throws
  const std::vector<xgrad::Tensor<float>> params = model_->parameters();
  start_ = std::chrono::steady_clock::now();
  const bool show = main && options_.enable_progress_bar;
  const auto metric_text = [&] {
    return evaluated_ ? options_.metric.describe(state_.val_metric) : options_.metric.describe_pending();
  };
  model_->train();
  while (state_.step < steps) {
    const xgrad::Tensor<float> loss = training_step(state_.step);
    if (!loss.defined())
      throw std::invalid_argument("Trainer::fit: training_step(" + std::to_string(state_.step) +
                                  ") returned an undefined tensor: expected the loss of the step's batch (a scalar "
                                  "with a graph)");
    optimizer_->zero_grad();
    loss.backward();
    if (options_.gradient_clip_val > 0) optim::clip_grad_norm_(params, options_.gradient_clip_val);
    const double lr = optimizer_->param_groups()[0].options().get_lr();
    optimizer_->step();
    if (schedule_ != nullptr) schedule_->step();
    ++state_.step;
    // The mean loss over ranks, and whether any rank was interrupted (so that all stop together).
    double reduced[2] = {loss.item(), g_interrupted ? 1.0 : 0.0};
    world_.all_reduce_sum(reduced, 2);
    const bool interrupted = reduced[1] > 0;
    const double step_loss = ranks > 1 ? reduced[0] / ranks : reduced[0];
    state_.loss_sum += step_loss;
    ++state_.loss_count;
    for (const auto& callback : callbacks_) callback->on_train_batch_end(*this, state_.step, step_loss);

    const int run_steps = state_.step - first_step_;
    if (state_.step % options_.val_check_interval == 0 || state_.step == steps) {
      {
        // Lightning's validation loop: eval mode and no graph, each module's mode given back after.
        const EvalScope eval(*model_);
        const xgrad::NoGradGuard no_grad;
        state_.val_metric = validation_step();
      }
      evaluated_ = true;
      const Metrics metrics{state_.step, state_.loss_sum / state_.loss_count, state_.val_metric, lr, elapsed()};
      csv.row(metrics);
      if (show)
        progress_.update(state_.step, steps, metrics.loss, metric_text(), run_steps, elapsed() - elapsed_before_,
                         /*row=*/true);
      state_.loss_sum = 0;
      state_.loss_count = 0;
      for (const auto& callback : callbacks_) callback->on_validation_end(*this, metrics);
    } else if (show) {
      const bool row = options_.log_every_n_steps > 0 && state_.step % options_.log_every_n_steps == 0;
      progress_.update(state_.step, steps, state_.loss_sum / state_.loss_count, metric_text(), run_steps,
                       elapsed() - elapsed_before_, row);
    }
    state_.elapsed = elapsed();
    if (interrupted) {
      save("interrupted");
      progress_.finish();
      if (main) std::printf("stopped by Ctrl-C at step %d; %s\n", state_.step, how_to_continue.c_str());
      return 130;
    }
    if (state_.step == options_.stop_at && state_.step < steps) {
      save("--stop-at");
      progress_.finish();
      if (main) std::printf("stopped at step %d (--stop-at); %s\n", state_.step, how_to_continue.c_str());
      return 0;
    }
    if (options_.checkpoint_every_n_steps > 0 && state_.step % options_.checkpoint_every_n_steps == 0 &&
        state_.step < steps)
      save("periodic");
  }
  save("final");
  progress_.finish();
  for (const auto& callback : callbacks_) callback->on_fit_end(*this);
  return std::nullopt;
}

void Trainer::finish() {
  if (!world_.is_main()) return;
  std::printf("wall time: %.1f s for %d steps in this run (%.1f s in total)\n", elapsed() - elapsed_before_,
              state_.step - first_step_, elapsed());
  if (!options_.weights_path.empty()) {
    if (model_ == nullptr) throw std::logic_error("Trainer::finish: expected fit() first (the weights of its model)");
    xgrad::save_safetensors(*model_, options_.weights_path);
    std::printf("weights: %s\n", options_.weights_path.c_str());
  }
}

}  // namespace xgrad::train
