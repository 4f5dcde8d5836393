// xgrad::data's samplers when an epoch's indices do not fit in memory: an OutOfMemoryError naming
// the sampler and the sizes, never a bare std::bad_alloc (the orders themselves are tested with
// the DataLoader, in test_dataloader.cpp and test_distributed_sampler.cpp).
#include <gtest/gtest.h>

#include <memory>
#include <new>
#include <string>
#include <vector>

#include <xgrad/xgrad.hpp>
#include "address_space_limit.hpp"

namespace xgrad::data {
namespace {

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)  // they abort on a failed allocation

using Indices = std::vector<std::size_t>;

using xgrad::testing::out_of_memory_of;

void expect_parts(const std::string& message, std::initializer_list<const char*> parts) {
  for (const char* part : parts) EXPECT_NE(message.find(part), std::string::npos) << message << "\nlacks: " << part;
}

// A sampler whose epoch was allocated before the test limits the memory.
class Prepared : public Sampler {
 public:
  explicit Prepared(std::size_t n) : order_(n) {}
  std::size_t size() const override { return order_.size(); }
  Indices indices() override { return std::move(order_); }

 private:
  Indices order_;
};

// train_gpt --batch-size 1000000 asks its RandomSampler for 1000 batches of draws with replacement
// (1e9 indices, 8 GB).
TEST(DataSampler, AnEpochThatDoesNotFitNamesTheSamplerAndItsSize) {
  const std::size_t huge = std::size_t(1) << 59;  // 2^62 bytes of indices
  expect_parts(out_of_memory_of([&] { RandomSampler(10, Generator(0), true, huge).indices(); }),
               {"RandomSampler: not enough memory for an epoch of num_samples (576460752303423488 indices): tried to "
                "allocate 4611686018427387904 bytes"});
  expect_parts(out_of_memory_of([] { SequentialSampler(std::size_t(1) << 62).indices(); }),
               {"SequentialSampler: not enough memory for the dataset's indices (4611686018427387904 indices)",
                "more than 2^64 bytes"});
  expect_parts(out_of_memory_of([&] { RandomSampler(huge, Generator(0)).indices(); }),
               {"RandomSampler: not enough memory for a permutation of the dataset's indices (576460752303423488"});
}

// The BatchSampler copies the epoch's order into batches: a copy that does not fit is named too.
// One batch of 80 MiB: more than a malloc arena holds (64 MiB, already mapped when a failed
// allocation of an earlier test made glibc open a second one), so it is mapped anew.
TEST(DataSampler, BatchesThatDoNotFitNameTheBatchSampler) {
  const std::size_t n = std::size_t(10) << 20;
  BatchSampler batches(std::make_shared<Prepared>(n), n, false);
  testing::AddressSpaceLimit limit;  // 16 MiB more than is mapped: the copy does not fit
  const std::string message = out_of_memory_of([&] {
    limit.apply();
    batches.batches();
  });
  limit.lift();
  expect_parts(message, {"BatchSampler: not enough memory for an epoch's batches of 10485760 (10485760 indices"});
}

#endif

}  // namespace
}  // namespace xgrad::data
