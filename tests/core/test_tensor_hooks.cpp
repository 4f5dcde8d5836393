// Tensor::register_hook (torch.Tensor.register_hook): a hook sees the gradient flowing into its
// tensor and may replace it, on leaves and non-leaves; order, remove(), retain_graph, errors.
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
}  // namespace

// y = 2x, loss = sum(3y): dloss/dy = 3, replaced by 30, so dloss/dx = 60.
TEST(TensorHook, NonLeafHookReplacesTheGradientThatFlowsOn) {
  auto x = vec({1, 2, 3});
  auto y = x * 2.0;
  std::vector<Array<double>> seen;
  y.register_hook([&](const Array<double>& g) {
    seen.push_back(g);
    return Array<double>(g * 10.0);
  });
  sum(y * 3.0).backward();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], arr({3, 3, 3}));
  EXPECT_EQ(x.grad(), arr({60, 60, 60}));
  EXPECT_FALSE(y.has_grad());  // a non-leaf keeps no gradient
}

// x used twice (2x + 3x): the hook runs once with this backward's total, 5, before it is added to
// grad(); a second backward's hook sees 5 again, not the accumulated grad().
TEST(TensorHook, LeafHookSeesThisBackwardsTotalBeforeAccumulation) {
  auto x = vec({1, 2, 3});
  std::vector<Array<double>> seen;
  x.register_hook([&](const Array<double>& g) {
    seen.push_back(g);
    return Array<double>(g * 2.0);
  });
  sum(x * 2.0 + x * 3.0).backward();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], arr({5, 5, 5}));
  EXPECT_EQ(x.grad(), arr({10, 10, 10}));
  sum(x * 2.0 + x * 3.0).backward();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1], arr({5, 5, 5}));
  EXPECT_EQ(x.grad(), arr({20, 20, 20}));
}

TEST(TensorHook, RunInRegistrationOrderEachSeeingThePreviousResult) {
  auto x = vec({1, 2});
  auto y = x * 1.0;
  std::vector<std::string> order;
  std::vector<Array<double>> seen;
  y.register_hook([&](const Array<double>& g) {
    order.push_back("double");
    return Array<double>(g * 2.0);
  });
  y.register_hook([&](const Array<double>& g) {  // returns nothing: keeps the gradient
    order.push_back("look");
    seen.push_back(g);
  });
  y.register_hook([&](const Array<double>& g) -> std::optional<Array<double>> {
    order.push_back("plus one");
    return Array<double>(g + 1.0);
  });
  y.register_hook([&](const Array<double>&) -> std::optional<Array<double>> {
    order.push_back("keep");
    return std::nullopt;
  });
  sum(y).backward();
  EXPECT_EQ(order, (std::vector<std::string>{"double", "look", "plus one", "keep"}));
  EXPECT_EQ(seen.at(0), arr({2, 2}));
  EXPECT_EQ(x.grad(), arr({3, 3}));
}

TEST(TensorHook, ExpressionResultIsEvaluated) {
  auto x = vec({1, 2});
  x.register_hook([](const Array<double>& g) { return g * 4.0; });  // an xtensor expression
  sum(x).backward();
  EXPECT_EQ(x.grad(), arr({4, 4}));
}

TEST(TensorHook, RemovedHookIsNotCalled) {
  auto x = vec({1, 2});
  auto y = x * 3.0;
  int calls = 0;
  RemovableHandle h = y.register_hook([&](const Array<double>& g) {
    ++calls;
    return Array<double>(g * 0.0);
  });
  RemovableHandle hx = x.register_hook([&](const Array<double>& g) {
    ++calls;
    return Array<double>(g * 0.0);
  });
  h.remove();
  hx.remove();
  h.remove();  // twice: nothing
  sum(y).backward();
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(x.grad(), arr({3, 3}));
}

TEST(TensorHook, HookMayRemoveItselfWhileRunning) {
  auto x = vec({1});
  int calls = 0;
  RemovableHandle h;
  h = x.register_hook([&](const Array<double>&) {
    ++calls;
    h.remove();
  });
  sum(x * 2.0).backward();
  sum(x * 2.0).backward();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(x.grad(), arr({4}));
}

// y = x * x kept with retain_graph: each backward runs y's hook once (dloss/dy = 1, made 2), and
// x.grad() = 2 * (2 * 2x) after two.
TEST(TensorHook, EachBackwardWithRetainGraphRunsTheHook) {
  auto x = vec({1, 3});
  auto y = x * x;
  int calls = 0;
  y.register_hook([&](const Array<double>& g) {
    ++calls;
    return Array<double>(g * 2.0);
  });
  auto loss = sum(y);
  loss.backward({}, /*retain_graph=*/true);
  loss.backward();
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(x.grad(), arr({8, 24}));
}

TEST(TensorHook, OnTheRootAndOnALeafRoot) {
  auto x = vec({1, 2});
  auto loss = sum(x * 5.0);
  loss.register_hook([](const Array<double>& g) { return Array<double>(g * 2.0); });
  loss.backward();
  EXPECT_EQ(x.grad(), arr({10, 10}));

  auto s = vec({4});
  std::vector<Array<double>> seen;
  s.register_hook([&](const Array<double>& g) { seen.push_back(g); });
  s.backward();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], arr({1}));
  EXPECT_EQ(s.grad(), arr({1}));
}

