// xgrad::train (the Trainer, Settings, World, and the CLI11 flags of xgrad/train/cli.hpp) on a
// small MLP with dropout regressing random data: settings read back exactly, a run stopped with
// --stop-at and resumed ends with the same weights, bit for bit, and the same CSV as an
// uninterrupted one, contradicting or foreign checkpoints are refused, the callbacks are called
// when documented and the loop goes through its World's collectives.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>

#include <xgrad/backend/bf16.hpp>
#include <xgrad/backend/gemm.hpp>

#include <xgrad/train/cli.hpp>
#include <xgrad/train/trainer.hpp>
#include <xgrad/xgrad.hpp>

namespace {

namespace nn = xgrad::nn;
namespace optim = xgrad::optim;
namespace fs = std::filesystem;
namespace train = xgrad::train;
namespace cli = xgrad::train::cli;

struct Config {
  int steps = 12, hidden = 5, eval_interval = 4;
  double lr = 0.01, clip = 0.5;
  std::uint64_t seed = 3;
  std::string name = "mlp";
};

struct Result {
  int status = -1;
  xgrad::nn::StateDict<float> weights;
};

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A whole training program on the library, run with the command line `args` in `dir`;
// `callback`, when given, is added to its Trainer, and `world` is its World. Its evaluation
// interval and gradient clipping are settings (saved in the checkpoint, restored on resume) that
// it gives the Trainer's options after the constructor.
Result run_program(const fs::path& dir, const std::string& args, std::shared_ptr<train::Callback> callback = nullptr,
                   train::World& world = train::single_process_world()) {
  Config c;
  train::Settings settings;
  train::TrainerOptions options;
  options.checkpoint_path = (dir / "mlp.ckpt").string();
  options.csv_path = (dir / "mlp.csv").string();
  CLI::App app;
  cli::add_max_steps_flag(app, c.steps, "--steps", "steps");
  cli::add_setting(app, settings, "--hidden", c.hidden, "width");
  cli::add_setting(app, settings, "--eval-interval", c.eval_interval, "steps between evaluations");
  cli::add_setting(app, settings, "--lr", c.lr, "lr");
  cli::add_setting(app, settings, "--clip", c.clip, "max gradient norm");
  cli::add_setting(app, settings, "--seed", c.seed, "seed");
  cli::add_setting(app, settings, "--name", c.name, "a string setting");
  cli::add_trainer_flags(app, options);
  app.parse(args, false);
  cli::finish_max_steps(app, options, "--steps", c.steps);

  Result result;
  result.status = train::guarded("test", [&] {
    train::Trainer trainer("test", options, settings, world, cli::given(app));
    trainer.options().val_check_interval = c.eval_interval;  // the checkpoint's when resuming
    trainer.options().gradient_clip_val = c.clip;
    trainer.seed_everything(c.seed);
    nn::Sequential<float> model;
    model.push_back(std::make_shared<nn::Linear<float>>(3, c.hidden));
    model.push_back(std::make_shared<nn::Dropout<float>>(0.3));  // draws from the default generator
    model.push_back(std::make_shared<nn::Linear<float>>(c.hidden, 1));
    optim::AdamW<float> optimizer(model.parameters(), optim::AdamWOptions(c.lr));
    optim::CosineAnnealingLR<float> schedule(optimizer, trainer.max_steps());
    if (callback) trainer.add_callback(callback);
    const auto loss = [&](int step) {  // the batch of a step depends on (seed, step) alone
      xgrad::Generator gen(c.seed * 1000 + std::uint64_t(step));
      const auto x = xgrad::randn<float>({8, 3}, gen), y = xgrad::randn<float>({8, 1}, gen);
      return xgrad::mse_loss(model.forward(x), y);
    };
    const auto accuracy = [&] { return double(xgrad::sum(model.parameters()[0]).item()); };  // any metric
    const std::optional<int> stopped = trainer.fit(model, optimizer, &schedule, loss, accuracy);
    result.weights = model.state_dict();
    if (stopped) return *stopped;
    trainer.finish();
    return 0;
  });
  return result;
}

void expect_same_weights(const xgrad::nn::StateDict<float>& a, const xgrad::nn::StateDict<float>& b) {
  ASSERT_EQ(a.keys(), b.keys());
  for (const auto& [key, value] : a) EXPECT_TRUE(value == b.at(key)) << key << " differs";
}

// The CSV without its elapsed-time column.
std::string csv_rows(const fs::path& path) {
  std::istringstream in(read(path));
  std::string line, out;
  while (std::getline(in, line)) out += line.substr(0, line.rfind(',')) + "\n";
  return out;
}

class TrainerRun : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("xgrad_trainer_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "full");
    fs::create_directories(dir_ / "half");
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST(TrainerSettings, ReadBackExactly) {
  int steps = 7;
  double lr = 0.1;
  std::uint64_t seed = 18446744073709551615ULL;
  std::string task = "sort";
  train::Settings settings;
  CLI::App app;
  cli::add_setting(app, settings, "--steps", steps, "");
  cli::add_setting(app, settings, "--lr", lr, "");
  cli::add_setting(app, settings, "--seed", seed, "");
  cli::add_setting(app, settings, "--task", task, "");
  app.parse("--lr 0.3 --task reverse", false);
  const auto values = settings.values();
  const std::vector<std::pair<std::string, std::string>> expected{
      {"steps", "7"}, {"lr", "0.29999999999999999"}, {"seed", "18446744073709551615"}, {"task", "reverse"}};
  EXPECT_EQ(values, expected);  // in the order declared; 17 digits for doubles

  steps = 0, lr = 0, seed = 0, task.clear();
  settings.assign({values.begin(), values.end()});
  EXPECT_EQ(steps, 7);
  EXPECT_EQ(lr, 0.3);  // the same bits
  EXPECT_EQ(seed, 18446744073709551615ULL);
  EXPECT_EQ(task, "reverse");
  EXPECT_THROW(settings.assign({{"steps", "7"}, {"lr", "0.3"}, {"seed", "1"}}), std::out_of_range);
  EXPECT_THROW(settings.assign({{"steps", "x"}, {"lr", "0.3"}, {"seed", "1"}, {"task", "a"}}),
               std::invalid_argument);
}

TEST(TrainerSettings, FlagsReadBackAndAreOffInOlderCheckpoints) {
  int steps = 7;
  bool bf16 = false;
  train::Settings settings;
  CLI::App app;
  cli::add_setting(app, settings, "--steps", steps, "");
  cli::add_bf16_flag(app, settings, bf16);
  app.parse("--bf16", false);
  EXPECT_TRUE(bf16);
  const auto values = settings.values();
  const std::vector<std::pair<std::string, std::string>> expected{{"steps", "7"}, {"bf16", "1"}};
  EXPECT_EQ(values, expected);
  bf16 = false;
  settings.assign({values.begin(), values.end()});
  EXPECT_TRUE(bf16);
  // A checkpoint from before the flag: complete() adds it as off; other settings stay required.
  std::map<std::string, std::string> old{{"steps", "9"}};
  settings.complete(old);
  EXPECT_EQ(old.at("bf16"), "0");
  settings.assign(old);
  EXPECT_FALSE(bf16);
  std::map<std::string, std::string> none;
  settings.complete(none);
  EXPECT_THROW(settings.assign(none), std::out_of_range);
  EXPECT_THROW(settings.assign({{"steps", "7"}, {"bf16", "yes"}}), std::invalid_argument);
  EXPECT_EQ(train::precision_description(false), "float32");
  EXPECT_EQ(train::precision_description(true),
            std::string("bfloat16 autocast, gemm: ") + xgrad::autocast_gemm_path());
}

TEST_F(TrainerRun, StopAndResumeContinuesBitForBit) {
  const Result full = run_program(dir_ / "full", "");
  ASSERT_EQ(full.status, 0);
  const Result half = run_program(dir_ / "half", "--stop-at 6");
  ASSERT_EQ(half.status, 0);
  const Result rest = run_program(dir_ / "half", "--resume " + (dir_ / "half" / "mlp.ckpt").string());
  ASSERT_EQ(rest.status, 0);
  expect_same_weights(full.weights, rest.weights);
  // and not by accident: the stopped run's weights are not the final ones
  EXPECT_FALSE(half.weights.at("0.weight") == full.weights.at("0.weight"));
  EXPECT_EQ(csv_rows(dir_ / "full" / "mlp.csv"), csv_rows(dir_ / "half" / "mlp.csv"));
  EXPECT_EQ(csv_rows(dir_ / "full" / "mlp.csv").substr(0, 28), "step,loss,val_accuracy,lr\n4,");
}

TEST_F(TrainerRun, ResumeTakesTheCheckpointsSettingsAndRefusesOthers) {
  ASSERT_EQ(run_program(dir_ / "half", "--stop-at 4 --hidden 7 --lr 0.02 --name other").status, 0);
  const std::string ckpt = (dir_ / "half" / "mlp.ckpt").string();
  // The settings come from the checkpoint (a model 7 wide loads) and flags that agree are accepted.
  const Result resumed = run_program(dir_ / "half", "--resume " + ckpt + " --lr 0.02 --checkpoint " +
                                                        (dir_ / "half" / "again.ckpt").string());
  EXPECT_EQ(resumed.status, 0);
  EXPECT_EQ(resumed.weights.at("0.weight").shape(0), 7u);
  testing::internal::CaptureStderr();
  EXPECT_EQ(run_program(dir_ / "half", "--resume " + ckpt + " --hidden 5").status, 2);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("--hidden 5 differs from the checkpoint's 7"),
            std::string::npos);

  // A checkpoint without the settings is not this program's.
  xgrad::manual_seed(0);
  nn::Linear<float> other(2, 2);
  optim::SGD<float> sgd(other.parameters(), optim::SGDOptions(0.1));
  xgrad::save_checkpoint((dir_ / "foreign.ckpt").string(), other, sgd, nullptr, xgrad::default_generator(), 3);
  testing::internal::CaptureStderr();
  EXPECT_EQ(run_program(dir_ / "half", "--resume " + (dir_ / "foreign.ckpt").string()).status, 2);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("is not a checkpoint of test"), std::string::npos);
}

