// xgrad::train (the Trainer, Settings, World, and the CLI11 flags of xgrad/train/cli.hpp) on a
// small MLP with dropout regressing random data: settings read back exactly, a run stopped with
// --stop-at and resumed ends with the same weights, bit for bit, and the same CSV as an
// uninterrupted one, contradicting or foreign checkpoints are refused, the callbacks are called
// when documented and the loop goes through its World's collectives.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
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
// `callback`, when given, is added to its Trainer, and `world` is its World.
Result run_program(const fs::path& dir, const std::string& args, std::shared_ptr<train::Callback> callback = nullptr,
                   train::World& world = train::single_process_world()) {
  Config c;
  train::Settings settings;
  train::RunOptions run((dir / "mlp.ckpt").string(), (dir / "mlp.csv").string());
  CLI::App app;
  cli::add_setting(app, settings, "--steps", c.steps, "steps");
  cli::add_setting(app, settings, "--hidden", c.hidden, "width");
  cli::add_setting(app, settings, "--eval-interval", c.eval_interval, "steps between evaluations");
  cli::add_setting(app, settings, "--lr", c.lr, "lr");
  cli::add_setting(app, settings, "--clip", c.clip, "max gradient norm");
  cli::add_setting(app, settings, "--seed", c.seed, "seed");
  cli::add_setting(app, settings, "--name", c.name, "a string setting");
  cli::add_run_flags(app, run);
  app.parse(args, false);

  Result result;
  result.status = train::guarded("test", [&] {
    train::Resumed resumed = train::prepare_run("test", run, settings, world, cli::given(app));
    xgrad::manual_seed(c.seed);
    nn::Sequential<float> model;
    model.push_back(std::make_shared<nn::Linear<float>>(3, c.hidden));
    model.push_back(std::make_shared<nn::Dropout<float>>(0.3));  // draws from the default generator
    model.push_back(std::make_shared<nn::Linear<float>>(c.hidden, 1));
    optim::AdamW<float> optimizer(model.parameters(), optim::AdamWOptions(c.lr));
    optim::CosineAnnealingLR<float> schedule(optimizer, c.steps);
    train::Trainer trainer("test", run, settings, std::move(resumed), model, optimizer, &schedule,
                           {c.steps, c.eval_interval, c.clip}, world);
    if (callback) trainer.add_callback(callback);
    const auto loss = [&](int step) {  // the batch of a step depends on (seed, step) alone
      xgrad::Generator gen(c.seed * 1000 + std::uint64_t(step));
      const auto x = xgrad::randn<float>({8, 3}, gen), y = xgrad::randn<float>({8, 1}, gen);
      return xgrad::mse_loss(model.forward(x), y);
    };
    const auto accuracy = [&] { return double(xgrad::sum(model.parameters()[0]).item()); };  // any metric
    const std::optional<int> stopped = trainer.fit(loss, accuracy);
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
  EXPECT_EQ(csv_rows(dir_ / "full" / "mlp.csv").substr(0, 24), "step,loss,accuracy,lr\n4,");
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
  train::RunOptions run("a.ckpt", "a.csv");
  double lr = 1, decay = 0, dropout = 0;
  int heads = 1;
  CLI::App app;
  app.add_option("--lr", lr)->check(cli::positive());
  app.add_option("--weight-decay", decay)->check(cli::non_negative());
  app.add_option("--dropout", dropout)->check(cli::number_in(0.0, 0.9));
  app.add_option("--heads", heads)->check(cli::integer_in(1, 256));
  cli::add_run_flags(app, run);
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
  train::RunOptions run;
  try {
    train::prepare_run("prog", run, settings);
    ADD_FAILURE() << "not refused";
  } catch (const train::Refused& e) {
    EXPECT_NE(std::string(e.what()).find("prog was started by mpirun with 2 processes but trains in a world of 1"),
              std::string::npos)
        << e.what();
  }
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  EXPECT_EQ(train::launched_world_size(), 1);
}

TEST(TrainerOptions, AreChecked) {
  xgrad::manual_seed(0);
  nn::Linear<float> model(2, 2);
  optim::SGD<float> sgd(model.parameters(), optim::SGDOptions(0.1));
  train::Settings settings;
  train::RunOptions run;
  try {
    train::Trainer trainer("p", run, settings, {}, model, sgd, nullptr, {10, 0});
    ADD_FAILURE() << "not refused";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "Trainer: expected val_check_interval >= 1, got 0");
  }
}

}  // namespace
