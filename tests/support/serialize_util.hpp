// Helpers of the test_serialize_* suites: temporary folders, file bytes, bit-exact comparisons
// of state dicts and optimizer states, and the small training objects they save.
#pragma once

#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <memory>
#include <set>
#include <string>

#include <xgrad/serialize/archive_io.hpp>
#include <xgrad/serialize/serialize.hpp>
#include "test_util.hpp"

namespace xgrad::testing {

// A fresh folder under /tmp, removed with everything in it at the end of the test.
class TempDir {
 public:
  TempDir() {
    char name[] = "/tmp/xgrad-serialize-XXXXXX";
    EXPECT_NE(::mkdtemp(name), nullptr);
    path_ = name;
  }
  ~TempDir() {
    std::error_code ec;  // a test may have taken the folder's write permission away
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  // The names in the folder, to show that no temporary file was left behind.
  std::set<std::string> entries() const {
    std::set<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(path_)) names.insert(e.path().filename().string());
    return names;
  }

 private:
  std::string path_;
};

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

template <class T>
bool same_bits(const Array<T>& a, const Array<T>& b) {
  return shape_of(a) == shape_of(b) && (a.size() == 0 || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

template <class T>
void expect_same_state_dict(const nn::StateDict<T>& expected, const nn::StateDict<T>& actual) {
  ASSERT_EQ(expected.keys(), actual.keys());
  for (const auto& [key, value] : expected) EXPECT_TRUE(same_bits(value, actual.at(key))) << key;
}

template <class T>
void expect_same_param_state(const optim::ParamState<T>& a, const optim::ParamState<T>& b, const std::string& name) {
  EXPECT_EQ(a.step, b.step) << name;
  std::vector<std::string> names_a, names_b;
  for (const auto& [n, array] : a.arrays()) names_a.push_back(n);
  for (const auto& [n, array] : b.arrays()) names_b.push_back(n);
  ASSERT_EQ(names_a, names_b) << name;
  for (const auto& [n, array] : a.arrays()) EXPECT_TRUE(same_bits(array, b.at(n))) << name << " " << n;
}

template <class T>
void expect_same_optimizer_state(const optim::Optimizer<T>& a, const optim::Optimizer<T>& b) {
  const auto sa = a.state(), sb = b.state();
  ASSERT_EQ(sa.size(), sb.size());
  for (std::size_t i = 0; i < sa.size(); ++i) expect_same_param_state(sa[i], sb[i], "parameter " + std::to_string(i));
  ASSERT_EQ(a.param_groups().size(), b.param_groups().size());
  for (std::size_t g = 0; g < a.param_groups().size(); ++g) {
    EXPECT_EQ(a.param_groups()[g].options().get_lr(), b.param_groups()[g].options().get_lr()) << "group " << g;
    EXPECT_EQ(a.param_groups()[g].initial_lr, b.param_groups()[g].initial_lr) << "group " << g;
  }
}

inline void expect_same_scheduler_state(const optim::LRSchedulerState& a, const optim::LRSchedulerState& b) {
  EXPECT_EQ(a.last_epoch, b.last_epoch);
  EXPECT_EQ(a.step_count, b.step_count);
  EXPECT_EQ(a.base_lrs, b.base_lrs);
  EXPECT_EQ(a.last_lr, b.last_lr);
  ASSERT_EQ(a.schedulers.size(), b.schedulers.size());
  for (std::size_t i = 0; i < a.schedulers.size(); ++i) expect_same_scheduler_state(a.schedulers[i], b.schedulers[i]);
}

// Expects `f` to throw E whose message contains every fragment.
template <class E>
void expect_error(const std::function<void()>& f, std::initializer_list<std::string> fragments) {
  try {
    f();
    ADD_FAILURE() << "expected an exception";
  } catch (const E& e) {
    const std::string message = e.what();
    for (const auto& fragment : fragments)
      EXPECT_NE(message.find(fragment), std::string::npos) << "\"" << message << "\" lacks \"" << fragment << "\"";
  } catch (const std::exception& e) {
    ADD_FAILURE() << "an exception of another type: " << e.what();
  }
}

// A small model, its Adam (amsgrad) optimizer with two parameter groups and a LinearLR schedule,
// after a few steps: state in every slot.
struct SmallRun {
  std::shared_ptr<nn::Linear<float>> model;
  std::unique_ptr<optim::Adam<float>> optimizer;
  std::unique_ptr<optim::LinearLR<float>> scheduler;
  Generator generator;

  explicit SmallRun(std::uint64_t seed, int steps = 2) : generator(seed) {
    manual_seed(seed);
    model = std::make_shared<nn::Linear<float>>(3, 2);
    optimizer = std::make_unique<optim::Adam<float>>(
        std::vector<optim::ParamGroup<float>>{
            optim::ParamGroup<float>({model->weight}),
            optim::ParamGroup<float>({model->bias}, optim::AdamOptions(0.02).betas({0.8, 0.99}).amsgrad(true))},
        optim::AdamOptions(0.01).amsgrad(true).weight_decay(0.001));
    scheduler = std::make_unique<optim::LinearLR<float>>(*optimizer, 0.5, 1.0, 4);
    const Tensor<float> x = randn<float>({4, 3}, generator);
    for (int i = 0; i < steps; ++i) {
      optimizer->zero_grad();
      mse_loss(model->forward(x), zeros<float>({4, 2})).backward();
      optimizer->step();
      scheduler->step();
    }
  }

  Checkpoint<float> capture(std::int64_t step = 2) const {
    return Checkpoint<float>::capture(*model, *optimizer, scheduler.get(), generator, step,
                                      {{"run", "small"}, {"note", "caf\xC3\xA9"}});
  }
};

// `forged`, made from `original`, with the checksum recomputed when the original had a valid one
// (format 2): a forger can do that, and the structural checks behind the checksum must still hold.
inline std::string reseal(const std::string& original, std::string forged) {
  namespace io = archive_io;
  const std::size_t at = original.find("\"crc32\": \"");
  if (!original.empty() && original[0] == '{') {
    if (at == std::string::npos) return forged;
    const std::size_t value = forged.find("\"crc32\": \"") + 10;
    forged.replace(value, 8, io::kJsonCrcPlaceholder);
    return io::json_with_crc(std::move(forged));
  }
  const std::size_t n = original.size();
  if (n < 5) return forged;
  std::string sealed = original.substr(0, n - 4);
  io::append_binary_crc(sealed);
  if (sealed != original || forged.size() < 4) return forged;  // no valid checksum to keep
  forged.resize(forged.size() - 4);
  io::append_binary_crc(forged);
  return forged;
}

// Whether a and b have the same bytes (NaNs and signed zeros compare as stored).
template <class T>
inline bool same_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// Names, order, shapes and every value bit for bit.
template <class T>
void expect_same_arrays(const NamedArrays<T>& expected, const NamedArrays<T>& actual) {
  ASSERT_EQ(expected.size(), actual.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(expected[i].first, actual[i].first);
    EXPECT_EQ(shape_of(expected[i].second), shape_of(actual[i].second)) << expected[i].first;
    ASSERT_EQ(expected[i].second.size(), actual[i].second.size());
    for (std::size_t k = 0; k < expected[i].second.size(); ++k)
      EXPECT_TRUE(same_bits(expected[i].second.data()[k], actual[i].second.data()[k]))
          << expected[i].first << "[" << k << "]: " << expected[i].second.data()[k] << " vs "
          << actual[i].second.data()[k];
  }
}

}  // namespace xgrad::testing