TEST(TrainerGuarded, ExitStatus) {
  EXPECT_EQ(train::guarded("p", [] { return 7; }), 7);
  testing::internal::CaptureStderr();
  EXPECT_EQ(train::guarded("p", []() -> int { throw train::Refused("--x must be positive"); }), 2);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "--x must be positive\n");
  testing::internal::CaptureStderr();
  EXPECT_EQ(train::guarded("p", []() -> int { throw std::runtime_error("disk full"); }), 1);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "\np: disk full\n");
}

// The flag checks (xgrad/train/cli.hpp): one short line naming the flag, what was expected
// and what came, where CLI::PositiveNumber printed the whole double range (some 300 digits).
std::string flag_error(const std::string& args) {
  train::TrainerOptions options;
  options.checkpoint_path = "a.ckpt";
  options.csv_path = "a.csv";
  double lr = 1, decay = 0, dropout = 0;
  int heads = 1;
  std::uint64_t seed = 0;
  train::Settings settings;
  CLI::App app;
  cli::add_setting(app, settings, "--seed", seed, "seed");
  app.add_option("--lr", lr)->check(cli::positive());
  app.add_option("--weight-decay", decay)->check(cli::non_negative());
  app.add_option("--dropout", dropout)->check(cli::number_in(0.0, 0.9));
  app.add_option("--heads", heads)->check(cli::integer_in(1, 256));
  cli::add_trainer_flags(app, options);
  try {
    app.parse(args, false);
  } catch (const CLI::ValidationError& e) {
    return e.what();
  }
  return "";
}