// The post-accumulate-grad hook runs after the tensor hook, on the grad() that holds its result.
TEST(TensorHook, PostAccumulateGradHookSeesTheReplacedGradient) {
  auto x = vec({1, 2});
  std::vector<std::string> order;
  Array<double> at_post;
  x.register_post_accumulate_grad_hook([&](Tensor<double>& t) {
    order.push_back("post");
    at_post = t.grad();
  });
  x.register_hook([&](const Array<double>& g) {
    order.push_back("hook");
    return Array<double>(g * 3.0);
  });
  sum(x * 2.0).backward();
  EXPECT_EQ(order, (std::vector<std::string>{"hook", "post"}));
  EXPECT_EQ(at_post, arr({6, 6}));
}

// A non-leaf used by two ops: its hook sees the total.
TEST(TensorHook, OnANonLeafUsedTwice) {
  auto x = vec({1, 2});
  auto y = x * 1.0;
  std::vector<Array<double>> seen;
  y.register_hook([&](const Array<double>& g) { seen.push_back(g); });
  sum(y * 2.0 + y * y).backward();  // dloss/dy = 2 + 2y = {4, 6}
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], arr({4, 6}));
  EXPECT_EQ(x.grad(), arr({4, 6}));
}

TEST(TensorHook, ErrorsNameWhatWasExpected) {
  auto c = vec({1, 2}, /*requires_grad=*/false);
  try {
    c.register_hook([](const Array<double>&) {});
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("cannot register a hook on a tensor that doesn't require gradient"),
              std::string::npos)
        << e.what();
  }
  auto x = vec({1, 2});
  auto y = x * 2.0;
  y.register_hook([](const Array<double>&) { return Array<double>(xt::ones<double>({3})); });
  try {
    sum(y).backward();
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("returned a gradient of shape"), std::string::npos) << e.what();
  }
  // A leaf hook that throws leaves grad() as it was.
  auto w = vec({1, 2});
  sum(w).backward();
  w.register_hook([](const Array<double>&) -> std::optional<Array<double>> { throw std::runtime_error("boom"); });
  EXPECT_THROW(sum(w * 2.0).backward(), std::runtime_error);
  EXPECT_EQ(w.grad(), arr({1, 1}));
}

// An empty std::function or a null function pointer is refused at registration; it used to be
// wrapped and fail in the next backward as a bare std::bad_function_call.
TEST(TensorHook, AnEmptyHookIsRefusedAtRegistration) {
  auto x = vec({1, 2, 3});
  const std::string expected =
      "register_hook: the hook is empty (an empty std::function or a null function "
      "pointer); expected a callable taking const Array<T>& or Tensor<T>";
  std::function<void(const Array<double>&)> looks;
  std::function<Array<double>(const Array<double>&)> replaces;
  void (*pointer)(const Array<double>&) = nullptr;
  EXPECT_EQ(error_of([&] { x.register_hook(looks); }), expected);
  EXPECT_EQ(error_of([&] { x.register_hook(replaces); }), expected);
  EXPECT_EQ(error_of([&] { x.register_hook(pointer); }), expected);
  EXPECT_EQ(error_of([&] { x.register_hook(std::function<std::optional<Array<double>>(const Array<double>&)>()); }),
            expected);
  std::function<Tensor<double>(Tensor<double>)> libtorch;
  Tensor<double> (*libtorch_pointer)(const Tensor<double>&) = nullptr;
  EXPECT_EQ(error_of([&] { x.register_hook(libtorch); }), expected);
  EXPECT_EQ(error_of([&] { x.register_hook(libtorch_pointer); }), expected);
  sum(x).backward();  // nothing was registered
  EXPECT_EQ(x.grad(), arr({1, 1, 1}));
}

// LibTorch's forms: the hook takes a Tensor (by value or const&) and returns a Tensor (the
// replacement; an undefined one keeps the gradient) or nothing. They used to fail to compile with
// pages of template errors. y = 2x, loss = sum(3y): dloss/dy = 3.
TEST(TensorHook, LibTorchFormsTakingATensor) {
  auto x = vec({1, 2, 3});
  auto y = x * 2.0;
  std::vector<Array<double>> seen;
  std::vector<bool> seen_requires_grad;
  y.register_hook([](Tensor<double> grad) { return grad * 2; });  // as LibTorch writes it
  y.register_hook([&](const Tensor<double>& grad) {               // void: only looks
    seen.push_back(grad.value());
    seen_requires_grad.push_back(grad.requires_grad());
  });
  y.register_hook([](const Tensor<double>&) { return Tensor<double>(); });  // undefined: keeps it
  y.register_hook(std::function<Tensor<double>(Tensor<double>)>([](Tensor<double> g) { return g + 1.0; }));
  sum(y * 3.0).backward();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], arr({6, 6, 6}));
  EXPECT_EQ(seen_requires_grad, std::vector<bool>{false});
  EXPECT_EQ(x.grad(), arr({14, 14, 14}));  // (3 * 2 + 1) * 2

  // On a leaf, through a function pointer, and a wrong shape is refused as for the Array form.
  auto w = vec({1, 2});
  Tensor<double> (*triple)(const Tensor<double>&) = [](const Tensor<double>& g) { return g * 3.0; };
  RemovableHandle h = w.register_hook(triple);
  sum(w * 2.0).backward();
  EXPECT_EQ(w.grad(), arr({6, 6}));
  h.remove();
  w.register_hook([](Tensor<double>) { return from_vector<double>({1, 2, 3}, {3}); });
  EXPECT_NE(error_of([&] { sum(w).backward(); }).find("returned a gradient of shape"), std::string::npos);
}
