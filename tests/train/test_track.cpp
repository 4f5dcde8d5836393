// Trainer::track: a state with state_dict/load_state_dict (a DataLoader's position) is saved in
// every checkpoint and restored on resume, so that a run whose batches come from a shuffled
// DataLoader, stopped mid-epoch and resumed, continues bit for bit; checkpoints of programs that
// saved the same state by hand (on_save_checkpoint) resume as they are; bad names, a checkpoint
// without the state and a state the object refuses are errors naming the key.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>

#include <xgrad/train/trainer.hpp>
#include <xgrad/xgrad.hpp>

namespace {

namespace nn = xgrad::nn;
namespace optim = xgrad::optim;
namespace data = xgrad::data;
namespace fs = std::filesystem;
namespace train = xgrad::train;

// How the program keeps its DataLoader's position: not at all, by track(), or by hand (a
// callback writing the metadata key, as the example programs did before track()).
enum class Keep { nothing, track, by_hand };

struct Outcome {
  int status = -1;
  nn::StateDict<float> weights;
  std::string error;  // stderr
};

// 6 steps over batches of 4 of a shuffled dataset of `examples` (2 batches an epoch for 10), from
// `resume` when not empty, stopped at `stop_at` when not 0.
Outcome run_program(const fs::path& dir, Keep keep, const std::string& resume = "", int stop_at = 0,
                    std::size_t examples = 10) {
  train::Settings settings;
  train::TrainerOptions options;
  options.max_steps = 6;
  options.val_check_interval = 3;
  options.checkpoint_path = (dir / "run.ckpt").string();
  options.ckpt_path = resume;
  options.stop_at = stop_at;
  options.enable_progress_bar = false;
  Outcome out;
  testing::internal::CaptureStderr();
  out.status = train::guarded("test", [&] {
    train::Trainer trainer("test", options, settings);
    trainer.seed_everything(5);
    nn::Linear<float> model(3, 1);
    optim::SGD<float> sgd(model.parameters(), optim::SGDOptions(0.1));
    xgrad::Generator gen(9);
    const auto dataset = std::make_shared<data::TensorDataset<float>>(std::vector<xgrad::Tensor<float>>{
        xgrad::randn<float>({std::int64_t(examples), 3}, gen), xgrad::randn<float>({std::int64_t(examples), 1}, gen)});
    auto loader = data::make_data_loader(
        dataset, data::DataLoaderOptions().batch_size(4).drop_last(true).shuffle(true).generator(xgrad::Generator(1)));
    if (keep == Keep::track) trainer.track("data_loader", loader);
    if (keep == Keep::by_hand) {
      const auto save = std::make_shared<train::LambdaCallback>();
      save->save_checkpoint = [&](train::Trainer&, std::map<std::string, std::string>& metadata) {
        metadata["data_loader"] = loader.state_dict().to_string();
      };
      trainer.add_callback(save);
    }
    const auto loss = [&](int) {
      auto batch = loader.next();
      if (!batch) batch = loader.next();  // the next epoch
      return xgrad::mse_loss(model.forward((*batch)[0]), (*batch)[1]);
    };
    const auto stopped = trainer.fit(model, sgd, nullptr, loss, [] { return 0.0; });
    out.weights = model.state_dict();
    return stopped ? *stopped : 0;
  });
  out.error = testing::internal::GetCapturedStderr();
  return out;
}

bool same_weights(const nn::StateDict<float>& a, const nn::StateDict<float>& b) {
  if (a.keys() != b.keys()) return false;
  for (const auto& [key, value] : a)
    if (!(value == b.at(key))) return false;
  return true;
}

class TrainerTrack : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("xgrad_trainer_track_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "full");
    fs::create_directories(dir_ / "half");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string half_ckpt() const { return (dir_ / "half" / "run.ckpt").string(); }
  fs::path dir_;
};

// Stopped at step 3 (mid-epoch: the second epoch's first batch done), then resumed: the loader
// goes on from its saved position, and the weights are the uninterrupted run's bit for bit. Not
// kept, the resumed loader starts afresh and the weights differ (what the test would see if
// fit() did not restore the tracked state).
TEST_F(TrainerTrack, ADataLoadersPositionIsSavedAndRestoredBitForBit) {
  const Outcome full = run_program(dir_ / "full", Keep::track);
  ASSERT_EQ(full.status, 0) << full.error;
  ASSERT_EQ(run_program(dir_ / "half", Keep::track, "", 3).status, 0);
  const xgrad::Checkpoint<float> saved = xgrad::load_checkpoint<float>(half_ckpt());
  EXPECT_EQ(saved.metadata.at("data_loader").rfind("DataLoaderState v1 epoch=1 next_batch=1 ", 0), 0u)
      << saved.metadata.at("data_loader");
  const Outcome rest = run_program(dir_ / "half", Keep::track, half_ckpt());
  ASSERT_EQ(rest.status, 0) << rest.error;
  EXPECT_TRUE(same_weights(full.weights, rest.weights));

  ASSERT_EQ(run_program(dir_ / "half", Keep::nothing, "", 3).status, 0);
  const Outcome untracked = run_program(dir_ / "half", Keep::nothing, half_ckpt());
  ASSERT_EQ(untracked.status, 0) << untracked.error;
  EXPECT_FALSE(same_weights(full.weights, untracked.weights));
}

// A checkpoint whose program wrote the state by hand under the same key (the examples' checkpoints
// before track()) resumes with track() as it is, and the other way round.
TEST_F(TrainerTrack, CheckpointsThatSavedTheStateByHandResumeAsTheyAre) {
  const Outcome full = run_program(dir_ / "full", Keep::track);
  ASSERT_EQ(run_program(dir_ / "half", Keep::by_hand, "", 3).status, 0);
  const Outcome rest = run_program(dir_ / "half", Keep::track, half_ckpt());
  ASSERT_EQ(rest.status, 0) << rest.error;
  EXPECT_TRUE(same_weights(full.weights, rest.weights));
  const std::string by_track =
      xgrad::load_checkpoint<float>((dir_ / "full" / "run.ckpt").string()).metadata.at("data_loader");
  ASSERT_EQ(run_program(dir_ / "full", Keep::by_hand).status, 0);
  EXPECT_EQ(xgrad::load_checkpoint<float>((dir_ / "full" / "run.ckpt").string()).metadata.at("data_loader"), by_track);
}

// Resuming a checkpoint without the tracked key, or with a state the object refuses (a loader
// over another dataset), is refused naming the checkpoint and the key.
TEST_F(TrainerTrack, AMissingOrRefusedStateIsRefusedNamingTheKey) {
  ASSERT_EQ(run_program(dir_ / "half", Keep::nothing, "", 3).status, 0);
  const Outcome missing = run_program(dir_ / "half", Keep::track, half_ckpt());
  EXPECT_EQ(missing.status, 2);
  EXPECT_NE(missing.error.find("cannot resume from " + half_ckpt() + ": its metadata has no key 'data_loader'"),
            std::string::npos)
      << missing.error;

  ASSERT_EQ(run_program(dir_ / "half", Keep::track, "", 3).status, 0);
  const Outcome other = run_program(dir_ / "half", Keep::track, half_ckpt(), 0, /*examples=*/12);
  EXPECT_EQ(other.status, 2);
  EXPECT_NE(other.error.find("cannot resume from " + half_ckpt() +
                             ": its 'data_loader': DataLoader::load_state_dict: the state was saved by a loader over "
                             "10 examples in batches of 4, this loader has 12 examples"),
            std::string::npos)
      << other.error;
}

// A state that is a string (load_state_dict(std::string)) travels as it is.
struct Counter {
  int n = 0;
  std::string state_dict() const { return std::to_string(n); }
  void load_state_dict(const std::string& text) { n = std::stoi(text); }
};

TEST_F(TrainerTrack, NamesAreTheProgramsOwnAndTrackedBeforeFit) {
  train::Settings settings;
  train::TrainerOptions options;
  options.max_steps = 2;
  options.checkpoint_path = (dir_ / "full" / "c.ckpt").string();
  options.enable_progress_bar = false;
  Counter counter, other;
  {
    train::Trainer trainer("test", options, settings);
    for (const std::string name : {"", "config.lr", "loss_sum", "max_steps", "world_size", "rank_generators"})
      EXPECT_THROW(trainer.track(name, counter), std::invalid_argument) << name;
    trainer.track("counter", counter);
    EXPECT_THROW(trainer.track("counter", other), std::invalid_argument);
    nn::Linear<float> model(1, 1);
    optim::SGD<float> sgd(model.parameters(), optim::SGDOptions(0.1));
    const auto loss = [&](int) {
      ++counter.n;
      return xgrad::sum(model.forward(xgrad::ones<float>({1, 1})));
    };
    ASSERT_FALSE(trainer.fit(model, sgd, nullptr, loss, [] { return 0.0; }).has_value());
    EXPECT_THROW(trainer.track("late", other), std::logic_error);
  }
  EXPECT_EQ(xgrad::load_checkpoint<float>(options.checkpoint_path).metadata.at("counter"), "2");
  options.ckpt_path = options.checkpoint_path;
  options.checkpoint_path.clear();
  train::Trainer resumed("test", options, settings);
  resumed.track("counter", other);
  nn::Linear<float> model(1, 1);
  optim::SGD<float> sgd(model.parameters(), optim::SGDOptions(0.1));
  resumed.fit(
      model, sgd, nullptr,
      [&](int) {
        return xgrad::sum(model.forward(xgrad::ones<float>({1, 1})));
      },
      [] { return 0.0; });
  EXPECT_EQ(other.n, 2);
}

// A callback may not change the state the Trainer saves for track().
TEST_F(TrainerTrack, CallbacksCannotChangeATrackedState) {
  train::Settings settings;
  train::TrainerOptions options;
  options.max_steps = 1;
  options.checkpoint_path = (dir_ / "full" / "c.ckpt").string();
  options.enable_progress_bar = false;
  train::Trainer trainer("test", options, settings);
  Counter counter;
  trainer.track("counter", counter);
  const auto meddle = std::make_shared<train::LambdaCallback>();
  meddle->save_checkpoint = [](train::Trainer&, std::map<std::string, std::string>& m) { m["counter"] = "7"; };
  trainer.add_callback(meddle);
  nn::Linear<float> model(1, 1);
  optim::SGD<float> sgd(model.parameters(), optim::SGDOptions(0.1));
  try {
    trainer.fit(
        model, sgd, nullptr,
        [&](int) {
          return xgrad::sum(model.forward(xgrad::ones<float>({1, 1})));
        },
        [] { return 0.0; });
    ADD_FAILURE() << "not refused";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "Trainer: a callback's on_save_checkpoint changed the metadata key 'counter' from '0' to '7' (the "
                 "state of track('counter'), which the Trainer saves)");
  }
  EXPECT_FALSE(fs::exists(options.checkpoint_path));
}

}  // namespace