TEST(TrainerCli, ErrorsAreShortAndNameTheFlag) {
  EXPECT_EQ(flag_error("--lr abc"), "--lr: expected a positive number, got 'abc'");
  EXPECT_EQ(flag_error("--lr 0"), "--lr: expected a positive number, got '0'");
  EXPECT_EQ(flag_error("--lr -1e-3"), "--lr: expected a positive number, got '-1e-3'");
  EXPECT_EQ(flag_error("--lr nan"), "--lr: expected a positive number, got 'nan'");
  EXPECT_EQ(flag_error("--lr 1e999"), "--lr: expected a positive number, got '1e999'");
  EXPECT_EQ(flag_error("--lr 2e-3 --weight-decay 0"), "");
  EXPECT_EQ(flag_error("--weight-decay -0.5"), "--weight-decay: expected a number >= 0, got '-0.5'");
  EXPECT_EQ(flag_error("--dropout 0.95"), "--dropout: expected a number in [0, 0.9], got '0.95'");
  EXPECT_EQ(flag_error("--heads 0"), "--heads: expected an integer in [1, 256], got '0'");
  EXPECT_EQ(flag_error("--heads 2.5"), "--heads: expected an integer in [1, 256], got '2.5'");
  EXPECT_EQ(flag_error("--heads 99999999999999999999"),
            "--heads: expected an integer in [1, 256], got '99999999999999999999'");
  EXPECT_EQ(flag_error("--stop-at -1"), "--stop-at: expected an integer >= 0, got '-1'");
  EXPECT_EQ(flag_error("--checkpoint-interval 3000000000"),
            "--checkpoint-interval: expected an integer >= 0, got '3000000000'");
}

