// xgrad::distributed's process group and collectives, under `mpirun -np 2` (and as a world of 1
// without mpirun): values computed from the rank and the world size.
#include "dist_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;
namespace dist = xgrad::distributed;

TEST(ProcessGroup, RankAndWorldSize) {
  EXPECT_TRUE(dist::is_initialized());
  EXPECT_GE(world(), 1);
  EXPECT_GE(rank(), 0);
  EXPECT_LT(rank(), world());
  // Every rank number appears once.
  const std::int64_t sum_of_ranks = dist::all_reduce_scalar<std::int64_t>(rank());
  EXPECT_EQ(sum_of_ranks, std::int64_t(world()) * (world() - 1) / 2);
  dist::barrier();
}

TEST(ProcessGroup, InitTwiceThrows) {
  XGRAD_EXPECT_THROW_MSG(dist::init_process_group(), "already initialized");
}

TEST(Collectives, AllReduceSumAvgMax) {
  // Rank r holds (r + 1) * [1, -2, 0.5].
  const double r1 = rank() + 1.0;
  const double n = world();
  const double sum_r1 = n * (n + 1) / 2;
  auto make = [&] { return from_vector<double>({r1, -2 * r1, 0.5 * r1}, {3}); };

  auto t = make();
  dist::all_reduce(t);
  EXPECT_EQ(t.value(), (Array<double>{sum_r1, -2 * sum_r1, 0.5 * sum_r1}));

  t = make();
  dist::all_reduce(t, dist::ReduceOp::AVG);
  EXPECT_EQ(t.value(), (Array<double>{sum_r1 / n, -2 * sum_r1 / n, 0.5 * sum_r1 / n}));

  auto f = from_vector<float>({float(r1), -float(r1)}, {2});
  dist::all_reduce(f, dist::ReduceOp::MAX);
  EXPECT_EQ(f.value(), (Array<float>{float(n), -1.0f}));

  EXPECT_EQ(dist::all_reduce_scalar(r1, dist::ReduceOp::MAX), n);
}

TEST(Collectives, AllReduceBumpsTheVersionAndKeepsTheGraphOut) {
  auto t = from_vector<double>({1.0}, {1}, /*requires_grad=*/true);
  const auto v = t.version();
  dist::all_reduce(t);
  EXPECT_EQ(t.version(), v + 1);
  EXPECT_TRUE(t.is_leaf());
}

TEST(Collectives, BroadcastFromEachRoot) {
  for (int src = 0; src < world(); ++src) {
    auto t = full<double>({2, 2}, 10.0 * rank() + 1.0);
    dist::broadcast(t, src);
    EXPECT_EQ(t.value(), Array<double>(xt::ones<double>({2, 2}) * (10.0 * src + 1.0))) << "src " << src;
  }
  auto t = zeros<double>({1});
  XGRAD_EXPECT_THROW_MSG(dist::broadcast(t, world()), "src must be a rank in [0, ");
}

TEST(Collectives, AllGatherByRank) {
  auto t = from_vector<float>({float(rank()), float(2 * rank())}, {1, 2});
  const std::vector<Tensor<float>> all = dist::all_gather(t);
  ASSERT_EQ(all.size(), std::size_t(world()));
  for (int r = 0; r < world(); ++r) {
    EXPECT_EQ(all[r].shape(), (Shape{1, 2}));
    EXPECT_EQ(all[r].value(), (Array<float>{{float(r), float(2 * r)}})) << "rank " << r;
  }
}

TEST(Collectives, AllGatherWithDifferentShapesThrowsOnEveryRank) {
  if (world() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto t = zeros<double>({rank() == 0 ? std::size_t(2) : std::size_t(3)});
  const std::string error = error_of([&] { dist::all_gather(t); });
  EXPECT_NE(error.find("every rank must pass a tensor of the same shape; rank 0 has (2), rank 1 has (3)"),
            std::string::npos)
      << error;
  // Nobody was left behind in a collective: the next one completes.
  EXPECT_TRUE(all_ranks(!error.empty()));
}

TEST(Collectives, StringsAndBytes) {
  const std::vector<std::string> all = dist::all_gather_string(std::string(std::size_t(rank()), 'x') + "!");
  ASSERT_EQ(all.size(), std::size_t(world()));
  for (int r = 0; r < world(); ++r) EXPECT_EQ(all[r], std::string(std::size_t(r), 'x') + "!");
  const std::string s = dist::broadcast_string(rank() == 0 ? "from rank 0" : "other");
  EXPECT_EQ(s, "from rank 0");
}

TEST(Collectives, AsyncAllReduce) {
  std::vector<double> a(1000, rank() + 1.0);
  std::vector<double> b(10, 1.0);
  dist::Work wa = dist::all_reduce_async(a.data(), a.size());
  dist::Work wb = dist::all_reduce_async(b.data(), b.size(), dist::ReduceOp::MAX);
  wb.wait();
  wa.wait();
  EXPECT_TRUE(wa.is_completed());
  const double n = world();
  for (double x : a) ASSERT_EQ(x, n * (n + 1) / 2);
  for (double x : b) ASSERT_EQ(x, 1.0);
}
