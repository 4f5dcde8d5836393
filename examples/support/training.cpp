#include "training.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include <xgrad/backend/bf16.hpp>
#include <xgrad/backend/gemm.hpp>
#include <xgrad/serialize/safetensors.hpp>
#ifdef XGRAD_WITH_MPI
#include <xgrad/distributed/distributed.hpp>
#endif

namespace training {

namespace optim = xgrad::optim;

// ---- distributed runs ------------------------------------------------------------------------

namespace {

World g_world;
bool g_group_initialized = false;
bool g_mpi_missing = false;  // started by mpirun -np N > 1 in a build without MPI

// The number of processes mpirun started (Open MPI tells each in its environment); 1 otherwise.
int launched_world_size() {
  const char* v = std::getenv("OMPI_COMM_WORLD_SIZE");
  return v != nullptr ? std::max(1, std::atoi(v)) : 1;
}

// Ends the whole job when this is one rank of several, else prints the message; returns `status`.
int fail(const std::string& message, int status) {
  std::fflush(stdout);
#ifdef XGRAD_WITH_MPI
  if (g_world.size > 1) xgrad::distributed::abort(message, status);
#endif
  std::fprintf(stderr, "%s\n", message.c_str());
  return status;
}

// Metadata keys of a distributed run's checkpoint.
constexpr const char* kWorldSizeKey = "world_size";

// Every rank's default generator state, by rank (a collective: every rank calls it).
std::vector<xgrad::GeneratorState> gather_generator_states() {
  std::vector<xgrad::GeneratorState> states;
#ifdef XGRAD_WITH_MPI
  const std::string mine = xgrad::rank_generators_to_string({xgrad::default_generator().get_state()});
  for (const std::string& text : xgrad::distributed::all_gather_string(mine))
    states.push_back(xgrad::rank_generators_from_string(text).at(0));
#else
  states.push_back(xgrad::default_generator().get_state());
#endif
  return states;
}

void barrier() {
#ifdef XGRAD_WITH_MPI
  if (g_world.size > 1) xgrad::distributed::barrier();
#endif
}

}  // namespace

ProcessGroup::ProcessGroup() {
  if (launched_world_size() <= 1) return;
#ifdef XGRAD_WITH_MPI
  xgrad::distributed::init_process_group();
  g_group_initialized = true;
  g_world.rank = xgrad::distributed::get_rank();
  g_world.size = xgrad::distributed::get_world_size();
#else
  g_mpi_missing = true;  // prepare() refuses
#endif
}

ProcessGroup::~ProcessGroup() {
#ifdef XGRAD_WITH_MPI
  if (g_group_initialized) xgrad::distributed::destroy_process_group();
#endif
  g_group_initialized = false;
  g_world = World{};
}

const World& world() { return g_world; }

void sum_over_ranks(double* values, std::size_t count) {
#ifdef XGRAD_WITH_MPI
  if (g_world.size > 1) xgrad::distributed::all_reduce(values, count, xgrad::distributed::ReduceOp::SUM);
#else
  (void)values;
  (void)count;
#endif
}

bool built_with_mpi() {
#ifdef XGRAD_WITH_MPI
  return true;
#else
  return false;
#endif
}

int guarded(const std::string& program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const Refused& e) {
    return fail(e.what(), 2);
  } catch (const std::exception& e) {
    return fail((g_world.size > 1 ? "" : "\n") + program + ": " + e.what(), 1);
  }
}

// ---- flags -----------------------------------------------------------------------------------

void add_run_flags(CLI::App& app, RunOptions& run) {
  app.add_option("--checkpoint", run.checkpoint_path, "checkpoint file (written atomically); empty: none")
      ->capture_default_str();
  app.add_option("--checkpoint-interval", run.checkpoint_interval, "steps between checkpoints; 0: only at the end")
      ->check(flags::integer_from(0))
      ->capture_default_str();
  app.add_option("--resume", run.resume_path, "continue the run saved in this checkpoint")->check(CLI::ExistingFile);
  app.add_option("--csv", run.csv_path, "metrics file (step,loss,accuracy,lr,elapsed); empty: none")
      ->capture_default_str();
  app.add_option("--plot", run.plot_path, "loss curve PNG rendered with gnuplot at the end; empty: none")
      ->capture_default_str();
  app.add_option("--save-weights", run.weights_path, "write the final weights as safetensors (loads in PyTorch)");
  app.add_option("--stop-at", run.stop_at, "stop at this step with a checkpoint, as Ctrl-C does")
      ->check(flags::integer_from(0));
  app.add_option("--threads", run.threads,
                 "xgrad::set_num_threads (>= 1, as torch.set_num_threads: no 0 for 'every core', pass "
                 "$(nproc)); one is fastest for a model this small; a resumed run should use the same count "
                 "to continue bit for bit")
      ->check(flags::integer_in(1, 256))
      ->capture_default_str();
}