// A std::uint64_t setting: CLI11 alone took -1 and 2^64 both as 2^64 - 1.
TEST(TrainerCli, UnsignedSettingsAreInRange) {
  const std::string range = "expected an integer in [0, 18446744073709551615]";
  EXPECT_EQ(flag_error("--seed -1"), "--seed: " + range + ", got '-1'");
  EXPECT_EQ(flag_error("--seed 18446744073709551616"), "--seed: " + range + ", got '18446744073709551616'");
  EXPECT_EQ(flag_error("--seed 1e3"), "--seed: " + range + ", got '1e3'");
  EXPECT_EQ(flag_error("--seed 18446744073709551615"), "");
  EXPECT_EQ(flag_error("--seed 0"), "");
  // and in a checkpoint's metadata
  std::uint64_t v = 0;
  EXPECT_THROW(train::parse_setting("-1", v), std::invalid_argument);
  EXPECT_THROW(train::parse_setting("18446744073709551616", v), std::out_of_range);
  train::parse_setting("18446744073709551615", v);
  EXPECT_EQ(v, ~std::uint64_t(0));
}

// The path flags refuse a FIFO (the program would block forever), a device (/dev/zero: read
// without end) and a folder, before anything opens them.
TEST(TrainerCli, PathFlagsRefuseSpecialFiles) {
  const fs::path dir = fs::temp_directory_path() / ("xgrad_trainer_fifo_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string fifo = (dir / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string flag : {"--checkpoint", "--csv", "--save-weights", "--resume"}) {
    EXPECT_EQ(flag_error(flag + " " + fifo),
              flag + ": expected a regular file, got '" + fifo + "', a FIFO (named pipe)");
    EXPECT_EQ(flag_error(flag + " /dev/zero"), flag + ": expected a regular file, got '/dev/zero', a character device");
  }
  EXPECT_EQ(flag_error("--csv " + dir.string()),
            "--csv: expected a regular file, got '" + dir.string() + "', a folder");
  EXPECT_EQ(flag_error("--csv " + (dir / "new.csv").string()), "");  // nothing there yet
  EXPECT_EQ(train::special_file_kind(fifo), "a FIFO (named pipe)");
  EXPECT_EQ(train::special_file_kind((dir / "none").string()), "");
  // The Trainer refuses one too (a program without these flags): its constructor, naming the flag,
  train::Settings settings;
  train::TrainerOptions options;
  options.max_steps = 1;
  options.val_check_interval = 1;
  options.csv_path = fifo;
  try {
    train::Trainer refused("p", options, settings);
    ADD_FAILURE() << "not refused";
  } catch (const train::Refused& e) {
    EXPECT_EQ(std::string(e.what()), "--csv " + fifo + ": it is a FIFO (named pipe), expected a regular file");
  }
  // and its CSV log, for a path set after the constructor.
  options.csv_path.clear();
  train::Trainer trainer("p", options, settings);
  trainer.options().csv_path = fifo;
  xgrad::manual_seed(0);
  nn::Linear<float> model(2, 1);
  optim::SGD<float> sgd(model.parameters(), optim::SGDOptions(0.1));
  try {
    trainer.fit(
        model, sgd, nullptr,
        [&](int) {
          return xgrad::sum(model.forward(xgrad::ones<float>({1, 2})));
        },
        [] { return 0.0; });
    ADD_FAILURE() << "not refused";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), ("cannot write the CSV log " + fifo +
                            ": it is a FIFO (named pipe), not a regular file; expected a regular file path")
                               .c_str());
  }
  fs::remove_all(dir);
}

