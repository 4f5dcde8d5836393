// Command-line flags for a training program with CLI11 (libcli11-dev), header-only: only programs
// that include this header need CLI11; the rest of xgrad::train does not depend on it. In main():
// compile: snippet given: int argc = 1; char* argv[] = {nullptr}; int d_model = 64;
//   CLI::App app{"my_program"};
//   train::Settings settings;
//   train::cli::add_setting(app, settings, "--d-model", d_model, "model width")
//       ->check(train::cli::integer_in(1, 4096));
//   train::TrainerOptions options;
//   options.checkpoint_path = "my.ckpt";
//   train::cli::add_trainer_flags(app, options);
//   int steps = 1000;
//   train::cli::add_max_steps_flag(app, steps, "--steps", "training steps");
//   app.parse(argc, argv);  // in main(): CLI11_PARSE(app, argc, argv);
//   train::cli::finish_max_steps(app, options, "--steps", steps);
//   train::Trainer trainer("my_program", options, settings, train::single_process_world(),
//                          train::cli::given(app));
//
// The checks print one short line naming the flag, what was expected and what came, where CLI11's
// own CLI::PositiveNumber and CLI::Range print the whole double range (some 300 digits):
//   --lr: expected a positive number, got 'abc'
//   --heads: expected an integer in [1, 256], got '0'
// A std::uint64_t setting is checked to be in [0, 2^64 - 1] (no "-1"), and every path flag of
// add_trainer_flags to be a regular file or nothing yet (no FIFO, device or folder).
#pragma once

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>

#include <xgrad/core/profiler.hpp>
#include <xgrad/train/settings.hpp>
#include <xgrad/train/trainer.hpp>

namespace xgrad::train::cli {

namespace detail {

// The whole of `text` as a finite double, or false.
inline bool to_double(const std::string& text, double& v) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  v = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && errno != ERANGE && std::isfinite(v);
}

// The whole of `text` as a std::uint64_t, or false: digits only (no sign: strtoull would take
// "-1" as 2^64 - 1), no overflow.
inline bool to_unsigned(const std::string& text, unsigned long long& v) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return false;
  char* end = nullptr;
  errno = 0;
  v = std::strtoull(text.c_str(), &end, 10);
  return end == text.c_str() + text.size() && errno != ERANGE;
}

// The whole of `text` as an integer, or false (no fraction, no exponent, no overflow).
inline bool to_integer(const std::string& text, long long& v) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  v = std::strtoll(text.c_str(), &end, 10);
  return end == text.c_str() + text.size() && errno != ERANGE;
}

template <class T>
std::string str(T v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

inline std::string got(const std::string& text) { return ", got '" + text + "'"; }

}  // namespace detail

// ---- checks ----------------------------------------------------------------------------------

// A finite number > 0.
inline CLI::Validator positive() {
  return CLI::Validator(
      [](std::string& text) {
        double v;
        return detail::to_double(text, v) && v > 0 ? std::string() : "expected a positive number" + detail::got(text);
      },
      "POSITIVE");
}

// A finite number >= 0.
inline CLI::Validator non_negative() {
  return CLI::Validator(
      [](std::string& text) {
        double v;
        return detail::to_double(text, v) && v >= 0 ? std::string()
                                                    : "expected a number >= 0" + detail::got(text);
      },
      "NONNEGATIVE");
}

// An integer in [lo, hi].
inline CLI::Validator integer_in(long long lo, long long hi) {
  const std::string range = "[" + detail::str(lo) + ", " + detail::str(hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& text) {
        long long v;
        return detail::to_integer(text, v) && v >= lo && v <= hi ? std::string()
                                                                 : "expected an integer in " + range + detail::got(text);
      },
      range);
}

// An int >= lo (and at most INT_MAX, so that it fits the flag's variable).
inline CLI::Validator integer_from(int lo) {
  return CLI::Validator(
      [lo](std::string& text) {
        long long v;
        return detail::to_integer(text, v) && v >= lo && v <= std::numeric_limits<int>::max()
                   ? std::string()
                   : "expected an integer >= " + detail::str(lo) + detail::got(text);
      },
      ">= " + detail::str(lo));
}

// An integer in [0, 2^64 - 1], for a std::uint64_t (add_setting checks those by itself).
inline CLI::Validator unsigned_integer() {
  const std::string range = "[0, " + detail::str(std::numeric_limits<std::uint64_t>::max()) + "]";
  return CLI::Validator(
      [range](std::string& text) {
        unsigned long long v;
        return detail::to_unsigned(text, v) ? std::string() : "expected an integer in " + range + detail::got(text);
      },
      range);
}

// A path that is a regular file or nothing yet (a file to write, or to read whose absence the
// program reports itself): a FIFO would block the program forever, a device such as /dev/zero
// would be read without end, a folder is no file. Checked with stat(), which opens nothing.
inline CLI::Validator not_special_file() {
  return CLI::Validator(
      [](std::string& text) {
        const std::string kind = special_file_kind(text);
        return kind.empty() ? std::string() : "expected a regular file, got '" + text + "', " + kind;
      },
      "FILE");
}

// A finite number in [lo, hi].
inline CLI::Validator number_in(double lo, double hi) {
  const std::string range = "[" + detail::str(lo) + ", " + detail::str(hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& text) {
        double v;
        return detail::to_double(text, v) && v >= lo && v <= hi ? std::string()
                                                                : "expected a number in " + range + detail::got(text);
      },
      range);
}

// ---- settings and the Trainer's options as flags ---------------------------------------------