std::string format_setting(int v) { return std::to_string(v); }
std::string format_setting(std::uint64_t v) { return std::to_string(v); }
std::string format_setting(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}
std::string format_setting(const std::string& v) { return v; }
void parse_setting(const std::string& text, int& v) { v = std::stoi(text); }
void parse_setting(const std::string& text, std::uint64_t& v) { v = std::stoull(text); }
void parse_setting(const std::string& text, double& v) { v = std::stod(text); }
void parse_setting(const std::string& text, std::string& v) { v = text; }
std::string format_setting(bool v) { return v ? "1" : "0"; }
void parse_setting(const std::string& text, bool& v) {
  if (text != "0" && text != "1") throw std::invalid_argument("a flag is saved as 0 or 1, got " + text);
  v = text == "1";
}

CLI::Option* Settings::add_flag(CLI::App& app, const std::string& flag, bool& value, const std::string& help) {
  entries_.push_back({flag.substr(2), [&value] { return format_setting(value); },
                      [&value](const std::string& text) { parse_setting(text, value); }, true});
  return app.add_flag(flag, value, help);
}

CLI::Option* add_bf16_flag(CLI::App& app, Settings& settings, bool& bf16) {
  return settings.add_flag(app, "--bf16", bf16,
                           "bfloat16 autocast (torch.autocast on CPU): bf16 gemms with fp32 accumulation in linear, "
                           "matmul and attention; everything else, the gradients and the optimizer in fp32");
}

std::string precision_description(bool bf16) {
  return bf16 ? std::string("bfloat16 autocast, gemm: ") + xgrad::autocast_gemm_path() : "float32";
}

std::vector<std::pair<std::string, std::string>> Settings::values() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& e : entries_) out.emplace_back(e.key, e.get());
  return out;
}

void Settings::assign(const std::map<std::string, std::string>& saved) {
  for (const auto& e : entries_) e.set(saved.at(e.key));
}

void Settings::complete(std::map<std::string, std::string>& saved) const {
  for (const auto& e : entries_)
    if (e.is_flag) saved.emplace(e.key, format_setting(false));
}

// ---- resuming --------------------------------------------------------------------------------

namespace {

// Checkpoint metadata: the settings ("config.<flag>") and the LoopState. Doubles are written in
// hexadecimal (%a) so that they read back to the same bits.
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
  m["accuracy"] = hex(state.accuracy);
  m["elapsed"] = hex(state.elapsed);
  return m;
}

}  // namespace

