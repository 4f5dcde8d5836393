// DistributedSampler over real ranks, under `mpirun -np 2` (a world of 1 without mpirun):
// distributed::sampler_options() takes the world from the process group; every rank's shard,
// gathered, covers each index exactly once per epoch (with torch's padding rule when the world
// does not divide the dataset), set_epoch (called by the DataLoader) reshuffles, and every rank
// agrees on the order.
#include <xgrad/distributed/sampler.hpp>

#include <algorithm>
#include <set>

#include "dist_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;
namespace dist = xgrad::distributed;
using Indices = std::vector<std::size_t>;

namespace {

// Every rank's indices, by rank (each rank's list has the same length).
std::vector<Indices> gather(const Indices& mine) {
  std::vector<double> values(mine.begin(), mine.end());
  const auto all = dist::all_gather(from_vector<double>(values, {values.size()}));
  std::vector<Indices> out;
  for (const auto& t : all) out.emplace_back(t.value().begin(), t.value().end());
  return out;
}

// The order the ranks share: position i * world + r is rank r's i-th index.
Indices interleave(const std::vector<Indices>& shards) {
  Indices global;
  for (std::size_t i = 0; i < shards[0].size(); ++i)
    for (const Indices& s : shards) global.push_back(s.at(i));
  return global;
}

// Example i is the 1-D array {i}.
class Numbers : public data::Dataset<IndexArray> {
 public:
  explicit Numbers(std::size_t n) : n_(n) {}
  std::size_t size() const override { return n_; }
  IndexArray get(std::size_t i) const override {
    IndexArray a = IndexArray::from_shape({1});
    a(0) = static_cast<std::int64_t>(i);
    return a;
  }

 private:
  std::size_t n_;
};

}  // namespace

TEST(DistributedSamplerRanks, OptionsComeFromTheProcessGroup) {
  const data::DistributedSamplerOptions o = dist::sampler_options();
  EXPECT_EQ(o.num_replicas(), static_cast<std::size_t>(world()));
  EXPECT_EQ(o.rank(), static_cast<std::size_t>(rank()));
  EXPECT_TRUE(o.shuffle());
  EXPECT_EQ(o.seed(), 0u);
  EXPECT_FALSE(o.drop_last());
}

TEST(DistributedSamplerRanks, EveryIndexOncePerEpochAcrossRanks) {
  // 24 is divisible by 1, 2, 3, 4 ranks: disjoint shards; 25 is not (for a world above 1): padding.
  for (std::size_t n : {24, 25}) {
    SCOPED_TRACE("N=" + std::to_string(n));
    data::DistributedSampler sampler(n, dist::sampler_options().seed(11));
    std::vector<Indices> epochs;
    for (std::int64_t epoch = 0; epoch < 3; ++epoch) {
      sampler.set_epoch(epoch);
      const std::vector<Indices> shards = gather(sampler.indices());
      const Indices global = interleave(shards);
      ASSERT_EQ(global.size(), sampler.total_size());
      // The first N positions: each index once; the rest repeat the order's start.
      Indices first(global.begin(), global.begin() + n);
      std::sort(first.begin(), first.end());
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(first[i], i) << "epoch " << epoch;
      for (std::size_t k = n; k < global.size(); ++k) EXPECT_EQ(global[k], global[k - n]);
      if (n % std::size_t(world()) == 0) {
        std::set<std::size_t> seen;
        for (const Indices& s : shards)
          for (std::size_t i : s) EXPECT_TRUE(seen.insert(i).second) << i << " is on two ranks";
      }
      epochs.push_back(global);
    }
    EXPECT_NE(epochs[0], epochs[1]) << "set_epoch did not reshuffle";
    EXPECT_NE(epochs[1], epochs[2]);
  }
}

TEST(DistributedSamplerRanks, DataLoaderEpochsCoverTheDatasetAcrossRanks) {
  const std::size_t n = 40, batch = 4;
  auto dataset = std::make_shared<Numbers>(n);
  auto loader = data::make_data_loader(
      dataset, data::DataLoaderOptions().batch_size(batch).sampler(
                   std::make_shared<data::DistributedSampler>(n, dist::sampler_options().seed(3))));
  std::vector<Indices> orders;
  for (int epoch = 0; epoch < 2; ++epoch) {
    Indices mine;
    for (auto& b : loader)
      for (std::int64_t i : b) mine.push_back(static_cast<std::size_t>(i));
    Indices all = interleave(gather(mine));
    orders.push_back(all);
    std::sort(all.begin(), all.end());
    Indices expected(n);
    for (std::size_t i = 0; i < n; ++i) expected[i] = i;
    EXPECT_EQ(all, expected) << "epoch " << epoch;
  }
  EXPECT_NE(orders[0], orders[1]) << "the loader did not call set_epoch";
}
