// Version counters (torch's tensor._version): a value changed in place after an op saved it for
// its backward makes that backward throw PyTorch's "modified by an inplace operation" error
// instead of computing a wrong gradient. Ops that save no value (add, sub, reshape, ...) keep
// working, and so do the optimizers' own updates between steps.
#include "test_util.hpp"

#include <string>

#include <xgrad/nn/nn.hpp>
#include <xgrad/optim/optim.hpp>

using namespace xgrad;
using namespace xgrad::testing;

namespace {

}  // namespace

TEST(VersionCounter, ChangingASavedInputThrowsNamingOpInputAndVersions) {
  // Before the version check, this gave the gradient [22, 24, 26] instead of [2, 4, 6].
  auto w = from_vector<float>({1, 2, 3}, {3}, true);
  auto y = sum(w * w);
  w.mutable_value() += 10.f;
  const std::string m = error_of([&] { y.backward(); });
  EXPECT_NE(m.find("one of the variables needed for gradient computation has been modified by an inplace "
                   "operation: mul's input"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("of shape (3) is at version 1; expected version 0"), std::string::npos) << m;
  EXPECT_FALSE(w.has_grad());
}

TEST(VersionCounter, ZeroingAMatmulOperandAfterUseThrows) {
  auto a = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3}, true);
  auto b = from_vector<double>({1, 0, 0, 1, 1, 1}, {3, 2}, true);
  auto y = sum(matmul(a, b));
  std::fill(b.mutable_value().begin(), b.mutable_value().end(), 0.0);  // two calls: version 2
  const std::string m = error_of([&] { y.backward(); });
  EXPECT_NE(m.find("matmul's input 1 of shape (3, 2) is at version 2; expected version 0"), std::string::npos) << m;
}

TEST(VersionCounter, OnlyValuesTheBackwardReadsAreChecked) {
  // dA = dC B^T reads B, not A: changing A when only A needs a gradient is fine (as PyTorch,
  // which saves A only when B requires grad).
  auto a = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3}, true);
  auto b = from_vector<double>({1, 0, 0, 1, 1, 1}, {3, 2});
  auto y = sum(matmul(a, b));
  a.mutable_value() *= 2.0;
  y.backward();
  EXPECT_EQ(a.grad(), (Array<double>{{1, 1, 2}, {1, 1, 2}}));

  // add, sub, neg, scalar mul, reshape and sum save no value.
  auto p = from_vector<double>({1, 2}, {2}, true);
  auto q = from_vector<double>({3, 4}, {2}, true);
  auto z = sum(reshape(neg(p + q) - q * 3.0, {2, 1}));
  p.mutable_value() += 1.0;
  q.mutable_value() += 1.0;
  z.backward();
  EXPECT_EQ(p.grad(), (Array<double>{-1, -1}));
  EXPECT_EQ(q.grad(), (Array<double>{-4, -4}));
}

TEST(VersionCounter, ChangingASavedOutputThrows) {
  // exp, softmax and max save their output.
  for (int op = 0; op < 3; ++op) {
    SCOPED_TRACE(op);
    auto x = from_vector<double>({0.5, -1, 2}, {3}, true);
    auto y = op == 0 ? exp(x) : op == 1 ? softmax(x, 0) : amax(x, {0});
    auto loss = sum(y * 1.0);
    y.mutable_value() *= 2.0;
    const std::string m = error_of([&] { loss.backward(); });
    EXPECT_NE(m.find(std::string(y.op()) + "'s output of shape"), std::string::npos) << m;
    EXPECT_NE(m.find("is at version 1; expected version 0"), std::string::npos) << m;
  }
}

TEST(VersionCounter, MutableValueOptimizerStepsAndLoadStateDictBumpTheVersion) {
  auto w = from_vector<float>({1, 2}, {2}, true);
  EXPECT_EQ(w.version(), 0u);
  w.mutable_value() += 1.f;
  EXPECT_EQ(w.version(), 1u);
  EXPECT_EQ(w.detach().version(), 0u);  // a new leaf

  optim::SGD<float> sgd({w}, optim::SGDOptions(0.1));
  sum(w * w).backward();
  sgd.step();
  EXPECT_EQ(w.version(), 2u);

  nn::Linear<float> lin(2, 2), other(2, 2);
  const auto before = lin.weight.version();
  lin.load_state_dict(other.state_dict());
  EXPECT_GT(lin.weight.version(), before);
}

TEST(VersionCounter, StepBetweenForwardAndBackwardThrowsLoadStateDictToo) {
  nn::Linear<double> lin(3, 2);
  const auto x = input({4, 3});
  optim::Adam<double> adam(lin.parameters(), optim::AdamOptions(0.1));
  sum(lin.forward(x) * lin.forward(x)).backward();
  auto loss = sum(lin.forward(x) * lin.forward(x));
  adam.step();  // changes the weight the new graph saved (version 1 after its initialization)
  const std::string m = error_of([&] { loss.backward(); });
  EXPECT_NE(m.find("linear's input 1 of shape (2, 3) is at version 2; expected version 1"), std::string::npos) << m;

  nn::Linear<double> other(3, 2);
  auto loss2 = sum(lin.forward(x) * lin.forward(x));
  lin.load_state_dict(other.state_dict());
  EXPECT_NE(error_of([&] { loss2.backward(); }).find("linear's input 1"), std::string::npos);
}

TEST(VersionCounter, OptimizerUpdatesBetweenStepsKeepWorking) {
  // The usual loop: forward, backward, step. Every step changes the weights in place; each new
  // forward saves their new version.
  manual_seed(3);
  nn::Linear<double> lin(3, 1);
  const auto x = input({8, 3}, 4);
  const auto target = input({8, 1}, 5);
  optim::Adam<double> adam(lin.parameters(), optim::AdamOptions(0.05));
  const auto initialized = lin.weight.version();
  double first = 0, last = 0;
  for (int step = 0; step < 20; ++step) {
    adam.zero_grad();
    auto loss = mse_loss(lin.forward(x), target);
    ASSERT_NO_THROW(loss.backward());
    adam.step();
    (step == 0 ? first : last) = loss.item();
  }
  EXPECT_LT(last, first);
  EXPECT_EQ(lin.weight.version(), initialized + 20);
}

TEST(VersionCounter, RetainedGraphStillChecksASecondBackward) {
  auto x = from_vector<double>({1, 2}, {2}, true);
  auto y = sum(log(x));
  y.backward({}, /*retain_graph=*/true);
  x.mutable_value() += 1.0;
  EXPECT_NE(error_of([&] { y.backward(); }).find("log's input 0 of shape (2) is at version 1"), std::string::npos);
}
