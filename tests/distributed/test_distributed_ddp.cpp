// DistributedDataParallel under `mpirun -np 2`: equivalence with one process, the broadcast and
// the model check at construction, buckets, no_sync.
#include "dist_util.hpp"

#include <xgrad/distributed/ddp.hpp>

using namespace xgrad;
using namespace xgrad::testing;
namespace dist = xgrad::distributed;
using Encoder = nn::TransformerEncoder<double>;
using DDP = dist::DistributedDataParallel<Encoder>;

namespace {
constexpr std::size_t kBatch = 4, kSeq = 3, kModel = 8;

// A 2-layer encoder (batch_first, no dropout), its weights drawn after manual_seed(seed).
std::shared_ptr<Encoder> make_encoder(std::uint64_t seed) {
  manual_seed(seed);
  auto layer = std::make_shared<nn::TransformerEncoderLayer<double>>(
      nn::TransformerEncoderLayerOptions(kModel, 2).dim_feedforward(16).dropout(0.0).batch_first(true));
  return std::make_shared<Encoder>(layer, 2);
}

// Rows [first, first + count) of a (kBatch, kSeq, kModel) batch drawn from `seed`.
Tensor<double> rows(std::uint64_t seed, std::size_t first, std::size_t count) {
  Generator g(seed);
  Tensor<double> all = randn<double>({kBatch, kSeq, kModel}, g);
  const std::size_t row = kSeq * kModel;
  std::vector<double> v(all.value().data() + first * row, all.value().data() + (first + count) * row);
  return from_vector<double>(v, {count, kSeq, kModel});
}

std::vector<Array<double>> grads_of(const nn::Module<double>& m) {
  std::vector<Array<double>> g;
  for (const auto& p : m.parameters()) g.push_back(p.grad());
  return g;
}
}  // namespace

// DDP's defining property: each of 2 ranks trains on its half of each batch for 5 Adam steps.
// Its parameters equal, bit for bit, those of one process that takes the gradients of the two
// halves' mean losses and averages them; and they are within 1e-6 of one process training on
// the whole batch. Run with one bucket and with one bucket per parameter (15 buckets here).
class DdpAdam : public ::testing::TestWithParam<double> {};

