// utils::checkpoint (torch.utils.checkpoint, use_reentrant=False): the same gradients, bit for bit,
// as without it, dropout's mask replayed and the generator left as without it, the gradient of a
// parameter reached when no input requires grad (the frozen-base trap), create_graph through it,
// the intermediates dropped after the forward, several outputs, and the refusals.
#include "test_util.hpp"

#include <memory>
#include <string>
#include <vector>

#include <xgrad/backend/allocator.hpp>
#include <xgrad/core/checkpoint.hpp>

using namespace xgrad;
using namespace xgrad::testing;

namespace {

// A block with parameters and dropout (the default generator): x (4, 3) -> (4, 2).
struct Block {
  T64 w = input({3, 5}, 11);
  T64 b = input({5}, 12);
  T64 v = input({5, 2}, 13);
  T64 operator()(const T64& x) const { return matmul(dropout(tanh(matmul(x, w) + b), 0.4, true), v); }
  std::vector<T64> params() const { return {w, b, v}; }
};

// The gradients of sum(f(x)^2) with respect to x (when it requires grad) and the block's
// parameters, with the default generator seeded first; `after` gets the generator's state once
// the backward is done.
template <class F>
std::vector<Array<double>> gradients(const Block& block, const T64& x, F f, GeneratorState* after = nullptr) {
  manual_seed(42);
  for (auto p : block.params()) p.zero_grad();
  if (x.requires_grad()) T64(x).zero_grad();
  T64 y = f(x);
  sum(y * y).backward();
  if (after != nullptr) *after = default_generator().get_state();
  std::vector<Array<double>> g;
  if (x.requires_grad()) g.push_back(x.grad());
  for (const auto& p : block.params()) g.push_back(p.grad());
  return g;
}

void expect_bitwise_equal(const std::vector<Array<double>>& a, const std::vector<Array<double>>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i] == b[i]) << "gradient " << i << " differs";
}

}  // namespace

TEST(Checkpoint, SameGradientsBitForBitAndTheSameDropoutMask) {
  const Block block;
  const T64 x = input({4, 3}, 1);
  GeneratorState plain_after, checkpointed_after;
  const auto plain = gradients(block, x, block, &plain_after);
  const auto checkpointed = gradients(
      block, x, [&](const T64& in) { return utils::checkpoint<double>(block, in); }, &checkpointed_after);
  expect_bitwise_equal(plain, checkpointed);
  EXPECT_TRUE(plain_after == checkpointed_after) << "the recompute moved the default generator";
}

TEST(Checkpoint, WithoutPreservingTheRngStateTheMaskDiffers) {
  const Block block;
  const T64 x = input({4, 3}, 1);
  const auto plain = gradients(block, x, block);
  const auto unpreserved = gradients(block, x, [&](const T64& in) {
    return utils::checkpoint<double>(block, in, utils::CheckpointOptions().preserve_rng_state(false));
  });
  EXPECT_FALSE(plain[1] == unpreserved[1]);  // a new mask: what preserve_rng_state is for
}

// With a frozen base, a layer's input does not require grad while an adapter inside does: the
// reentrant form gives the adapter no gradient; this one gives it its own.
TEST(Checkpoint, FrozenBaseInputsStillTrainTheParametersInside) {
  const Block block;
  T64 x = input({4, 3}, 1);
  x.requires_grad_(false);
  const auto plain = gradients(block, x, block);
  const auto checkpointed = gradients(block, x, [&](const T64& in) { return utils::checkpoint<double>(block, in); });
  ASSERT_EQ(checkpointed.size(), 3u);
  expect_bitwise_equal(plain, checkpointed);
  EXPECT_FALSE(x.has_grad());
}

TEST(Checkpoint, NestedCheckpointsAndAChainOfThem) {
  const Block first, second;
  const Block& inner = first;
  const T64 x = input({4, 2}, 3);
  const T64 adapt = input({2, 3}, 4);
  const auto chain = [&](const T64& in) { return second(matmul(first(matmul(in, adapt)), adapt)); };
  const auto plain = gradients(first, x, chain);
  const auto checkpointed = gradients(first, x, [&](const T64& in) {
    const T64 h = utils::checkpoint<double>([&](const T64& a) { return matmul(inner(matmul(a, adapt)), adapt); }, in);
    return utils::checkpoint<double>(
        [&](const T64& a) { return second(utils::checkpoint<double>([](const T64& z) { return z * 1.0; }, a)); }, h);
  });
  expect_bitwise_equal(plain, checkpointed);
}

TEST(Checkpoint, TheIntermediatesAreDroppedAfterTheForward) {
  const Block block;
  const T64 x = input({4, 3}, 1);
  std::weak_ptr<Node<double>> inside;
  const auto f = [&](const T64& in) {
    T64 hidden = tanh(matmul(in, block.w));
    inside = hidden.node();
    return matmul(hidden, input({5, 2}, 5));
  };
  T64 kept = f(x);
  EXPECT_FALSE(inside.expired()) << "without checkpointing the graph holds the intermediate";
  T64 y = utils::checkpoint<double>(f, x);
  EXPECT_TRUE(inside.expired()) << "the checkpointed forward kept an intermediate";
  sum(y).backward();  // the recompute makes it again
  EXPECT_TRUE(x.has_grad());
}

