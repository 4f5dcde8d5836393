// The Trainer that owns the run: one TrainerOptions with Lightning's names, resuming
// from ckpt_path with the checkpoint's settings, extending a run with a larger max_steps (the
// learning-rate schedule continued as that of a run planned that long, the warmup the planned
// run's), resuming a finished run without training or rewriting anything, output paths checked
// before training (the error naming the flag), the metric's name in the CSV header, and no
// metric shown before the first evaluation.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <xgrad/train/cli.hpp>
#include <xgrad/train/data_parallel.hpp>
#include <xgrad/train/trainer.hpp>
#include <xgrad/xgrad.hpp>

namespace {

namespace nn = xgrad::nn;
namespace optim = xgrad::optim;
namespace fs = std::filesystem;
namespace train = xgrad::train;
namespace cli = xgrad::train::cli;

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The CSV without its elapsed-time column.
std::string csv_rows(const fs::path& path) {
  std::istringstream in(read(path));
  std::string line, out;
  while (std::getline(in, line)) out += line.substr(0, line.rfind(',')) + "\n";
  return out;
}

// The schedule of the programs: a linear warmup of min(3, planned - 1) steps from lr / 10, then
// cosine down to 0 at max_steps (SequentialLR), as the examples build it.
std::unique_ptr<optim::SequentialLR<float>> make_schedule(optim::Optimizer<float>& optimizer, int max_steps,
                                                          int planned) {
  const int warmup = std::min(3, planned - 1);
  std::vector<std::shared_ptr<optim::LRScheduler<float>>> phases{
      std::make_shared<optim::LinearLR<float>>(optimizer, 0.1, 1.0, warmup),
      std::make_shared<optim::CosineAnnealingLR<float>>(optimizer, std::max(1, max_steps - warmup))};
  return std::make_unique<optim::SequentialLR<float>>(optimizer, phases, std::vector<int>{warmup});
}

struct Outcome {
  int status = -1;
  nn::StateDict<float> weights;
  std::vector<double> lrs;  // the lr after each step of this run
  int first_step = -1, max_steps = -1, planned = -1;
};

// A training program on the Trainer that owns the run, with the command line `args`, in `dir`.
Outcome run_program(const fs::path& dir, const std::string& args) {
  int hidden = 5, steps = 12;
  std::uint64_t seed = 3;
  train::Settings settings;
  train::TrainerOptions options;
  options.val_check_interval = 4;
  options.gradient_clip_val = 0.5;
  options.checkpoint_path = "mlp.ckpt";
  options.csv_path = "mlp.csv";
  options.default_root_dir = dir.string();
  options.metric = train::ValidationMetric::loss("val_loss");
  CLI::App app;
  cli::add_setting(app, settings, "--hidden", hidden, "width");
  cli::add_setting(app, settings, "--seed", seed, "seed");
  cli::add_max_steps_flag(app, steps, "--steps", "steps");
  cli::add_trainer_flags(app, options);
  app.parse(args, false);
  cli::finish_max_steps(app, options, "--steps", steps);

  Outcome out;
  out.status = train::guarded("test", [&] {
    train::Trainer trainer("test", options, settings, train::single_process_world(), cli::given(app));
    out.max_steps = trainer.max_steps();
    out.planned = trainer.planned_steps();
    trainer.seed_everything(seed);
    nn::Sequential<float> model;
    model.push_back(std::make_shared<nn::Linear<float>>(3, hidden));
    model.push_back(std::make_shared<nn::Dropout<float>>(0.3));  // draws from the default generator
    model.push_back(std::make_shared<nn::Linear<float>>(hidden, 1));
    optim::AdamW<float> optimizer(model.parameters(), optim::AdamWOptions(0.01));
    const auto schedule = make_schedule(optimizer, trainer.max_steps(), trainer.planned_steps());
    const auto record = std::make_shared<train::LambdaCallback>();
    record->train_batch_end = [&](train::Trainer&, int, double) {
      out.lrs.push_back(optimizer.param_groups()[0].options().get_lr());
    };
    trainer.add_callback(record);
    out.first_step = trainer.first_step();
    const auto loss = [&](int step) {  // the batch of a step depends on (seed, step) alone
      xgrad::Generator gen(seed * 1000 + std::uint64_t(step));
      const auto x = xgrad::randn<float>({8, 3}, gen), y = xgrad::randn<float>({8, 1}, gen);
      return xgrad::mse_loss(model.forward(x), y);
    };
    const auto val_loss = [&] {
      xgrad::Generator gen(77);
      const auto x = xgrad::randn<float>({16, 3}, gen), y = xgrad::randn<float>({16, 1}, gen);
      return double(xgrad::mse_loss(model.forward(x), y).item());
    };
    const std::optional<int> stopped = trainer.fit(model, optimizer, schedule.get(), loss, val_loss);
    out.weights = model.state_dict();
    if (stopped) return *stopped;
    trainer.finish();
    return 0;
  });
  return out;
}

void expect_same_weights(const nn::StateDict<float>& a, const nn::StateDict<float>& b) {
  ASSERT_EQ(a.keys(), b.keys());
  for (const auto& [key, value] : a) EXPECT_TRUE(value == b.at(key)) << key << " differs";
}

class TrainerOwnsTheRun : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("xgrad_trainer_run_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string ckpt(const char* run) const { return (dir_ / run / "mlp.ckpt").string(); }
  fs::path dir_;
};

TEST_F(TrainerOwnsTheRun, StopAndResumeContinuesBitForBitWithTheMetricsName) {
  const Outcome full = run_program(dir_ / "full", "");  // default_root_dir is created
  ASSERT_EQ(full.status, 0);
  EXPECT_EQ(full.planned, 12);
  const Outcome half = run_program(dir_ / "half", "--stop-at 6");
  ASSERT_EQ(half.status, 0);
  const Outcome rest = run_program(dir_ / "half", "--resume " + ckpt("half"));  // max_steps: the checkpoint's
  ASSERT_EQ(rest.status, 0);
  EXPECT_EQ(rest.first_step, 6);
  EXPECT_EQ(rest.max_steps, 12);
  expect_same_weights(full.weights, rest.weights);
  EXPECT_FALSE(half.weights.at("0.weight") == full.weights.at("0.weight"));
  EXPECT_EQ(csv_rows(dir_ / "full" / "mlp.csv"), csv_rows(dir_ / "half" / "mlp.csv"));
  EXPECT_EQ(csv_rows(dir_ / "full" / "mlp.csv").substr(0, 24), "step,loss,val_loss,lr\n4,");
  // A setting given on the command line must agree with the checkpoint's.
  EXPECT_EQ(run_program(dir_ / "half", "--hidden 6 --resume " + ckpt("half")).status, 2);
}

// A larger max_steps extends a run: the lr after each new step is that of a run planned for the
// new count from the start (the warmup stays the planned run's), not the old cosine's tail.
TEST_F(TrainerOwnsTheRun, ALargerMaxStepsExtendsTheRunAndContinuesTheSchedule) {
  ASSERT_EQ(run_program(dir_ / "a", "--steps 12").status, 0);
  const Outcome more = run_program(dir_ / "a", "--steps 20 --resume " + ckpt("a"));
  ASSERT_EQ(more.status, 0);
  EXPECT_EQ(more.first_step, 12);
  EXPECT_EQ(more.max_steps, 20);
  EXPECT_EQ(more.planned, 12);
  ASSERT_EQ(more.lrs.size(), 8u);
  // The expected lrs: a fresh schedule for 20 steps with the 12-step run's warmup.
  nn::Linear<float> probe(1, 1);
  optim::AdamW<float> optimizer(probe.parameters(), optim::AdamWOptions(0.01));
  const auto schedule = make_schedule(optimizer, 20, 12);
  std::vector<double> expected;
  for (int step = 1; step <= 20; ++step) {
    schedule->step();
    if (step > 12) expected.push_back(optimizer.param_groups()[0].options().get_lr());
  }
  for (std::size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(more.lrs[i], expected[i], 1e-12) << "step " << 13 + i;
  EXPECT_GT(more.lrs.front(), 1e-4);  // the cosine of the 12-step run reached 0 at step 12
  // Resumed again without --steps: the extended count, the warmup still the first run's.
  const Outcome again = run_program(dir_ / "a", "--resume " + ckpt("a"));
  EXPECT_EQ(again.status, 0);
  EXPECT_EQ(again.max_steps, 20);
  EXPECT_EQ(again.planned, 12);
  // Fewer steps than the checkpoint's: refused before anything is built.
  EXPECT_EQ(run_program(dir_ / "a", "--steps 5 --resume " + ckpt("a")).status, 2);
}

// Resuming a finished run with no more steps (to export it, or sample from it) trains nothing and
// rewrites neither the checkpoint nor the CSV.
TEST_F(TrainerOwnsTheRun, ResumingAFinishedRunTrainsNothingAndRewritesNothing) {
  const Outcome full = run_program(dir_ / "done", "");
  ASSERT_EQ(full.status, 0);
  const std::string checkpoint = read(ckpt("done")), csv = read(dir_ / "done" / "mlp.csv");
  const auto written = fs::last_write_time(ckpt("done"));
  const Outcome again = run_program(dir_ / "done", "--resume " + ckpt("done"));
  ASSERT_EQ(again.status, 0);
  EXPECT_TRUE(again.lrs.empty());  // no step
  expect_same_weights(full.weights, again.weights);
  EXPECT_EQ(read(ckpt("done")), checkpoint);
  EXPECT_EQ(fs::last_write_time(ckpt("done")), written);
  EXPECT_EQ(read(dir_ / "done" / "mlp.csv"), csv);
}

// Every output path is checked when the Trainer is built, before the model is, and the error
// names the flag.
TEST_F(TrainerOwnsTheRun, OutputPathsAreCheckedBeforeTrainingNamingTheFlag) {
  fs::create_directories(dir_ / "x");
  train::Settings settings;
  const auto refusal = [&](train::TrainerOptions options) -> std::string {
    options.max_steps = 5;
    try {
      train::Trainer trainer("p", options, settings);
    } catch (const train::Refused& e) {
      return e.what();
    }
    return "not refused";
  };
  train::TrainerOptions o;
  o.checkpoint_path = (dir_ / "missing" / "a.ckpt").string();
  EXPECT_EQ(refusal(o),
            "--checkpoint " + o.checkpoint_path + ": the folder " + (dir_ / "missing").string() + " does not exist");
  o = {};
  o.csv_path = (dir_ / "x").string();
  EXPECT_EQ(refusal(o), "--csv " + o.csv_path + ": is a folder, expected a file name");
  o = {};
  o.weights_path = "/dev/null";
  EXPECT_EQ(refusal(o), "--save-weights /dev/null: it is a character device, expected a regular file");
  o = {};
  o.checkpoint_path = "/dev/null";
  o.enable_checkpointing = false;  // no checkpoint: nothing to check
  EXPECT_EQ(refusal(o), "not refused");
  EXPECT_THROW(train::check_output_folder("--save-hf", "/dev/null"), train::Refused);
  EXPECT_NO_THROW(train::check_output_folder("--save-hf", (dir_ / "new" / "deeper").string()));
}

TEST(TrainerOptionsStruct, LightningNamesDefaultsAndChecks) {
  const train::TrainerOptions o;
  EXPECT_EQ(o.max_steps, -1);
  EXPECT_EQ(o.val_check_interval, 50);
  EXPECT_EQ(o.gradient_clip_val, 0);
  EXPECT_EQ(o.metric.column, "val_accuracy");
  EXPECT_TRUE(o.enable_checkpointing);
  EXPECT_TRUE(o.enable_progress_bar);
  EXPECT_EQ(o.checkpoint_every_n_steps, 250);
  EXPECT_EQ(o.log_every_n_steps, 0);
  EXPECT_EQ(o.num_threads, 1);
  train::Settings settings;
  // max_steps -1 is the checkpoint's count: without a checkpoint, refused.
  EXPECT_THROW(train::Trainer("p", o, settings), std::invalid_argument);
  train::TrainerOptions bad;
  bad.max_steps = 3;
  bad.val_check_interval = 0;
  train::Trainer trainer("p", bad, settings);
  nn::Linear<float> model(2, 1);
  optim::SGD<float> sgd(model.parameters(), optim::SGDOptions(0.1));
  const auto loss = [&](int) { return xgrad::sum(model.forward(xgrad::ones<float>({1, 2}))); };
  try {
    trainer.fit(model, sgd, nullptr, loss, [] { return 0.0; });
    ADD_FAILURE() << "not refused";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "Trainer: expected val_check_interval >= 1, got 0");
  }
  trainer.options().val_check_interval = 1;  // a loop option may be set after the constructor
  EXPECT_FALSE(trainer.fit(model, sgd, nullptr, loss, [] { return 0.0; }).has_value());
  EXPECT_THROW(trainer.fit(model, sgd, nullptr, loss, [] { return 0.0; }), std::logic_error);  // one fit
  train::Trainer second("p", bad, settings);
  second.options().val_check_interval = 2;
  second.options().csv_path.clear();
  EXPECT_FALSE(second.fit(model, sgd, nullptr, loss, [] { return 0.0; }).has_value());
  EXPECT_EQ(second.global_step(), 3);
}

// Before the first evaluation the progress line shows no metric ("-"), not "0.00%".
TEST(TrainerProgress, NoMetricIsShownBeforeTheFirstEvaluation) {
  const train::ValidationMetric accuracy;
  EXPECT_EQ(accuracy.describe_pending(), "held-out accuracy       -");
  EXPECT_EQ(accuracy.describe(0.5), "held-out accuracy  50.00%");
  EXPECT_EQ(train::ValidationMetric::loss("val_loss", "nats/token").describe(1.5), "held-out 1.5000 nats/token");
  EXPECT_EQ(train::ValidationMetric::loss().describe_pending(), "val_loss -");

  train::Settings settings;
  train::TrainerOptions o;
  o.max_steps = 4;
  o.val_check_interval = 4;
  o.log_every_n_steps = 1;  // a line per step on a pipe
  train::Trainer trainer("p", o, settings);
  xgrad::manual_seed(0);
  nn::Linear<float> model(2, 1);
  optim::SGD<float> sgd(model.parameters(), optim::SGDOptions(0.1));
  testing::internal::CaptureStdout();
  trainer.fit(
      model, sgd, nullptr,
      [&](int) {
        return xgrad::sum(model.forward(xgrad::ones<float>({1, 2})));
      },
      [] { return 0.75; });
  const std::string printed = testing::internal::GetCapturedStdout();
  const std::string first = printed.substr(0, printed.find('\n'));
  EXPECT_NE(first.find("step 1/4"), std::string::npos) << printed;
  EXPECT_NE(first.find("held-out accuracy       -"), std::string::npos) << first;
  EXPECT_EQ(printed.find("0.00%"), std::string::npos) << printed;
  EXPECT_NE(printed.find("step 4/4 | loss"), std::string::npos) << printed;
  EXPECT_NE(printed.find("held-out accuracy  75.00%"), std::string::npos) << printed;
}

// Outside mpirun (and in a build of this test without MPI), launched_world() is one process and
// DataParallel calls the module's own forward.
TEST(TrainerDataParallel, OneProcessIsTheModuleItself) {
  const std::unique_ptr<train::World> world = train::launched_world();
  EXPECT_EQ(world->size(), 1);
  EXPECT_TRUE(world->is_main());
  xgrad::manual_seed(0);
  const auto model = std::make_shared<nn::Linear<float>>(3, 2);
  const train::DataParallel<nn::Linear<float>> forward(model, *world);
  const auto x = xgrad::ones<float>({4, 3});
  EXPECT_TRUE(forward(x).value() == model->forward(x).value());
  EXPECT_EQ(&forward.module(), model.get());
}

}  // namespace