// --threads 0 is refused, as torch.set_num_threads(0) is (it used to mean "every core" silently).
TEST(TrainerCli, ThreadsMustBePositive) {
  EXPECT_EQ(flag_error("--threads 0"), "--threads: expected an integer in [1, 256], got '0'");
  EXPECT_EQ(flag_error("--threads 2"), "");
}

// Settings need no command-line parser: the core binds variables by key.
TEST(TrainerSettings, WithoutCommandLine) {
  int width = 3;
  bool bf16 = true;
  train::Settings settings;
  settings.add("width", width);
  settings.add_flag("bf16", bf16);
  const std::vector<std::pair<std::string, std::string>> expected{{"width", "3"}, {"bf16", "1"}};
  EXPECT_EQ(settings.values(), expected);
  settings.assign({{"width", "8"}, {"bf16", "0"}});
  EXPECT_EQ(width, 8);
  EXPECT_FALSE(bf16);
}

// Every hook at its documented time: a batch end per step, a validation end per evaluation (with
// the CSV row's numbers), the program's metadata in every checkpoint, a fit end when every step
// is done and not when the run stops early.
TEST_F(TrainerRun, CallbacksAreCalledWhenDocumented) {
  std::vector<int> batch_steps, eval_steps;
  std::vector<double> eval_losses;
  int fit_ends = 0;
  const auto callback = std::make_shared<train::LambdaCallback>();
  callback->train_batch_end = [&](train::Trainer& trainer, int step, double loss) {
    EXPECT_EQ(trainer.global_step(), step);
    EXPECT_TRUE(std::isfinite(loss));
    batch_steps.push_back(step);
  };
  callback->validation_end = [&](train::Trainer&, const train::Metrics& m) {
    eval_steps.push_back(m.step);
    eval_losses.push_back(m.loss);
  };
  callback->save_checkpoint = [&](train::Trainer& trainer, std::map<std::string, std::string>& metadata) {
    metadata["mine"] = std::to_string(trainer.global_step());
  };
  callback->fit_end = [&](train::Trainer&) { ++fit_ends; };

  ASSERT_EQ(run_program(dir_ / "half", "--stop-at 6", callback).status, 0);
  EXPECT_EQ(batch_steps, (std::vector<int>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(eval_steps, (std::vector<int>{4}));
  EXPECT_EQ(fit_ends, 0);  // stopped early
  EXPECT_EQ(xgrad::load_checkpoint<float>((dir_ / "half" / "mlp.ckpt").string()).metadata.at("mine"), "6");

  batch_steps.clear(), eval_steps.clear(), eval_losses.clear();
  ASSERT_EQ(run_program(dir_ / "half", "--resume " + (dir_ / "half" / "mlp.ckpt").string(), callback).status, 0);
  EXPECT_EQ(batch_steps, (std::vector<int>{7, 8, 9, 10, 11, 12}));
  EXPECT_EQ(eval_steps, (std::vector<int>{8, 12}));
  EXPECT_EQ(fit_ends, 1);
  EXPECT_EQ(xgrad::load_checkpoint<float>((dir_ / "half" / "mlp.ckpt").string()).metadata.at("mine"), "12");
  // The callback saw the CSV's losses.
  std::istringstream csv(read(dir_ / "half" / "mlp.csv"));
  std::string line;
  std::getline(csv, line);  // the header
  std::vector<double> csv_losses;
  while (std::getline(csv, line)) csv_losses.push_back(std::stod(line.substr(line.find(',') + 1)));
  ASSERT_EQ(csv_losses.size(), 3u);
  EXPECT_NEAR(csv_losses[1], eval_losses[0], 1e-6 * std::abs(eval_losses[0]));
  EXPECT_NEAR(csv_losses[2], eval_losses[1], 1e-6 * std::abs(eval_losses[1]));
}

// A World of one process that counts the Trainer's collectives.
class CountingWorld : public train::World {
 public:
  void barrier() override { ++barriers; }
  void all_reduce_sum(double* values, std::size_t count) override {
    ++reductions;
    EXPECT_EQ(count, 2u);  // the step's loss and whether this rank was interrupted
    EXPECT_EQ(values[1], 0.0);
  }
  int barriers = 0, reductions = 0;
};

TEST_F(TrainerRun, TheLoopGoesThroughItsWorld) {
  CountingWorld world;
  ASSERT_EQ(run_program(dir_ / "full", "", nullptr, world).status, 0);
  EXPECT_EQ(world.reductions, 12);  // one per step
  EXPECT_EQ(world.barriers, 1);     // after the final checkpoint
  // and the same run as in the default world
  const Result reference = run_program(dir_ / "half", "");
  expect_same_weights(run_program(dir_ / "full", "", nullptr, world).weights, reference.weights);
}

TEST(TrainerWorld, SingleProcessDefaults) {
  train::World& world = train::single_process_world();
  EXPECT_EQ(world.rank(), 0);
  EXPECT_EQ(world.size(), 1);
  EXPECT_TRUE(world.is_main());
  double v[2] = {1.5, 2};
  world.all_reduce_sum(v, 2);
  EXPECT_EQ(v[0], 1.5);
  EXPECT_EQ(world.all_gather_string("a"), std::vector<std::string>{"a"});
  EXPECT_EQ(world.broadcast_string("b"), "b");
  world.abort("not ended", 3);  // returns: the caller prints and exits
}

// Started by mpirun -np 2 (Open MPI's environment) in a world of one: two copies would write the
// same files, so the run is refused.
TEST(TrainerWorld, MpirunWithoutAWorldOfThatSizeIsRefused) {
  ::setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  EXPECT_EQ(train::launched_world_size(), 2);
  train::Settings settings;
  train::TrainerOptions options;
  options.max_steps = 1;
  try {
    train::Trainer trainer("prog", options, settings);
    ADD_FAILURE() << "not refused";
  } catch (const train::Refused& e) {
    EXPECT_NE(std::string(e.what()).find("prog was started by mpirun with 2 processes but trains in a world of 1"),
              std::string::npos)
        << e.what();
  }
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  EXPECT_EQ(train::launched_world_size(), 1);
}

// (val_check_interval 0 is refused by fit(): TrainerOptionsStruct.LightningNamesDefaultsAndChecks in
// test_trainer_run.cpp.)

// ---- the loop's SIGINT handler, gradient_clip_val, callbacks, validation ---------------------

volatile std::sig_atomic_t g_program_sigints = 0;
extern "C" void program_sigint(int) { g_program_sigints = g_program_sigints + 1; }

void expect_sigint_handler(void (*handler)(int), int flags, const char* when) {
  struct sigaction now {};
  ASSERT_EQ(::sigaction(SIGINT, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, handler) << when;
  // (the C library adds flags of its own, SA_RESTORER on Linux)
  EXPECT_EQ(now.sa_flags & (SA_RESTART | SA_RESETHAND | SA_SIGINFO), flags) << when;
}

// fit() installs its own SIGINT handler and gives the program's back when it returns (every step
// done, or stopped by Ctrl-C) and when it throws: the program's next Ctrl-C reaches its handler.
TEST_F(TrainerRun, FitGivesTheProgramsSigintHandlerBack) {
  struct sigaction mine {
  }, before{};
  mine.sa_handler = program_sigint;
  sigemptyset(&mine.sa_mask);
  mine.sa_flags = SA_RESTART;
  ASSERT_EQ(::sigaction(SIGINT, &mine, &before), 0);

  ASSERT_EQ(run_program(dir_ / "full", "").status, 0);
  expect_sigint_handler(program_sigint, SA_RESTART, "after a run to its end");

  const auto interrupt = std::make_shared<train::LambdaCallback>();
  interrupt->train_batch_end = [](train::Trainer&, int step, double) {
    if (step == 3) std::raise(SIGINT);  // Ctrl-C during step 3: the loop's handler
  };
  ASSERT_EQ(run_program(dir_ / "half", "", interrupt).status, 130);
  EXPECT_EQ(g_program_sigints, 0);
  expect_sigint_handler(program_sigint, SA_RESTART, "after a run stopped by Ctrl-C");
  struct sigaction now {};
  ::sigaction(SIGINT, nullptr, &now);
  if (now.sa_handler == program_sigint) {  // (not SIG_DFL, which would end the test program)
    std::raise(SIGINT);
    EXPECT_EQ(g_program_sigints, 1);  // the program's own handler again
  }

  const auto throwing = std::make_shared<train::LambdaCallback>();
  throwing->train_batch_end = [](train::Trainer&, int step, double) {
    if (step == 2) throw std::runtime_error("failed in a callback");
  };
  testing::internal::CaptureStderr();
  EXPECT_EQ(run_program(dir_ / "half", "", throwing).status, 1);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("failed in a callback"), std::string::npos);
  expect_sigint_handler(program_sigint, SA_RESTART, "after fit threw");

  ::sigaction(SIGINT, &before, nullptr);
}

// A small Trainer without files: a Linear then Dropout model, SGD.
struct Small {
  nn::Sequential<float> model;
  optim::SGD<float> sgd;
  train::Settings settings;
  static std::vector<xgrad::Tensor<float>> build(nn::Sequential<float>& m) {
    xgrad::manual_seed(5);
    m.push_back(std::make_shared<nn::Linear<float>>(3, 4));
    m.push_back(std::make_shared<nn::Dropout<float>>(0.5));
    return m.parameters();
  }
  Small() : sgd(build(model), optim::SGDOptions(0.1)) {}
  // No checkpoint, no CSV.
  static train::TrainerOptions options(int max_steps, int val_check_interval, double gradient_clip_val = 0) {
    train::TrainerOptions o;
    o.max_steps = max_steps;
    o.val_check_interval = val_check_interval;
    o.gradient_clip_val = gradient_clip_val;
    return o;
  }
  std::optional<int> fit(train::Trainer& trainer, const std::function<xgrad::Tensor<float>(int)>& training_step,
                         const std::function<double()>& validation_step) {
    return trainer.fit(model, sgd, nullptr, training_step, validation_step);
  }
  xgrad::Tensor<float> loss(int step) {
    xgrad::Generator gen(std::uint64_t(step) + 1);
    return xgrad::sum(model.forward(xgrad::randn<float>({2, 3}, gen)));
  }
  bool every_module_training(bool on) {
    for (const auto& [name, m] : model.named_modules())
      if (m->is_training() != on) return false;
    return true;
  }
};

TEST(TrainerOptions, GradientClipValMustBeANumberAtLeastZero) {
  for (double bad : {std::nan(""), -1.0, -1e-9}) {
    Small s;
    train::Trainer trainer("p", Small::options(2, 1, bad), s.settings);
    try {
      s.fit(
          trainer, [&](int step) { return s.loss(step); }, [] { return 0.0; });
      ADD_FAILURE() << "gradient_clip_val " << bad << " not refused";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("Trainer: expected gradient_clip_val >= 0 (0: no clipping, infinity: the "
                                           "gradient norm measured without clipping, as clip_grad_norm_), got "),
                std::string::npos)
          << e.what();
    }
  }
  // infinity measures the norm and clips nothing: the same weights as no clipping; 1e-3 clips.
  std::vector<xgrad::nn::StateDict<float>> weights;
  for (double clip : {0.0, std::numeric_limits<double>::infinity(), 1e-3}) {
    Small s;
    train::Trainer trainer("p", Small::options(3, 3, clip), s.settings);
    ASSERT_FALSE(s.fit(
        trainer, [&](int step) { return s.loss(step); }, [] { return 0.0; }));
    weights.push_back(s.model.state_dict());
  }
  expect_same_weights(weights[0], weights[1]);
  EXPECT_FALSE(weights[0].at("0.weight") == weights[2].at("0.weight"));
}

TEST(TrainerFit, AnUndefinedLossIsRefusedNamingTheStep) {
  Small s;
  train::Trainer trainer("p", Small::options(4, 2), s.settings);
  try {
    s.fit(
        trainer, [&](int step) { return step == 2 ? xgrad::Tensor<float>() : s.loss(step); }, [] { return 0.0; });
    ADD_FAILURE() << "not refused";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "Trainer::fit: training_step(2) returned an undefined tensor: expected the loss of the "
                 "step's batch (a scalar with a graph)");
  }
}

