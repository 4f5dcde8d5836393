// examples/support/training.hpp, the examples' training plumbing, on a task it was not written
// for (a small MLP with dropout regressing random data): settings read back exactly, a run
// stopped with --stop-at and resumed ends with the same weights, bit for bit, and the same CSV as
// an uninterrupted one, and contradicting or foreign checkpoints are refused.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <xgrad/backend/bf16.hpp>
#include <xgrad/backend/gemm.hpp>

#include "support/training.hpp"

namespace {

namespace nn = xgrad::nn;
namespace optim = xgrad::optim;
namespace fs = std::filesystem;

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

// A whole training program on the library, run with the command line `args` in `dir`.
Result run_program(const fs::path& dir, const std::string& args) {
  Config c;
  training::Settings settings;
  training::RunOptions run((dir / "mlp.ckpt").string(), (dir / "mlp.csv").string(), "");
  CLI::App app;
  settings.add(app, "--steps", c.steps, "steps");
  settings.add(app, "--hidden", c.hidden, "width");
  settings.add(app, "--eval-interval", c.eval_interval, "steps between evaluations");
  settings.add(app, "--lr", c.lr, "lr");
  settings.add(app, "--clip", c.clip, "max gradient norm");
  settings.add(app, "--seed", c.seed, "seed");
  settings.add(app, "--name", c.name, "a string setting");
  training::add_run_flags(app, run);
  app.parse(args, false);

  Result result;
  result.status = training::guarded("test", [&] {
    training::Resumed resumed = training::prepare("test", run, settings, app);
    xgrad::manual_seed(c.seed);
    nn::Sequential<float> model;
    model.push_back(std::make_shared<nn::Linear<float>>(3, c.hidden));
    model.push_back(std::make_shared<nn::Dropout<float>>(0.3));  // draws from the default generator
    model.push_back(std::make_shared<nn::Linear<float>>(c.hidden, 1));
    optim::AdamW<float> optimizer(model.parameters(), optim::AdamWOptions(c.lr));
    optim::CosineAnnealingLR<float> schedule(optimizer, c.steps);
    training::Trainer trainer("test", run, settings, std::move(resumed), model, optimizer, &schedule,
                              {c.steps, c.eval_interval, c.clip});
    const auto loss = [&](int step) {  // the batch of a step depends on (seed, step) alone
      xgrad::Generator gen(c.seed * 1000 + std::uint64_t(step));
      const auto x = xgrad::randn<float>({8, 3}, gen), y = xgrad::randn<float>({8, 1}, gen);
      return xgrad::mse_loss(model.forward(x), y);
    };
    const auto accuracy = [&] { return double(xgrad::sum(model.parameters()[0]).item()); };  // any metric
    const std::optional<int> stopped = trainer.train(loss, accuracy);
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

class TrainingSupport : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("xgrad_training_support_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "full");
    fs::create_directories(dir_ / "half");
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST(TrainingSettings, ReadBackExactly) {
  int steps = 7;
  double lr = 0.1;
  std::uint64_t seed = 18446744073709551615ULL;
  std::string task = "sort";
  training::Settings settings;
  CLI::App app;
  settings.add(app, "--steps", steps, "");
  settings.add(app, "--lr", lr, "");
  settings.add(app, "--seed", seed, "");
  settings.add(app, "--task", task, "");
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

TEST(TrainingSettings, FlagsReadBackAndAreOffInOlderCheckpoints) {
  int steps = 7;
  bool bf16 = false;
  training::Settings settings;
  CLI::App app;
  settings.add(app, "--steps", steps, "");
  training::add_bf16_flag(app, settings, bf16);
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
  EXPECT_EQ(training::precision_description(false), "float32");
  EXPECT_EQ(training::precision_description(true),
            std::string("bfloat16 autocast, gemm: ") + xgrad::detail::bf16_gemm_path());
}

TEST_F(TrainingSupport, StopAndResumeContinuesBitForBit) {
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

TEST_F(TrainingSupport, ResumeTakesTheCheckpointsSettingsAndRefusesOthers) {
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

TEST(TrainingGuarded, ExitStatus) {
  EXPECT_EQ(training::guarded("p", [] { return 7; }), 7);
  testing::internal::CaptureStderr();
  EXPECT_EQ(training::guarded("p", []() -> int { throw training::Refused("--x must be positive"); }), 2);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "--x must be positive\n");
  testing::internal::CaptureStderr();
  EXPECT_EQ(training::guarded("p", []() -> int { throw std::runtime_error("disk full"); }), 1);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "\np: disk full\n");
}

// The flag checks (examples/support/flags.hpp): one short line naming the flag, what was expected
// and what came, where CLI::PositiveNumber printed the whole double range (some 300 digits).
std::string flag_error(const std::string& args) {
  training::RunOptions run("a.ckpt", "a.csv", "");
  double lr = 1, decay = 0, dropout = 0;
  int heads = 1;
  CLI::App app;
  app.add_option("--lr", lr)->check(flags::positive());
  app.add_option("--weight-decay", decay)->check(flags::non_negative());
  app.add_option("--dropout", dropout)->check(flags::number_in(0.0, 0.9));
  app.add_option("--heads", heads)->check(flags::integer_in(1, 256));
  training::add_run_flags(app, run);
  try {
    app.parse(args, false);
  } catch (const CLI::ValidationError& e) {
    return e.what();
  }
  return "";
}

TEST(TrainingFlags, ErrorsAreShortAndNameTheFlag) {
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
TEST(TrainingFlags, ThreadsMustBePositive) {
  EXPECT_EQ(flag_error("--threads 0"), "--threads: expected an integer in [1, 256], got '0'");
  EXPECT_EQ(flag_error("--threads 2"), "");
}

}  // namespace