TEST_P(DdpAdam, TwoRanksEqualOneProcessAveragingTheHalves) {
  if (world() != 2) GTEST_SKIP() << "needs 2 ranks";
  const std::size_t half = kBatch / 2;
  auto ddp_model = make_encoder(7);
  auto halves_model = make_encoder(7);
  auto whole_model = make_encoder(7);
  DDP ddp(ddp_model, dist::DistributedDataParallelOptions().bucket_cap_mb(GetParam()));
  const std::size_t nparams = ddp_model->parameters().size();
  EXPECT_EQ(ddp.bucket_parameter_names().size(), GetParam() < 0.001 ? nparams : 1u);
  optim::Adam<double> opt_ddp(ddp.parameters(), optim::AdamOptions(1e-2));
  optim::Adam<double> opt_halves(halves_model->parameters(), optim::AdamOptions(1e-2));
  optim::Adam<double> opt_whole(whole_model->parameters(), optim::AdamOptions(1e-2));

  for (std::uint64_t step = 0; step < 5; ++step) {
    const std::uint64_t xs = 100 + step, ys = 200 + step;
    // This rank's half through DDP.
    opt_ddp.zero_grad();
    mse_loss(ddp.forward(rows(xs, rank() * half, half)), rows(ys, rank() * half, half)).backward();
    EXPECT_EQ(ddp.last_buckets_started_in_backward(), ddp.bucket_parameter_names().size())
        << "every bucket should start from a hook, before the end of backward";
    opt_ddp.step();

    // One process: each half's gradient, then their average.
    std::vector<std::vector<Array<double>>> g(2);
    for (std::size_t h = 0; h < 2; ++h) {
      opt_halves.zero_grad();
      mse_loss(halves_model->forward(rows(xs, h * half, half)), rows(ys, h * half, half)).backward();
      g[h] = grads_of(*halves_model);
    }
    auto params = halves_model->parameters();
    for (std::size_t k = 0; k < params.size(); ++k) params[k].set_grad(Array<double>((g[0][k] + g[1][k]) / 2.0));
    opt_halves.step();

    // One process on the whole batch.
    opt_whole.zero_grad();
    mse_loss(whole_model->forward(rows(xs, 0, kBatch)), rows(ys, 0, kBatch)).backward();
    opt_whole.step();
  }
  const auto ddp_params = ddp_model->named_parameters();
  const auto halves_params = halves_model->parameters();
  const auto whole_params = whole_model->parameters();
  double worst = 0;
  for (std::size_t k = 0; k < ddp_params.size(); ++k) {
    EXPECT_EQ(ddp_params[k].second.value(), halves_params[k].value()) << ddp_params[k].first;
    worst = std::max(worst, max_abs_diff(ddp_params[k].second.value(), whole_params[k].value()));
    // And the replicas are identical.
    const auto gathered = dist::all_gather(ddp_params[k].second);
    EXPECT_EQ(gathered[0].value(), gathered[1].value()) << ddp_params[k].first;
  }
  EXPECT_LT(worst, 1e-6);
  // The models did train (the comparison is not between untouched weights).
  EXPECT_GT(max_abs_diff(ddp_params[0].second.value(), make_encoder(7)->parameters()[0].value()), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(BucketCaps, DdpAdam, ::testing::Values(25.0, 1e-6));

TEST(Ddp, ConstructionBroadcastsRank0sParameters) {
  auto model = make_encoder(1000 + rank());  // different weights on each rank
  const auto before = model->state_dict();
  DDP ddp(model);
  EXPECT_TRUE(ddp.module() == model);
  for (const auto& [name, p] : model->named_parameters()) {
    const auto all = dist::all_gather(p);
    for (int r = 1; r < world(); ++r) EXPECT_EQ(all[r].value(), all[0].value()) << name;
    if (rank() == 0) {
      EXPECT_EQ(p.value(), before.at(name)) << name;
    }
  }
  if (rank() != 0) {
    double moved = 0;
    for (const auto& [name, p] : model->named_parameters()) moved = std::max(moved, max_abs_diff(p.value(), before.at(name)));
    EXPECT_GT(moved, 0.0);
  }
}

TEST(Ddp, MismatchedModelsFailOnEveryRankWithAMessage) {
  if (world() < 2) GTEST_SKIP() << "needs 2 ranks";
  {
    auto model = std::make_shared<nn::Linear<double>>(4, rank() == 1 ? 9 : 8);
    const std::string error = error_of([&] { dist::DistributedDataParallel<nn::Linear<double>> ddp(model); });
    EXPECT_NE(error.find("DistributedDataParallel: rank 1's model differs from rank 0's"), std::string::npos) << error;
    EXPECT_NE(error.find("parameter \"weight\" of shape (9, 4) on rank 1 but parameter \"weight\" of shape (8, 4) "
                         "on rank 0"),
              std::string::npos)
        << error;
  }
  {
    // Another layer count: the first entry that differs is a missing one.
    manual_seed(3);
    auto layer = std::make_shared<nn::TransformerEncoderLayer<double>>(
        nn::TransformerEncoderLayerOptions(kModel, 2).dim_feedforward(16).dropout(0.0));
    auto model = std::make_shared<Encoder>(layer, rank() == 1 ? 1 : 2);
    const std::string error = error_of([&] { DDP ddp(model); });
    EXPECT_NE(error.find("rank 1's model differs from rank 0's (12 vs 24 parameters and buffers)"), std::string::npos)
        << error;
  }
  {
    // Different bucket caps would pair different buckets in the all-reduces.
    auto model = std::make_shared<nn::Linear<double>>(4, 8);
    const std::string error = error_of([&] {
      dist::DistributedDataParallel<nn::Linear<double>> ddp(
          model, dist::DistributedDataParallelOptions().bucket_cap_mb(rank() == 1 ? 1.0 : 25.0));
    });
    EXPECT_NE(error.find("bucket_cap_mb 1 on rank 1 but bucket_cap_mb 25 on rank 0"), std::string::npos) << error;
  }
  // No rank is stuck in a collective: this one completes on all.
  EXPECT_TRUE(all_ranks(true));
}

TEST(Ddp, BucketsInReverseRegistrationOrderUnderTheCap) {
  auto model = std::make_shared<nn::Sequential<double>>();
  model->push_back(std::make_shared<nn::Linear<double>>(64, 64));  // 0.weight 4096 doubles = 32 KiB
  model->push_back(std::make_shared<nn::Linear<double>>(64, 2));   // 1.weight 128, 1.bias 2
  // 33 KiB: 1.bias + 1.weight + 0.bias fit (132*8+512 bytes), 0.weight would pass the cap.
  dist::DistributedDataParallel<nn::Sequential<double>> ddp(
      model, dist::DistributedDataParallelOptions().bucket_cap_mb(33.0 / 1024));
  EXPECT_EQ(ddp.bucket_parameter_names(),
            (std::vector<std::vector<std::string>>{{"1.bias", "1.weight", "0.bias"}, {"0.weight"}}));
  dist::DistributedDataParallel<nn::Sequential<double>> one(model);
  EXPECT_EQ(one.bucket_parameter_names().size(), 1u);
}

TEST(Ddp, NoSyncAccumulatesLocallyAndTheNextBackwardAveragesTheSum) {
  if (world() != 2) GTEST_SKIP() << "needs 2 ranks";
  auto model = std::make_shared<nn::Linear<double>>(3, 2);
  auto reference = std::make_shared<nn::Linear<double>>(3, 2);
  dist::DistributedDataParallel<nn::Linear<double>> ddp(model);
  reference->load_state_dict(model->state_dict());
  auto batch = [](std::uint64_t seed, int r) {
    Generator g(seed + 10 * std::uint64_t(r));
    return randn<double>({4, 3}, g);
  };
  auto loss_of = [](nn::Module<double>& m, const Tensor<double>& x) { return sum(m.forward(x) * m.forward(x)); };

  // Each rank's local sum A_r + B_r, computed in one process.
  std::vector<std::vector<Array<double>>> local(2), only_a(2);
  for (int r = 0; r < 2; ++r) {
    reference->zero_grad(true);
    loss_of(*reference, batch(1, r)).backward();
    only_a[r] = grads_of(*reference);
    loss_of(*reference, batch(2, r)).backward();
    local[r] = grads_of(*reference);
  }

  model->zero_grad(true);
  {
    auto guard = ddp.no_sync();
    sum(ddp.forward(batch(1, rank())) * ddp.forward(batch(1, rank()))).backward();
  }
  // Not synchronized: this rank's own gradient, unlike the other rank's.
  EXPECT_EQ(grads_of(*model), only_a[rank()]);
  EXPECT_NE(only_a[0], only_a[1]);
  sum(ddp.forward(batch(2, rank())) * ddp.forward(batch(2, rank()))).backward();
  const auto got = grads_of(*model);
  for (std::size_t k = 0; k < got.size(); ++k)
    EXPECT_EQ(got[k], Array<double>((local[0][k] + local[1][k]) / 2.0)) << "parameter " << k;
}

TEST(Ddp, UnusedParameterOnOneRankContributesZeros) {
  if (world() != 2) GTEST_SKIP() << "needs 2 ranks";
  // Rank 1 never uses the second layer: its all-reduce still pairs with rank 0's.
  auto model = std::make_shared<nn::Sequential<double>>();
  model->push_back(std::make_shared<nn::Linear<double>>(2, 2));
  model->push_back(std::make_shared<nn::Linear<double>>(2, 2));
  dist::DistributedDataParallel<nn::Sequential<double>> ddp(
      model, dist::DistributedDataParallelOptions().bucket_cap_mb(1e-6));
  auto first = std::dynamic_pointer_cast<nn::Linear<double>>(model->named_children()[0].second);
  auto second = std::dynamic_pointer_cast<nn::Linear<double>>(model->named_children()[1].second);
  model->zero_grad(true);
  auto x = from_vector<double>({1.0, 2.0}, {1, 2});
  auto out = ddp.forward(x);  // arms the backward; rank 1 then backpropagates through layer 0 only
  auto loss = rank() == 0 ? sum(out) : sum(first->forward(x));
  loss.backward();
  Array<double> w2 = second->weight.grad();
  const auto all = dist::all_gather(Tensor<double>(w2));
  EXPECT_EQ(all[0].value(), all[1].value());
  EXPECT_NE(xt::amax(xt::abs(w2))(), 0.0);
}