Resumed prepare(const std::string& program, const RunOptions& run, Settings& settings, const CLI::App& app) {
  if (g_mpi_missing)
    throw Refused(program + " was started by mpirun with " + std::to_string(launched_world_size()) +
                  " processes, but this build has no MPI: configure with -DXGRAD_WITH_MPI=ON (Open MPI: "
                  "apt-get install libopenmpi-dev openmpi-bin)");
  if (launched_world_size() > 1 && !g_group_initialized)
    throw Refused(program + " does not train data-parallel (it holds no training::ProcessGroup): start it without "
                  "mpirun, or with mpirun -np 1");
  xgrad::set_num_threads(run.threads);
  Resumed r;
  if (run.resume_path.empty()) return r;
  try {
    r.checkpoint = xgrad::load_checkpoint<float>(run.resume_path);
  } catch (const std::exception& e) {
    throw Refused(std::string("cannot resume: ") + e.what());
  }
  const std::map<std::string, std::string>& m = r.checkpoint->metadata;
  std::map<std::string, std::string> saved;
  for (const auto& [key, value] : m)
    if (key.rfind("config.", 0) == 0) saved[key.substr(7)] = value;
  settings.complete(saved);
  const auto given = settings.values();
  try {
    settings.assign(saved);  // checks that every setting is there before comparing
    r.state.step = static_cast<int>(r.checkpoint->step);
    r.state.loss_sum = std::stod(m.at("loss_sum"));
    r.state.loss_count = std::stoi(m.at("loss_count"));
    r.state.accuracy = std::stod(m.at("accuracy"));
    r.state.elapsed = std::stod(m.at("elapsed"));
  } catch (const std::logic_error&) {  // std::out_of_range, std::invalid_argument
    throw Refused("cannot resume: " + run.resume_path + " is not a checkpoint of " + program +
                  " (its metadata lacks the run's settings)");
  }
  const auto world_size = m.find(kWorldSizeKey);
  const std::string saved_world = world_size == m.end() ? "1" : world_size->second;
  if (saved_world != std::to_string(g_world.size))
    throw Refused("cannot resume: " + run.resume_path + " was written by a run of " + saved_world +
                  " process(es), this one has " + std::to_string(g_world.size) + " (start it with mpirun -np " +
                  saved_world + ")");
  for (const auto& [key, value] : given) {
    const std::string& theirs = saved.at(key);
    if (app.count("--" + key) != 0 && value != theirs)
      throw Refused("--" + key + " " + value + " differs from the checkpoint's " + theirs + " (" + run.resume_path +
                    ")");
  }
  return r;
}

// ---- progress, CSV, plot ---------------------------------------------------------------------

