// Tensor::register_post_accumulate_grad_hook and queue_backward_callback: when hooks run, how
// often, in which order, with which gradient; removal; retain_graph; errors.
#include "test_util.hpp"

#include <string>
#include <vector>

using namespace xgrad;
using namespace xgrad::testing;

TEST(PostAccumulateGradHook, RunsOnceWithEveryContributionAccumulated) {
  // x feeds two nodes at different depths: loss = sum((x * w) * x) = sum(w x^2); dloss/dx = 2 w x.
  auto x = from_vector<double>({1.0, -2.0, 3.0}, {3}, true);
  auto w = from_vector<double>({0.5, 4.0, -1.0}, {3}, false);
  int calls = 0;
  Array<double> seen;
  x.register_post_accumulate_grad_hook([&](Tensor<double>& t) {
    ++calls;
    seen = t.grad();
  });
  auto loss = sum((x * w) * x);
  loss.backward();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, (Array<double>{1.0, -16.0, -6.0}));
  EXPECT_EQ(x.grad(), seen);
}

TEST(PostAccumulateGradHook, ArgumentIsTheLeafItself) {
  auto x = from_vector<double>({2.0}, {1}, true);
  bool same = false;
  x.register_post_accumulate_grad_hook([&](Tensor<double>& t) { same = t.same(x); });
  sum(x * 3.0).backward();
  EXPECT_TRUE(same);
}

TEST(PostAccumulateGradHook, LeavesCompleteInReverseTopologicalOrder) {
  // h1 = x * w1; h2 = h1 * w2; loss = sum(h2 * w3): w3 is complete first, w1 last, and when w3's
  // hook runs the backward has not reached w1 yet (what lets DDP overlap its all-reduces).
  auto x = from_vector<double>({1.0, 2.0}, {2}, false);
  auto w1 = from_vector<double>({1.5, -1.0}, {2}, true);
  auto w2 = from_vector<double>({2.0, 0.5}, {2}, true);
  auto w3 = from_vector<double>({-3.0, 1.0}, {2}, true);
  std::vector<std::string> order;
  bool w1_had_grad_when_w3_done = true;
  w1.register_post_accumulate_grad_hook([&](Tensor<double>&) { order.push_back("w1"); });
  w2.register_post_accumulate_grad_hook([&](Tensor<double>&) { order.push_back("w2"); });
  // Reads w1's node through a raw pointer: a handle captured in a hook stored on w3 is fine
  // (it is w3's own handle that must not be captured).
  Node<double>* w1_node = w1.node().get();
  w3.register_post_accumulate_grad_hook([&](Tensor<double>&) {
    order.push_back("w3");
    w1_had_grad_when_w3_done = w1_node->has_grad;
  });
  sum(((x * w1) * w2) * w3).backward();
  EXPECT_EQ(order, (std::vector<std::string>{"w3", "w2", "w1"}));
  EXPECT_FALSE(w1_had_grad_when_w3_done);
}

TEST(PostAccumulateGradHook, RemovedHookIsNotCalled) {
  auto x = from_vector<double>({1.0}, {1}, true);
  int a = 0, b = 0;
  RemovableHandle ha = x.register_post_accumulate_grad_hook([&](Tensor<double>&) { ++a; });
  x.register_post_accumulate_grad_hook([&](Tensor<double>&) { ++b; });
  sum(x * 2.0).backward();
  ha.remove();
  ha.remove();  // a second remove does nothing
  sum(x * 2.0).backward();
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 2);
}

TEST(PostAccumulateGradHook, HookMayRemoveItselfWhileRunning) {
  auto x = from_vector<double>({1.0}, {1}, true);
  int calls = 0;
  RemovableHandle h;
  h = x.register_post_accumulate_grad_hook([&](Tensor<double>&) {
    ++calls;
    h.remove();
  });
  sum(x * 2.0).backward();
  sum(x * 2.0).backward();
  EXPECT_EQ(calls, 1);
}

TEST(PostAccumulateGradHook, OncePerBackwardWithRetainGraphAndAccumulatedGrad) {
  auto x = from_vector<double>({1.0, 2.0}, {2}, true);
  std::vector<Array<double>> seen;
  x.register_post_accumulate_grad_hook([&](Tensor<double>& t) { seen.push_back(t.grad()); });
  auto loss = sum(x * x);  // dloss/dx = 2x, twice
  loss.backward({}, /*retain_graph=*/true);
  loss.backward();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], (Array<double>{2.0, 4.0}));
  EXPECT_EQ(seen[1], (Array<double>{4.0, 8.0}));
}

TEST(PostAccumulateGradHook, RunsWhenTheRootIsTheLeaf) {
  auto x = from_vector<double>({1.0, 2.0}, {2}, true);
  int calls = 0;
  x.register_post_accumulate_grad_hook([&](Tensor<double>&) { ++calls; });
  x.backward(ones<double>({2}));
  EXPECT_EQ(calls, 1);
}

TEST(PostAccumulateGradHook, NotCalledForABackwardThatDoesNotReachTheLeaf) {
  auto x = from_vector<double>({1.0}, {1}, true);
  auto y = from_vector<double>({1.0}, {1}, true);
  int calls = 0;
  x.register_post_accumulate_grad_hook([&](Tensor<double>&) { ++calls; });
  sum(y * 2.0).backward();
  EXPECT_EQ(calls, 0);
}

TEST(PostAccumulateGradHook, OnlyOnLeavesThatRequireGrad) {
  auto x = from_vector<double>({1.0}, {1}, true);
  auto y = x * 2.0;
  auto c = from_vector<double>({1.0}, {1}, false);
  auto noop = [](Tensor<double>&) {};
  XGRAD_EXPECT_THROW_MSG(y.register_post_accumulate_grad_hook(noop), "cannot be registered on non-leaf tensors");
  XGRAD_EXPECT_THROW_MSG(c.register_post_accumulate_grad_hook(noop), "doesn't require gradient");
}

TEST(QueueBackwardCallback, RunsOnceAfterEveryHook) {
  auto w1 = from_vector<double>({1.0}, {1}, true);
  auto w2 = from_vector<double>({2.0}, {1}, true);
  std::vector<std::string> events;
  w1.register_post_accumulate_grad_hook([&](Tensor<double>&) {
    events.push_back("w1");
    queue_backward_callback([&] { events.push_back("end"); });
  });
  w2.register_post_accumulate_grad_hook([&](Tensor<double>&) { events.push_back("w2"); });
  // w1 is complete first (used last), the callback still runs after w2's hook.
  sum((w2 * 3.0) * w1).backward();
  EXPECT_EQ(events, (std::vector<std::string>{"w1", "w2", "end"}));
  sum((w2 * 3.0) * w1).backward();  // a new backward queues it again
  EXPECT_EQ(events.size(), 6u);
  EXPECT_EQ(events.back(), "end");
}

TEST(QueueBackwardCallback, OutsideABackwardThrows) {
  XGRAD_EXPECT_THROW_MSG(queue_backward_callback([] {}), "no backward is running");
}
