// xgrad::data::DistributedSampler against torch.utils.data.DistributedSampler's rules: each rank
// takes positions rank::num_replicas of one order shared by every rank; without drop_last the
// order is padded with its own first indices, with drop_last cut; set_epoch reshuffles with
// seed + epoch. The shuffled order is xgrad's generator's, not torch's, so shuffled runs are
// checked by properties; unshuffled ones against torch's output (torch 1.13).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <stdexcept>

#include <xgrad/xgrad.hpp>

namespace xgrad::data {
namespace {

using Indices = std::vector<std::size_t>;

// Every rank's indices of one epoch.
std::vector<Indices> shards(std::size_t n, std::size_t replicas, bool shuffle, bool drop_last, std::uint64_t seed,
                            std::int64_t epoch) {
  std::vector<Indices> out;
  for (std::size_t r = 0; r < replicas; ++r) {
    DistributedSampler s(n, DistributedSamplerOptions(replicas, r).shuffle(shuffle).seed(seed).drop_last(drop_last));
    s.set_epoch(epoch);
    out.push_back(s.indices());
    EXPECT_EQ(out.back().size(), s.size());
  }
  return out;
}

// The order shared by the ranks, rebuilt from their shards: global[i * R + r] = shard r's i-th.
Indices interleave(const std::vector<Indices>& shards) {
  Indices global;
  for (std::size_t i = 0; i < shards[0].size(); ++i)
    for (const Indices& s : shards) {
      EXPECT_EQ(s.size(), shards[0].size()) << "ranks got shards of different sizes";
      global.push_back(s[i]);
    }
  return global;
}

bool is_permutation_of_iota(Indices v) {
  std::sort(v.begin(), v.end());
  for (std::size_t i = 0; i < v.size(); ++i)
    if (v[i] != i) return false;
  return true;
}

TEST(DataDistributedSampler, UnshuffledMatchesTorch) {
  // torch.utils.data.DistributedSampler(range(N), num_replicas=R, rank=r, shuffle=False, drop_last=...)
  struct Case {
    std::size_t n, replicas;
    bool drop_last;
    std::vector<Indices> expected;
  };
  const std::vector<Case> cases = {
      {10, 3, false, {{0, 3, 6, 9}, {1, 4, 7, 0}, {2, 5, 8, 1}}},
      {10, 3, true, {{0, 3, 6}, {1, 4, 7}, {2, 5, 8}}},
      {2, 5, false, {{0}, {1}, {0}, {1}, {0}}},
      {2, 5, true, {{}, {}, {}, {}, {}}},
      {7, 2, false, {{0, 2, 4, 6}, {1, 3, 5, 0}}},
      {7, 2, true, {{0, 2, 4}, {1, 3, 5}}},
      {0, 2, false, {{}, {}}},
      {8, 4, true, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("N=" + std::to_string(c.n) + " R=" + std::to_string(c.replicas) +
                 " drop_last=" + std::to_string(c.drop_last));
    EXPECT_EQ(shards(c.n, c.replicas, false, c.drop_last, 0, 0), c.expected);
    EXPECT_EQ(shards(c.n, c.replicas, false, c.drop_last, 0, 3), c.expected);  // no shuffle: epochs alike
  }
}

TEST(DataDistributedSampler, EveryIndexOncePerEpochWithThePaddingRule) {
  for (std::size_t n : {1, 2, 5, 16, 17, 100, 101}) {
    for (std::size_t replicas : {1, 2, 3, 4, 7}) {
      for (std::int64_t epoch : {0, 1, 5}) {
        SCOPED_TRACE("N=" + std::to_string(n) + " R=" + std::to_string(replicas) + " epoch=" + std::to_string(epoch));
        const std::vector<Indices> s = shards(n, replicas, true, false, 42, epoch);
        EXPECT_EQ(s[0].size(), (n + replicas - 1) / replicas);
        const Indices global = interleave(s);
        ASSERT_EQ(global.size() % replicas, 0u);
        ASSERT_GE(global.size(), n);
        ASSERT_LT(global.size() - n, replicas);
        // The first N positions hold each index once; the padding repeats the order's start.
        EXPECT_TRUE(is_permutation_of_iota(Indices(global.begin(), global.begin() + n)));
        for (std::size_t k = n; k < global.size(); ++k) EXPECT_EQ(global[k], global[k - n]) << "padding " << k;
        if (n % replicas == 0) {
          // Disjoint shards covering everything.
          std::set<std::size_t> seen;
          for (const Indices& shard : s)
            for (std::size_t i : shard) EXPECT_TRUE(seen.insert(i).second) << i << " is in two shards";
          EXPECT_EQ(seen.size(), n);
        }
      }
    }
  }
}

TEST(DataDistributedSampler, DropLastCutsTheTailOfTheSameOrder) {
  for (std::size_t n : {1, 2, 5, 16, 17, 101}) {
    for (std::size_t replicas : {1, 2, 3, 4, 7}) {
      SCOPED_TRACE("N=" + std::to_string(n) + " R=" + std::to_string(replicas));
      const std::vector<Indices> cut = shards(n, replicas, true, true, 7, 2);
      const std::vector<Indices> padded = shards(n, replicas, true, false, 7, 2);
      EXPECT_EQ(cut[0].size(), n / replicas);
      const Indices global = interleave(cut);
      EXPECT_EQ(global.size(), n / replicas * replicas);
      // Disjoint, and the prefix of the order the padded sampler uses.
      EXPECT_EQ(std::set<std::size_t>(global.begin(), global.end()).size(), global.size());
      const Indices whole = interleave(padded);
      EXPECT_TRUE(std::equal(global.begin(), global.end(), whole.begin()));
      for (std::size_t i : global) EXPECT_LT(i, n);
    }
  }
}

TEST(DataDistributedSampler, SetEpochReshufflesWithSeedPlusEpoch) {
  const std::size_t n = 200, replicas = 2;
  const Indices e0 = interleave(shards(n, replicas, true, false, 0, 0));
  const Indices e1 = interleave(shards(n, replicas, true, false, 0, 1));
  EXPECT_NE(e0, e1);
  EXPECT_TRUE(is_permutation_of_iota(e0));
  EXPECT_TRUE(is_permutation_of_iota(e1));
  Indices iota(n);
  std::iota(iota.begin(), iota.end(), std::size_t(0));
  EXPECT_NE(e0, iota) << "shuffle=true gave the identity";
  // The same epoch twice gives the same order; the order depends on seed + epoch alone.
  EXPECT_EQ(interleave(shards(n, replicas, true, false, 0, 1)), e1);
  EXPECT_EQ(interleave(shards(n, replicas, true, false, 1, 0)), e1);
  EXPECT_NE(interleave(shards(n, replicas, true, false, 5, 0)), e0);
  // The same permutation a Generator seeded with seed + epoch gives (torch.randperm with
  // g.manual_seed(seed + epoch)).
  Generator g(3 + 4);
  EXPECT_EQ(interleave(shards(n, replicas, true, false, 3, 4)), detail::randperm(n, g));
  // indices() without set_epoch between calls repeats the epoch (as torch's __iter__).
  DistributedSampler s(n, DistributedSamplerOptions(replicas, 1));
  EXPECT_EQ(s.indices(), s.indices());
  EXPECT_EQ(s.state(), std::nullopt);
}

TEST(DataDistributedSampler, ChecksItsArguments) {
  try {
    DistributedSampler(10, DistributedSamplerOptions(2, 2));
    FAIL() << "rank 2 of 2 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("invalid rank 2, rank should be in the interval [0, 1]"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(DistributedSampler(10, DistributedSamplerOptions(0, 0)), std::invalid_argument);
  const DistributedSamplerOptions defaults(4, 1);
  EXPECT_TRUE(defaults.shuffle());
  EXPECT_EQ(defaults.seed(), 0u);
  EXPECT_FALSE(defaults.drop_last());
}

// Example i is the 1-D array {i}.
class Numbers : public Dataset<IndexArray> {
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

TEST(DataDistributedSampler, DataLoaderShardsEpochsAndResumes) {
  const std::size_t n = 30, replicas = 3, batch = 4;
  auto dataset = std::make_shared<Numbers>(n);
  std::vector<DataLoader<IndexArray>> loaders;
  for (std::size_t r = 0; r < replicas; ++r)
    loaders.push_back(make_data_loader(
        dataset, DataLoaderOptions().batch_size(batch).sampler(
                     std::make_shared<DistributedSampler>(n, DistributedSamplerOptions(replicas, r).seed(9)))));
  std::vector<std::multiset<std::size_t>> epochs(2);
  std::vector<Indices> first_of_rank0(2);
  for (int e = 0; e < 2; ++e) {
    for (std::size_t r = 0; r < replicas; ++r) {
      EXPECT_EQ(loaders[r].size(), 3u);  // 10 indices per rank in batches of 4
      for (auto& b : loaders[r]) {
        for (std::int64_t i : b) epochs[e].insert(static_cast<std::size_t>(i));
        if (r == 0 && first_of_rank0[e].empty()) first_of_rank0[e] = Indices(b.begin(), b.end());
      }
    }
    EXPECT_EQ(epochs[e].size(), n);
    EXPECT_EQ(std::set<std::size_t>(epochs[e].begin(), epochs[e].end()).size(), n) << "epoch " << e;
  }
  EXPECT_NE(first_of_rank0[0], first_of_rank0[1]) << "the loader did not call set_epoch";

  // A loader stopped mid-epoch 1 resumes with the batches it would have given.
  auto make = [&] {
    return make_data_loader(dataset, DataLoaderOptions().batch_size(batch).sampler(std::make_shared<DistributedSampler>(
                                         n, DistributedSamplerOptions(replicas, 1).seed(9))));
  };
  auto a = make();
  std::vector<Indices> expected;
  while (a.next()) {
  }
  a.next();  // epoch 1, batch 0
  const DataLoaderState saved = a.state_dict();
  while (auto b = a.next()) expected.emplace_back(b->begin(), b->end());
  auto resumed = make();
  resumed.load_state_dict(DataLoaderState::from_string(saved.to_string()));
  std::vector<Indices> got;
  while (auto b = resumed.next()) got.emplace_back(b->begin(), b->end());
  EXPECT_EQ(saved.epoch, 1);
  EXPECT_EQ(got, expected);
  EXPECT_EQ(got.size(), 2u);
}

}  // namespace
}  // namespace xgrad::data
