// autograd::grad (torch.autograd.grad without create_graph): the same numbers as backward(), no
// grad() written, only the needed part of the graph runs, tensor hooks run, allow_unused, errors.
#include "test_util.hpp"

#include <string>
#include <vector>

using namespace xgrad;
using namespace xgrad::testing;

namespace {
Array<double> arr(std::vector<double> v) {
  const std::size_t n = v.size();
  return from_vector<double>(v, {n}).value();
}
T64 seed(std::vector<double> v) { return vec(std::move(v), false); }
// The message of what f throws (std::invalid_argument), "" when it does not throw.
template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST(AutogradGrad, EqualsBackwardsGradAndLeavesGradUntouched) {
  auto x = input({4, 3}, 1);
  x.requires_grad_(false);
  auto w = input({3, 2}, 2);
  auto b = input({2}, 3);
  auto loss = [&] { return sum(tanh(matmul(x, w) + b) * tanh(matmul(x, w) + b)); };
  loss().backward();
  const Array<double> gw = w.grad(), gb = b.grad();
  w.zero_grad(true);
  b.set_grad(arr({7, 8}));

  auto g = autograd::grad(loss(), {w, b});
  ASSERT_EQ(g.size(), 2u);
  EXPECT_LT(max_abs_diff(g[0].value(), gw), 1e-12);
  EXPECT_LT(max_abs_diff(g[1].value(), gb), 1e-12);
  EXPECT_FALSE(g[0].requires_grad());
  EXPECT_FALSE(w.has_grad());           // none before, none after
  EXPECT_EQ(b.grad(), arr({7, 8}));     // as it was
}

// A leaf the loss uses but grad() is not asked about keeps its grad() too.
TEST(AutogradGrad, OtherLeavesKeepTheirGrad) {
  auto a = vec({1, 2});
  auto c = vec({3, 4});
  auto g = autograd::grad(sum(a * c), {a});
  EXPECT_EQ(g[0].value(), arr({3, 4}));
  EXPECT_FALSE(a.has_grad());
  EXPECT_FALSE(c.has_grad());
}

// y = 3x, z = sum(y * y): dz/dy = 2y = 6x, dz/dx = 18x.
TEST(AutogradGrad, NonLeafInputs) {
  auto x = vec({1, 2});
  auto y = x * 3.0;
  auto z = sum(y * y);
  auto g = autograd::grad(z, {y, x});
  EXPECT_EQ(g[0].value(), arr({6, 12}));
  EXPECT_EQ(g[1].value(), arr({18, 36}));
  EXPECT_FALSE(x.has_grad());
}

// The same input twice gets the same gradient twice.
TEST(AutogradGrad, RepeatedInput) {
  auto x = vec({1, 2});
  auto g = autograd::grad(sum(x * x), {x, x});
  EXPECT_EQ(g[0].value(), arr({2, 4}));
  EXPECT_EQ(g[1].value(), arr({2, 4}));
}

// Non-scalar output with grad_outputs (a vector-Jacobian product); several outputs add up.
TEST(AutogradGrad, GradOutputsAndSeveralOutputs) {
  auto x = vec({1, 2, 3});
  auto y = x * x;
  auto g = autograd::grad(y, {x}, {seed({1, 10, 100})});
  EXPECT_EQ(g[0].value(), arr({2, 40, 600}));
  auto y1 = x * 2.0, y2 = x * x;
  auto h = autograd::grad({y1, y2}, {x}, {seed({1, 1, 1}), seed({1, 0, 1})});
  EXPECT_EQ(h[0].value(), arr({4, 2, 8}));
  auto s = autograd::grad({sum(x), sum(x * 3.0)}, {x});  // scalar outputs: seeded with 1 each
  EXPECT_EQ(s[0].value(), arr({4, 4, 4}));
}

TEST(AutogradGrad, AllowUnused) {
  auto x = vec({1, 2});
  auto unused = vec({5});
  auto loss = sum(x * 2.0);
  auto g = autograd::grad(loss, {x, unused}, {}, /*retain_graph=*/true, /*create_graph=*/false,
                          /*allow_unused=*/true);
  EXPECT_EQ(g[0].value(), arr({2, 2}));
  EXPECT_FALSE(g[1].defined());
  const std::string m = message_of([&] { autograd::grad(loss, {x, unused}); });
  EXPECT_TRUE(contains(m, "One of the differentiated Tensors appears to not have been used in the graph. "
                          "Set allow_unused=True if this is the desired behavior."))
      << m;
}

// Only the nodes between the outputs and the inputs run their backward.
TEST(AutogradGrad, RunsOnlyTheNeededPartOfTheGraph) {
  auto a = vec({1, 2});
  auto b = vec({3, 4});
  int b_branch = 0;
  auto tb = make_result<double>("counting", Array<double>(b.value() * 2.0), {b}, [&](Node<double>& n) {
    ++b_branch;
    n.input(0).accumulate_grad(Array<double>(n.grad * 2.0));
  });
  auto loss = sum(a * 5.0 + tb);
  auto g = autograd::grad(loss, {a}, {}, /*retain_graph=*/true);
  EXPECT_EQ(g[0].value(), arr({5, 5}));
  EXPECT_EQ(b_branch, 0);
  EXPECT_FALSE(b.has_grad());
  loss.backward();  // the graph is still there, and backward() runs it all
  EXPECT_EQ(b_branch, 1);
  EXPECT_EQ(b.grad(), arr({2, 2}));
  EXPECT_EQ(a.grad(), arr({5, 5}));
}

// Tensor hooks run (on the inputs too, as in current PyTorch); post-accumulate-grad hooks do not.
TEST(AutogradGrad, TensorHooksRunPostAccumulateHooksDoNot) {
  auto x = vec({1, 2});
  auto y = x * 3.0;
  y.register_hook([](const Array<double>& g) { return Array<double>(g * 10.0); });
  x.register_hook([](const Array<double>& g) { return Array<double>(g + 1.0); });
  int post = 0;
  x.register_post_accumulate_grad_hook([&](Tensor<double>&) { ++post; });
  auto z = sum(y * y);  // dz/dy = 6x = {6, 12} -> {60, 120}; dz/dx = {180, 360} -> {181, 361}
  auto g = autograd::grad(z, {x, y}, {}, /*retain_graph=*/true);
  EXPECT_EQ(g[0].value(), arr({181, 361}));
  EXPECT_EQ(g[1].value(), arr({60, 120}));
  EXPECT_EQ(post, 0);
  EXPECT_FALSE(x.has_grad());
  z.backward();  // the same hooks through backward(): grad() gets {181, 361}
  EXPECT_EQ(x.grad(), arr({181, 361}));
  EXPECT_EQ(post, 1);
}

TEST(AutogradGrad, RetainGraph) {
  auto x = vec({1, 2});
  auto loss = sum(x * x);
  auto g1 = autograd::grad(loss, {x}, {}, /*retain_graph=*/true);
  auto g2 = autograd::grad(loss, {x});
  EXPECT_EQ(g1[0].value(), g2[0].value());
  const std::string m = message_of([&] { autograd::grad(loss, {x}); });
  EXPECT_TRUE(contains(m, "second time")) << m;
}

TEST(AutogradGrad, LeafOutput) {
  auto x = vec({2});
  auto g = autograd::grad(x, {x});  // d x / d x = 1
  EXPECT_EQ(g[0].value(), arr({1}));
  EXPECT_FALSE(x.has_grad());
}

TEST(AutogradGrad, Errors) {
  auto x = vec({1, 2});
  auto c = vec({1, 2}, /*requires_grad=*/false);
  auto y = x * 2.0;
  std::string m = message_of([&] { autograd::grad(y, {x}); });
  EXPECT_TRUE(contains(m, "grad can be implicitly created only for scalar outputs")) << m;
  m = message_of([&] { autograd::grad(y, {x}, {seed({1, 2, 3})}); });
  EXPECT_TRUE(contains(m, "Mismatch in shape: grad_output[0] has a shape of")) << m;
  m = message_of([&] { autograd::grad(sum(y), {c}); });
  EXPECT_TRUE(contains(m, "One of the differentiated Tensors does not require grad")) << m;
  m = message_of([&] { autograd::grad(sum(c), {x}); });
  EXPECT_TRUE(contains(m, "does not require grad and does not have a grad_fn")) << m;
  m = message_of([&] { autograd::grad(sum(y), {x}, {seed({1}), seed({1})}); });
  EXPECT_TRUE(contains(m, "one gradient per output")) << m;
  m = message_of([&] { autograd::grad(sum(y), {}); });
  EXPECT_TRUE(contains(m, "non-empty inputs")) << m;
}

namespace {
// y = k x with its own backward.
struct Times : autograd::Function<Times> {
  static T64 forward(autograd::AutogradContext<double>* ctx, const T64& x, double k) {
    ctx->saved_data["k"] = k;
    return T64(Array<double>(x.value() * k));
  }
  static std::vector<T64> backward(autograd::AutogradContext<double>* ctx, std::vector<T64> g) {
    return {T64(Array<double>(g[0].value() * std::any_cast<double>(ctx->saved_data.at("k"))))};
  }
};
}  // namespace

// Through an autograd::Function, with a hook on its output: d sum(4 * hooked(3x)) / dx = 4 * 2 * 3.
TEST(AutogradGrad, ThroughAFunctionWithAHookOnItsOutput) {
  auto x = vec({1, 2});
  auto y = Times::apply(x, 3.0);
  y.register_hook([](const Array<double>& g) { return Array<double>(g * 2.0); });
  auto g = autograd::grad(sum(y * 4.0), {x});
  EXPECT_EQ(g[0].value(), arr({24, 24}));
  EXPECT_FALSE(x.has_grad());
}

// A leaf that requires grad but only the graph holds (made inside the expression) has its grad()
// set aside like any other leaf the pass writes to; the pass frees the graph (no retain_graph),
// and the leaf must still be there when its grad() is put back, then go with the graph.
TEST(AutogradGrad, ALeafOnlyTheGraphHoldsOutlivesThePass) {
  T64 x = from_vector<double>({1.0, 2.0}, {1, 2}, true);
  std::weak_ptr<Node<double>> inner;
  T64 loss;
  {
    T64 w = from_vector<double>({3.0, 4.0}, {2, 1}, true);
    inner = w.node();
    loss = sum(matmul(x, w));
  }
  ASSERT_FALSE(inner.expired()) << "the graph holds the leaf";
  const auto g = autograd::grad({loss}, {x});
  EXPECT_EQ(g[0].value(), from_vector<double>({3.0, 4.0}, {1, 2}).value());
  EXPECT_TRUE(inner.expired()) << "freed with the graph once its grad() was put back";
}