TEST(Checkpoint, HoldsLessMemoryAfterTheForward) {
  if (!array_cache_enabled()) GTEST_SKIP() << "live bytes are counted by the array cache";
  Tensor<float> w = randn<float>({256, 256}, true);
  Tensor<float> x = randn<float>({64, 256}, true);
  const auto deep = [&](const Tensor<float>& in) {
    Tensor<float> h = in;
    for (int i = 0; i < 8; ++i) h = tanh(matmul(h, w));
    return h;
  };
  const std::size_t before = array_cache_stats().live_bytes;
  Tensor<float> plain = deep(x);
  const std::size_t plain_bytes = array_cache_stats().live_bytes - before;
  plain = Tensor<float>();
  const std::size_t before2 = array_cache_stats().live_bytes;
  Tensor<float> y = utils::checkpoint<float>(deep, x);
  const std::size_t checkpointed_bytes = array_cache_stats().live_bytes - before2;
  // Without: eight (64, 256) activations saved, and more; with: the output alone.
  EXPECT_GE(plain_bytes, 8 * 64 * 256 * sizeof(float));
  EXPECT_LE(checkpointed_bytes, 2 * 64 * 256 * sizeof(float));
}

TEST(Checkpoint, SeveralOutputsOneUnused) {
  const Block block;
  const T64 x = input({4, 3}, 1);
  const auto two = [&](const std::vector<T64>& in) { return std::vector<T64>{block(in[0]), tanh(in[0])}; };
  const auto plain = gradients(block, x, [&](const T64& in) { return two({in})[0]; });
  const auto checkpointed = gradients(block, x, [&](const T64& in) { return utils::checkpoint<double>(two, {in})[0]; });
  expect_bitwise_equal(plain, checkpointed);
}

TEST(Checkpoint, CreateGraphThroughTheBlock) {
  const Block block;
  const T64 x = input({4, 3}, 1);
  const auto second_order = [&](const std::function<T64(const T64&)>& f) {
    manual_seed(7);
    const T64 y = f(x);
    const T64 gx = autograd::grad({sum(y * y)}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
    return autograd::grad({sum(gx * gx)}, {x, block.w})[1].value();  // d/dw of |dL/dx|^2
  };
  const Array<double> plain = second_order(block);
  const Array<double> checkpointed = second_order([&](const T64& in) { return utils::checkpoint<double>(block, in); });
  // The same terms, summed in another order where the two graphs meet (rounding only).
  EXPECT_TRUE(xt::allclose(plain, checkpointed, 1e-12, 1e-12))
      << "largest difference " << xt::amax(xt::abs(plain - checkpointed))();
  EXPECT_GT(xt::amax(xt::abs(plain))(), 1e-3);  // not vacuous
}

TEST(Checkpoint, UnderNoGradItJustRuns) {
  const Block block;
  const T64 x = input({4, 3}, 1);
  const NoGradGuard no_grad;
  manual_seed(3);
  const T64 y = utils::checkpoint<double>(block, x);
  EXPECT_FALSE(y.requires_grad());
  manual_seed(3);
  EXPECT_TRUE(y.value() == block(x).value());
}

TEST(Checkpoint, AParameterChangedBeforeTheBackwardIsRefused) {
  const Block block;
  const T64 x = input({4, 3}, 1);
  T64 y = utils::checkpoint<double>(block, x);
  T64 w = block.w;
  w.mutable_value() *= 2.0;
  EXPECT_THROW(sum(y).backward(), std::runtime_error);
}

TEST(Checkpoint, Errors) {
  const Block block;
  const T64 x = input({4, 3}, 1);
  const std::string undefined = error_of([&] {
    utils::checkpoint<double>([](const std::vector<T64>& in) { return in; }, {x, T64()});
  });
  EXPECT_NE(undefined.find("input 1 of 2 is undefined"), std::string::npos) << undefined;
  const std::string nothing =
      error_of([&] { utils::checkpoint<double>([](const std::vector<T64>&) { return std::vector<T64>{}; }, {x}); });
  EXPECT_NE(nothing.find("returned no tensor"), std::string::npos) << nothing;
  const std::string undefined_out = error_of([&] { utils::checkpoint<double>([](const T64&) { return T64(); }, x); });
  EXPECT_NE(undefined_out.find("output 0 of 1"), std::string::npos) << undefined_out;
  const std::string empty = error_of([&] { utils::checkpoint<double>(utils::CheckpointFunction1<double>(), x); });
  EXPECT_NE(empty.find("the function is empty"), std::string::npos) << empty;
  // A function whose outputs change between the forward and the recompute.
  int calls = 0;
  T64 y = utils::checkpoint<double>([&](const T64& in) { return ++calls == 1 ? in * 2.0 : sum(in); }, x);
  const std::string changed = error_of([&] { sum(y).backward(); });
  EXPECT_NE(changed.find("has shape"), std::string::npos) << changed;
}
