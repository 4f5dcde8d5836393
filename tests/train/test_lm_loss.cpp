// train::lm_loss, the language model's loss (nanoGPT's cross entropy over the flattened logits and
// targets): its value on logits (B, T, V) worked by hand, the positions of ignore_index left out,
// and its gradient reaching the logits in their own shape.
#include <gtest/gtest.h>

#include <cmath>

#include <xgrad/xgrad.hpp>

namespace {

// B = 2, T = 2, V = 3: positions with uniform logits (loss ln 3) and logits (1, 2, 3) whose target
// is 2 (loss ln(e + e^2 + e^3) - 3) or 0 (loss ln(e + e^2 + e^3) - 1).
TEST(LmLoss, IsTheMeanCrossEntropyOverEveryPositionByHand) {
  const auto logits = xgrad::from_vector<double>({0, 0, 0, 1, 2, 3, 1, 2, 3, 0, 0, 0}, {2, 2, 3}, true);
  const xgrad::IndexArray targets = {{1, 2}, {0, -100}};
  const double uniform = std::log(3.0), lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  const xgrad::Tensor<double> loss = xgrad::train::lm_loss(logits, targets);
  EXPECT_EQ(loss.dim(), 0);
  EXPECT_NEAR(loss.item(), (uniform + (lse - 3) + (lse - 1)) / 3, 1e-14);  // the -100 position left out
  // Another ignore_index: every position counts but the one of target 2.
  EXPECT_NEAR(xgrad::train::lm_loss(logits, xgrad::IndexArray{{1, 2}, {0, 1}}, 2).item(),
              (uniform + (lse - 1) + uniform) / 3, 1e-14);
  loss.backward();
  ASSERT_TRUE(logits.has_grad());
  const xgrad::Array<double>& grad = logits.grad();
  EXPECT_EQ(xgrad::Shape(grad.shape().begin(), grad.shape().end()), (xgrad::Shape{2, 2, 3}));
  // The ignored position gets no gradient; a counted one gets (softmax - one_hot) / 3.
  for (std::size_t v = 0; v < 3; ++v) EXPECT_EQ(grad(1, 1, v), 0.0);
  EXPECT_NEAR(grad(0, 0, 1), (1.0 / 3 - 1) / 3, 1e-15);
}

}  // namespace
