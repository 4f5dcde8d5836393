// Resuming from a forged or damaged checkpoint (the input layer, docs/reliability.md "Input rule"):
// every metadata value is range-checked into its C++ type and a refusal names the file and the
// key -- a step of 2^40 no longer resumes at 0, a step of -5 no longer trains negative steps,
// loss_count "1e99" no longer reads as 1, and a bad max_steps is no bare std::stoi error.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <xgrad/train/progress.hpp>
#include <xgrad/train/trainer.hpp>
#include <xgrad/xgrad.hpp>

#include "hostile_input.hpp"

namespace {

namespace train = xgrad::train;
namespace fs = std::filesystem;
using Metadata = std::map<std::string, std::string>;

class ResumeHostile : public ::testing::Test {
 protected:
  void SetUp() override {
    char name[] = "/tmp/xgrad-resume-XXXXXX";
    ASSERT_NE(::mkdtemp(name), nullptr);
    dir_ = name;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // What the Trainer's checkpoints hold for a run of one setting, "lr".
  static Metadata good() {
    return {{"config.lr", "0.1"},   {"loss_sum", "0x1.8p+1"}, {"loss_count", "2"},
            {"accuracy", "0x0p+0"}, {"elapsed", "0x1p+0"},    {"max_steps", "10"}};
  }

  // A checkpoint at `step` with `metadata`.
  std::string checkpoint(std::int64_t step, const Metadata& metadata) {
    xgrad::manual_seed(0);
    xgrad::nn::Linear<float> model(2, 2);
    xgrad::optim::SGD<float> sgd(model.parameters(), xgrad::optim::SGDOptions(0.1));
    const std::string path = (dir_ / "run.ckpt").string();
    xgrad::save_checkpoint(path, model, sgd, nullptr, xgrad::default_generator(), step, metadata);
    return path;
  }

  // The Trainer resuming from `path`: its state, or the refusal.
  std::string resume(const std::string& path, int* step = nullptr) {
    double lr = 0;
    train::Settings settings;
    settings.add("lr", lr);
    train::TrainerOptions o;
    o.ckpt_path = path;
    o.enable_checkpointing = false;
    o.enable_progress_bar = false;
    const std::string message = xgrad::testing::escape_of([&] {
      const train::Trainer trainer("test", o, settings);
      if (step) *step = trainer.options().max_steps;
    });
    return message;
  }

  fs::path dir_;
};

TEST_F(ResumeHostile, AValidCheckpointResumes) {
  int max_steps = 0;
  EXPECT_EQ(resume(checkpoint(4, good()), &max_steps), "");
  EXPECT_EQ(max_steps, 10);
}

TEST_F(ResumeHostile, AForgedStepIsRefusedNamingIt) {
  for (const std::int64_t step : {std::int64_t(1) << 40, std::int64_t(-5), std::int64_t(1) << 31}) {
    const std::string path = checkpoint(step, good());
    EXPECT_EQ(resume(path),
              "cannot resume: " + path + ": step: expected an integer in [0, 2147483647], got " + std::to_string(step));
  }
}

TEST_F(ResumeHostile, ForgedMetadataNumbersAreRefusedNamingTheKey) {
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"loss_count", "1e99", "expected an integer in [0, 2147483647], got '1e99'"},
      {"loss_count", "-1", "expected an integer in [0, 2147483647], got '-1'"},
      {"max_steps", "abc", "expected an integer in [0, 2147483647], got 'abc'"},
      {"max_steps", "99999999999", "expected an integer in [0, 2147483647], got '99999999999'"},
      {"planned_steps", "x", "expected an integer in [0, 2147483647], got 'x'"},
      {"planned_steps", "12 ", "expected an integer in [0, 2147483647], got '12 '"},
      {"loss_sum", "0x1p+9999", "expected a number in [-inf, inf] or nan, got '0x1p+9999'"},
      {"elapsed", "-1", "expected a number in [0, 1.79769e+308], got '-1'"},
      {"accuracy", "", "expected a number in [-inf, inf] or nan, got ''"},
  };
  for (const auto& [key, value, expected] : cases) {
    Metadata m = good();
    m[key] = value;
    const std::string path = checkpoint(4, m);
    EXPECT_EQ(resume(path), "cannot resume: " + path + ": metadata " + key + ": " + expected);
  }
}

TEST_F(ResumeHostile, AMissingOrBadSettingIsNamed) {
  Metadata m = good();
  m.erase("config.lr");
  std::string path = checkpoint(4, m);
  EXPECT_EQ(resume(path), "cannot resume: " + path + " is not a checkpoint of test (its metadata: no key 'config.lr')");
  m = good();
  m.erase("elapsed");
  path = checkpoint(4, m);
  EXPECT_EQ(resume(path), "cannot resume: " + path + " is not a checkpoint of test (its metadata: no key 'elapsed')");
  m = good();
  m["config.lr"] = "0.1abc";
  path = checkpoint(4, m);
  EXPECT_EQ(resume(path), "cannot resume: " + path +
                              " is not a checkpoint of test (its metadata: config.lr: expected "
                              "a number, got '0.1abc')");
}

TEST_F(ResumeHostile, ACsvStepBeyondIntIsAClearError) {
  const std::string csv = (dir_ / "run.csv").string();
  std::ofstream(csv) << "step,loss,val_accuracy,lr,elapsed\n2,1,0,0.1,1\n3000000000,1,0,0.1,1\n";
  EXPECT_EQ(xgrad::testing::escape_of([&] { train::detail::CsvLog log(csv, 4, "val_accuracy"); }),
            "cannot resume the CSV log " + csv +
                ": line 3: step: expected an integer in [0, 2147483647], got "
                "'3000000000'");
  // The rows up to the step are kept, the later ones dropped.
  std::ofstream(csv) << "step,loss,val_accuracy,lr,elapsed\n2,1,0,0.1,1\n6,1,0,0.1,1\n";
  { train::detail::CsvLog log(csv, 4, "val_accuracy"); }
  std::ifstream in(csv);
  const std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(kept, "step,loss,val_accuracy,lr,elapsed\n2,1,0,0.1,1\n");
}

}  // namespace