// The setting `flag` ("--d-model", saved under "d-model") bound to `value`, its default shown in
// --help; returns the option for ->check().
template <class T>
CLI::Option* add_setting(CLI::App& app, Settings& settings, const std::string& flag, T& value,
                         const std::string& help) {
  settings.add(flag.substr(2), value);
  CLI::Option* option = app.add_option(flag, value, help)->capture_default_str();
  if constexpr (std::is_same_v<T, std::uint64_t>) option->check(unsigned_integer());  // CLI11 wraps -1 and 2^64
  return option;
}

// A setting given as a flag without a value (given: true; default and older checkpoints: false).
inline CLI::Option* add_setting_flag(CLI::App& app, Settings& settings, const std::string& flag, bool& value,
                                     const std::string& help) {
  settings.add_flag(flag.substr(2), value);
  return app.add_flag(flag, value, help);
}

// --bf16: train under xgrad::AutocastGuard (bf16 gemms in linear, matmul and attention, fp32
// everywhere else), saved with the settings.
inline CLI::Option* add_bf16_flag(CLI::App& app, Settings& settings, bool& bf16) {
  return add_setting_flag(app, settings, "--bf16", bf16,
                          "bfloat16 autocast (torch.autocast on CPU): bf16 gemms with fp32 accumulation in linear, "
                          "matmul and attention; everything else, the gradients and the optimizer in fp32");
}

// The flags of TrainerOptions: --checkpoint, --checkpoint-interval, --resume (ckpt_path), --csv,
// --save-weights, --stop-at, --threads, --default-root-dir. The step count's flag is the
// program's (cli::add_max_steps_flag).
inline void add_trainer_flags(CLI::App& app, TrainerOptions& options) {
  app.add_option("--checkpoint", options.checkpoint_path, "checkpoint file (written atomically); empty: none")
      ->check(not_special_file())
      ->capture_default_str();
  app.add_option("--checkpoint-interval", options.checkpoint_every_n_steps,
                 "steps between checkpoints; 0: only at the end")
      ->check(integer_from(0))
      ->capture_default_str();
  app.add_option("--resume", options.ckpt_path,
                 "continue the run saved in this checkpoint (a finished run with no more steps: nothing is trained "
                 "nor rewritten, e.g. to export it)")
      ->check(CLI::ExistingFile)
      ->check(not_special_file());
  app.add_option("--csv", options.csv_path,
                 "metrics file (step,loss," + options.metric.column + ",lr,elapsed); empty: none")
      ->check(not_special_file())
      ->capture_default_str();
  app.add_option("--save-weights", options.weights_path, "write the final weights as safetensors (loads in PyTorch)")
      ->check(not_special_file());
  app.add_option("--stop-at", options.stop_at, "stop at this step with a checkpoint, as Ctrl-C does")
      ->check(integer_from(0));
  app.add_option("--threads", options.num_threads,
                 "xgrad::set_num_threads (>= 1, as torch.set_num_threads: no 0 for 'every core', pass "
                 "$(nproc)); a resumed run should use the same count to continue bit for bit")
      ->check(integer_in(1, 256))
      ->capture_default_str();
  app.add_option("--default-root-dir", options.default_root_dir,
                 "folder of the output files given as relative paths (created when missing)");
}

// The step count's flag (`flag`, "--steps"), its default `steps` shown in --help: sets
// options.max_steps when given, and otherwise to `steps` unless resuming (-1: the checkpoint's
// count). Call finish_max_steps(app, options, flag, steps) after parsing.
inline CLI::Option* add_max_steps_flag(CLI::App& app, int& steps, const std::string& flag, const std::string& help) {
  return app.add_option(flag, steps, help + " (with --resume: the checkpoint's count; more extends the run)")
      ->check(integer_in(1, 100000000))
      ->capture_default_str();
}
inline void finish_max_steps(const CLI::App& app, TrainerOptions& options, const std::string& flag, int steps) {
  options.max_steps = app.count(flag) != 0 || options.ckpt_path.empty() ? steps : -1;
  options.max_steps_flag = flag;  // the Trainer's messages name it
}

// --profile FILE: profile the run with xgrad::profiler (docs/profiler.md).
inline CLI::Option* add_profile_flag(CLI::App& app, std::string& path) {
  return app
      .add_option("--profile", path,
                  "profile the run (xgrad::profiler): write its Chrome trace to this file (chrome://tracing, "
                  "Perfetto) and print the op and thread-pool tables to stderr at the end")
      ->check(not_special_file());
}

// The --profile scope of a program's run: records from construction to destruction when `path`
// is not empty, then writes the trace and prints the tables to stderr (an error, too: a
// destructor does not throw). Made once the run's paths, --profile among them, are checked
// (check_run_paths), so that a refused run writes no trace and a bad path is refused at once:
//   std::string profile_path;  cli::add_profile_flag(app, profile_path);  CLI11_PARSE(...);
//   check_run_paths({..., RunPath::output("--profile", profile_path)});
//   cli::ProfileRun profiling(profile_path);
class ProfileRun {
 public:
  explicit ProfileRun(std::string path) : path_(std::move(path)) {
    if (!path_.empty()) profile_ = std::make_unique<profiler::Profile>();
  }
  ~ProfileRun() {
    if (!profile_) return;
    try {
      std::cerr << "\n" << profiler::save_report(*profile_, path_);
    } catch (const std::exception& e) {
      std::cerr << "--profile: " << e.what() << "\n";
    }
  }
  ProfileRun(const ProfileRun&) = delete;
  ProfileRun& operator=(const ProfileRun&) = delete;

 private:
  std::string path_;
  std::unique_ptr<profiler::Profile> profile_;
};

// For the Trainer's constructor: whether the setting `key` was given on the command line (as
// "--" + key), so that a value that contradicts the checkpoint being resumed is refused.
inline std::function<bool(const std::string&)> given(const CLI::App& app) {
  return [&app](const std::string& key) { return app.count("--" + key) != 0; };
}

}  // namespace xgrad::train::cli