// Lightning's validation loop: eval mode and no graph during validation_step, every module back in
// training mode for the next step even when validation_step calls eval() itself or throws.
TEST(TrainerFit, ValidationRunsInEvalModeWithoutGradAndGivesTheModesBack) {
  Small s;
  train::Trainer trainer("p", Small::options(6, 2), s.settings);
  std::vector<int> training_steps_in_train_mode;
  int validations = 0;
  ASSERT_FALSE(s.fit(
      trainer,
      [&](int step) {
        if (s.every_module_training(true) && xgrad::is_grad_enabled()) training_steps_in_train_mode.push_back(step);
        return s.loss(step);
      },
      [&] {
        EXPECT_TRUE(s.every_module_training(false));
        EXPECT_FALSE(xgrad::is_grad_enabled());
        EXPECT_FALSE(s.loss(0).requires_grad());  // no graph is built
        ++validations;
        s.model.eval();  // as a Lightning user's validation step may
        return 0.5;
      }));
  EXPECT_EQ(validations, 3);
  EXPECT_EQ(training_steps_in_train_mode, (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_TRUE(xgrad::is_grad_enabled());

  // A validation that throws: the modes and grad mode are given back all the same.
  Small t;
  train::Trainer again("p", Small::options(4, 2), t.settings);
  EXPECT_THROW(t.fit(
                   again, [&](int step) { return t.loss(step); },
                   []() -> double { throw std::runtime_error("validation failed"); }),
               std::runtime_error);
  EXPECT_TRUE(t.every_module_training(true));
  EXPECT_TRUE(xgrad::is_grad_enabled());
}

// The run's settings and the loop's state in a checkpoint are the Trainer's: a callback that
// changes, removes or adds one is refused naming the key, and no checkpoint is written.
TEST_F(TrainerRun, CallbacksCannotOverwriteTheRunsSettings) {
  const std::vector<std::pair<std::string, std::function<void(std::map<std::string, std::string>&)>>> cases{
      {"changed the metadata key 'config.lr' from '0.01' to '1'", [](auto& m) { m["config.lr"] = "1"; }},
      {"removed the metadata key 'loss_sum'", [](auto& m) { m.erase("loss_sum"); }},
      {"added the metadata key 'config.extra'", [](auto& m) { m["config.extra"] = "1"; }},
      {"added the metadata key 'world_size'", [](auto& m) { m["world_size"] = "2"; }},
      {"changed the metadata key 'max_steps' from '12' to '20'", [](auto& m) { m["max_steps"] = "20"; }},
  };
  for (const auto& [expected, change] : cases) {
    const auto callback = std::make_shared<train::LambdaCallback>();
    callback->save_checkpoint = [change = change](train::Trainer&, std::map<std::string, std::string>& m) {
      m["mine"] = "allowed";
      change(m);
    };
    testing::internal::CaptureStderr();
    EXPECT_EQ(run_program(dir_ / "full", "", callback).status, 1);
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("Trainer: a callback's on_save_checkpoint " + expected +
                       " (the run's settings, config.*, and the loop's state are the Trainer's and read-only; store "
                       "the program's own state under a key of its own)"),
              std::string::npos)
        << err;
    EXPECT_FALSE(fs::exists(dir_ / "full" / "mlp.ckpt"));
  }
}

}  // namespace