namespace {

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

// step,loss,accuracy,lr,elapsed: one row per evaluation. A resumed run keeps the rows up to its
// step (a run stopped after its last checkpoint may have written more) and appends.
class CsvLog {
 public:
  CsvLog(const std::string& path, int resumed_step) {
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

}  // namespace

// Under mpirun, a rank's stdout is a pseudo-terminal of Open MPI's even when mpirun's own output
// goes to a file: plain lines there.
Progress::Progress() : tty_(isatty(STDOUT_FILENO) != 0 && std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr) {}

void Progress::update(int step, int steps, double loss, double accuracy, int steps_run, double seconds, bool row) {
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

void Progress::note(const std::string& message) {
  finish();
  std::printf("%s\n", message.c_str());
  std::fflush(stdout);
}

void Progress::finish() {
  if (drawn_) std::printf("\n");
  drawn_ = false;
}

// ---- the loop --------------------------------------------------------------------------------

Trainer::Trainer(std::string program, const RunOptions& run, const Settings& settings, Resumed resumed,
                 xgrad::nn::Module<float>& model, optim::Optimizer<float>& optimizer,
                 optim::LRScheduler<float>* schedule, LoopOptions loop)
    : program_(std::move(program)),
      run_(run),
      settings_(settings),
      model_(model),
      optimizer_(optimizer),
      schedule_(schedule),
      loop_(loop),
      state_(resumed.state),
      first_step_(resumed.state.step),
      elapsed_before_(resumed.state.elapsed),
      start_(std::chrono::steady_clock::now()) {
  if (resumed.checkpoint) {
    try {
      resumed.checkpoint->restore(model, optimizer, schedule, xgrad::default_generator());
    } catch (const std::exception& e) {
      throw Refused("cannot resume from " + run.resume_path + ": " + e.what());
    }
    if (g_world.size > 1) {
      // This rank's generator, from the states of every rank.
      try {
        const auto states = xgrad::rank_generators_from_string(resumed.checkpoint->metadata.at(xgrad::kRankGeneratorsKey));
        xgrad::default_generator().set_state(states.at(static_cast<std::size_t>(g_world.rank)));
      } catch (const std::exception& e) {
        throw Refused("cannot resume from " + run.resume_path + ": its generator states: " + e.what());
      }
    }
    if (g_world.is_main())
      std::printf("resumed from %s at step %d of %d\n", run.resume_path.c_str(), state_.step, loop.steps);
  }
}

double Trainer::elapsed() const {
  return elapsed_before_ + std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Trainer::save(const char* why) {
  if (run_.checkpoint_path.empty()) return;
  std::map<std::string, std::string> metadata = metadata_of(settings_, state_);
  if (extra_metadata)
    for (auto& [key, value] : extra_metadata()) metadata.emplace(key, std::move(value));
  if (g_world.size > 1) {
    // Every rank's generator, gathered to rank 0, which alone writes; the others wait for the
    // file (a failed write ends the job through guarded()).
    metadata[kWorldSizeKey] = std::to_string(g_world.size);
    metadata[xgrad::kRankGeneratorsKey] = xgrad::rank_generators_to_string(gather_generator_states());
  }
  if (g_world.is_main()) {
    xgrad::save_checkpoint(run_.checkpoint_path, model_, optimizer_, schedule_, xgrad::default_generator(),
                           state_.step, std::move(metadata));
  }
  barrier();
  if (g_world.is_main())
    progress_.note("checkpoint " + run_.checkpoint_path + " (step " + std::to_string(state_.step) + ", " + why + ")");
}

std::optional<int> Trainer::train(const std::function<xgrad::Tensor<float>(int step)>& loss_of,
                                  const std::function<double()>& accuracy_of) {
  const bool main = g_world.is_main();
  CsvLog csv(main ? run_.csv_path : std::string(), state_.step);
  const std::string how_to_continue = run_.checkpoint_path.empty()
                                          ? "no checkpoint written (--checkpoint is empty)"
                                          : "continue with --resume " + run_.checkpoint_path;
  std::signal(SIGINT, on_sigint);
  const std::vector<xgrad::Tensor<float>> params = model_.parameters();
  start_ = std::chrono::steady_clock::now();
  const int steps = loop_.steps;
  model_.train();
  while (state_.step < steps) {
    const xgrad::Tensor<float> loss = loss_of(state_.step);
    optimizer_.zero_grad();
    loss.backward();
    if (loop_.clip > 0) optim::clip_grad_norm_(params, loop_.clip);
    const double lr = optimizer_.param_groups()[0].options().get_lr();
    optimizer_.step();
    if (schedule_ != nullptr) schedule_->step();
    ++state_.step;
    // The mean loss over ranks, and whether any rank was interrupted (so that all stop together).
    double reduced[2] = {loss.item(), g_interrupted ? 1.0 : 0.0};
    sum_over_ranks(reduced, 2);
    const bool any_rank_interrupted = reduced[1] > 0;
    state_.loss_sum += g_world.size > 1 ? reduced[0] / g_world.size : reduced[0];
    ++state_.loss_count;

    const int run_steps = state_.step - first_step_;
    if (state_.step % loop_.eval_interval == 0 || state_.step == steps) {
      state_.accuracy = accuracy_of();
      const double mean_loss = state_.loss_sum / state_.loss_count;
      csv.row(state_.step, mean_loss, state_.accuracy, lr, elapsed());
      if (main)
        progress_.update(state_.step, steps, mean_loss, state_.accuracy, run_steps, elapsed() - elapsed_before_,
                         /*row=*/true);
      state_.loss_sum = 0;
      state_.loss_count = 0;
    } else if (main) {
      progress_.update(state_.step, steps, state_.loss_sum / state_.loss_count, state_.accuracy, run_steps,
                       elapsed() - elapsed_before_, /*row=*/false);
    }
    state_.elapsed = elapsed();
    if (g_world.size > 1 ? any_rank_interrupted : g_interrupted != 0) {
      save("interrupted");
      progress_.finish();
      if (main) std::printf("stopped by Ctrl-C at step %d; %s\n", state_.step, how_to_continue.c_str());
      return 130;
    }
    if (state_.step == run_.stop_at && state_.step < steps) {
      save("--stop-at");
      progress_.finish();
      if (main) std::printf("stopped at step %d (--stop-at); %s\n", state_.step, how_to_continue.c_str());
      return 0;
    }
    if (run_.checkpoint_interval > 0 && state_.step % run_.checkpoint_interval == 0 && state_.step < steps)
      save("periodic");
  }
  save("final");
  progress_.finish();
  return std::nullopt;
}

void Trainer::finish() {
  if (!g_world.is_main()) return;
  std::printf("wall time: %.1f s for %d steps in this run (%.1f s in total)\n", elapsed() - elapsed_before_,
              state_.step - first_step_, elapsed());
  if (!run_.weights_path.empty()) {
    xgrad::save_safetensors(model_, run_.weights_path);
    std::printf("weights: %s\n", run_.weights_path.c_str());
  }
  if (!run_.csv_path.empty() && !run_.plot_path.empty()) plot(run_.csv_path, run_.plot_path);
}

}  // namespace training
