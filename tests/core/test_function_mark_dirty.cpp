// autograd::Function's ctx->mark_dirty (LibTorch's): an in-place custom op returns its input, whose
// version is bumped and whose history moves below the Function's node; what saved the input before
// refuses it; leaves that require grad and dirty inputs not returned are refused. Also: the
// engine's and the context's internals are not public.
#include "test_util.hpp"

#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

using namespace xgrad;
using namespace xgrad::testing;
using xgrad::autograd::AutogradContext;

namespace {

// x *= 2 in place.
struct InplaceDouble : autograd::Function<InplaceDouble> {
  static T64 forward(AutogradContext<double>* ctx, T64 x) {
    x.mutable_value() *= 2.0;
    ctx->mark_dirty({x});
    return x;
  }
  static std::vector<T64> backward(AutogradContext<double>*, std::vector<T64> g) {
    return {T64(Array<double>(g[0].value() * 2.0))};
  }
};

// x = exp(x) in place, saving the output (the dirty input itself) for backward.
struct InplaceExp : autograd::Function<InplaceExp> {
  static T64 forward(AutogradContext<double>* ctx, T64 x) {
    x.mutable_value() = xt::exp(x.value());
    ctx->mark_dirty({x});
    ctx->save_for_backward({x});
    return x;
  }
  static std::vector<T64> backward(AutogradContext<double>* ctx, std::vector<T64> g) {
    return {T64(Array<double>(g[0].value() * ctx->get_saved_variables()[0].value()))};
  }
};

// x += w in place (x need not require grad).
struct InplaceAddInto : autograd::Function<InplaceAddInto> {
  static T64 forward(AutogradContext<double>* ctx, T64 x, T64 w) {
    x.mutable_value() += w.value();
    ctx->mark_dirty({x});
    return x;
  }
  static std::vector<T64> backward(AutogradContext<double>*, std::vector<T64> g) { return {g[0], g[0]}; }
};

// Marks x dirty but returns a new tensor.
struct DirtyNotReturned : autograd::Function<DirtyNotReturned> {
  static T64 forward(AutogradContext<double>* ctx, T64 x) {
    x.mutable_value() *= 2.0;
    ctx->mark_dirty({x});
    return T64(Array<double>(x.value()));
  }
  static std::vector<T64> backward(AutogradContext<double>*, std::vector<T64> g) { return {g[0]}; }
};

// Saves x (not in place).
struct SaveX : autograd::Function<SaveX> {
  static T64 forward(AutogradContext<double>* ctx, T64 x) {
    ctx->save_for_backward({x});
    return T64(Array<double>(x.value() * x.value()));
  }
  static std::vector<T64> backward(AutogradContext<double>* ctx, std::vector<T64> g) {
    return {T64(Array<double>(2.0 * g[0].value() * ctx->get_saved_variables()[0].value()))};
  }
};

// (x *= 2 in place, sum of x before): two outputs, the first the dirty input.
struct InplaceDoubleAndSum : autograd::Function<InplaceDoubleAndSum> {
  static std::vector<T64> forward(AutogradContext<double>* ctx, T64 x) {
    T64 total(Array<double>(xt::sum(x.value())()));
    x.mutable_value() *= 2.0;
    ctx->mark_dirty({x});
    return {x, total};
  }
  static std::vector<T64> backward(AutogradContext<double>*, std::vector<T64> g) {
    return {T64(Array<double>(g[0].value() * 2.0 + g[1].value()))};
  }
};

}  // namespace

TEST(AutogradFunctionMarkDirty, ReturnsTheInputWithItsVersionBumpedAndItsHistoryRebased) {
  T64 a = input({2, 3}, 1).requires_grad_(true);
  T64 b = input({2, 3}, 2);
  T64 x = a * b;
  const std::uint64_t before = x.version();
  T64 z = InplaceDouble::apply(x);
  EXPECT_TRUE(z.same(x));              // the output is the input
  EXPECT_EQ(x.version(), before + 2);  // forward's mutable_value, then mark_dirty's bump (as PyTorch)
  EXPECT_FALSE(x.is_leaf());
  EXPECT_NE(std::string(x.op()).find("InplaceDoubleBackward"), std::string::npos) << x.op();
  EXPECT_LT(max_abs_diff(x.value(), Array<double>(2.0 * a.value() * b.value())), 1e-12);
  sum(z).backward();
  EXPECT_LT(max_abs_diff(a.grad(), Array<double>(2.0 * b.value())), 1e-12);
}

// A node made from x before the in-place change sends its gradient to x's old history (as
// PyTorch's edge to the old grad_fn), not through the in-place Function.
TEST(AutogradFunctionMarkDirty, EarlierConsumersKeepTheOldHistory) {
  T64 a = input({2, 3}, 1).requires_grad_(true);
  T64 b = input({2, 3}, 2);
  T64 x = a * b;
  T64 y = sum(x);  // its backward needs only x's shape
  T64 z = InplaceDouble::apply(x);
  (y + sum(z)).backward();
  EXPECT_LT(max_abs_diff(a.grad(), Array<double>(3.0 * b.value())), 1e-12);
}

TEST(AutogradFunctionMarkDirty, AStaleSavedTensorIsRefused) {
  T64 a = input({2, 3}, 1).requires_grad_(true);
  T64 x = a * 1.5;
  T64 y = x * x;            // mul saves x
  T64 w = SaveX::apply(x);  // a Function saves x
  InplaceDouble::apply(x);
  const std::string m = error_of([&] { sum(y).backward(); });
  EXPECT_NE(m.find("has been modified by an inplace operation"), std::string::npos) << m;
  const std::string f = error_of([&] { sum(w).backward(); });
  EXPECT_NE(f.find("saved tensor 0 was modified by an inplace operation"), std::string::npos) << f;
}

// A graph with a dirty output that is never run backward is freed with its tensors: the context
// lets the dirty tensors go when apply returns (they made a cycle, output node -> its backward ->
// the context -> the output, that LeakSanitizer reported in AStaleSavedTensorIsRefused).
TEST(AutogradFunctionMarkDirty, AGraphNeverRunBackwardIsFreed) {
  std::weak_ptr<Node<double>> node;
  {
    T64 a = input({2, 3}, 1).requires_grad_(true);
    T64 x = a * 1.5;
    InplaceDouble::apply(x);
    node = x.node();
    ASSERT_FALSE(node.expired());
  }
  EXPECT_TRUE(node.expired());
}

// The Function's own saved output (the dirty input) is recorded after the bump, as PyTorch's.
TEST(AutogradFunctionMarkDirty, SavingTheDirtyOutputWorks) {
  T64 a = input({3, 2}, 3).requires_grad_(true);
  T64 x = a * 1.0;
  T64 z = InplaceExp::apply(x);
  sum(z * 3.0).backward();
  EXPECT_LT(max_abs_diff(a.grad(), Array<double>(3.0 * xt::exp(a.value()))), 1e-12);
}

TEST(AutogradFunctionMarkDirty, AnInputWithoutGradBecomesPartOfTheGraph) {
  T64 x(Array<double>(input({4}, 1).value()));  // a leaf that requires no grad
  T64 w = input({4}, 2).requires_grad_(true);
  const Array<double> x0 = x.value();
  T64 z = InplaceAddInto::apply(x, w);
  EXPECT_TRUE(z.same(x));
  EXPECT_TRUE(x.requires_grad());
  EXPECT_FALSE(x.is_leaf());
  EXPECT_LT(max_abs_diff(x.value(), Array<double>(x0 + w.value())), 1e-12);
  sum(z * z).backward();
  EXPECT_LT(max_abs_diff(w.grad(), Array<double>(2.0 * (x0 + w.value()))), 1e-12);
}

TEST(AutogradFunctionMarkDirty, SeveralOutputs) {
  T64 a = input({2, 2}, 4).requires_grad_(true);
  T64 x = a * 1.0;
  std::vector<T64> out = InplaceDoubleAndSum::apply(x);
  EXPECT_TRUE(out[0].same(x));
  (sum(out[0] * 5.0) + out[1] * 7.0).backward();
  EXPECT_LT(max_abs_diff(a.grad(), Array<double>(xt::ones<double>({2, 2}) * 17.0)), 1e-12);
}

TEST(AutogradFunctionMarkDirty, ALeafThatRequiresGradIsRefusedOutsideNoGrad) {
  T64 a = input({3}, 1).requires_grad_(true);
  const std::string m = error_of([&] { InplaceDouble::apply(a); });
  EXPECT_NE(m.find("InplaceDouble: a leaf Variable that requires grad is being used in an in-place operation"),
            std::string::npos)
      << m;
  T64 b = input({3}, 1).requires_grad_(true);
  const Array<double> b0 = b.value();
  {
    NoGradGuard no_grad;
    T64 z = InplaceDouble::apply(b);
    EXPECT_TRUE(z.same(b));
  }
  EXPECT_TRUE(b.is_leaf());
  EXPECT_EQ(b.version(), 2u);
  EXPECT_LT(max_abs_diff(b.value(), Array<double>(2.0 * b0)), 1e-12);
}

TEST(AutogradFunctionMarkDirty, ADirtyInputNotReturnedIsRefused) {
  T64 a = input({3}, 1).requires_grad_(true);
  T64 x = a * 1.0;
  const std::string m = error_of([&] { DirtyNotReturned::apply(x); });
  EXPECT_NE(m.find("DirtyNotReturned: an input marked dirty (ctx->mark_dirty) is not returned by forward"),
            std::string::npos)
      << m;
}

namespace {
// Whether `n.name` is accessible from here (an access error is a substitution failure).
#define XGRAD_PUBLIC_MEMBER(name)            \
  template <class N, class = void>           \
  struct public_##name : std::false_type {}; \
  template <class N>                         \
  struct public_##name<N, std::void_t<decltype(std::declval<N&>().name)>> : std::true_type {};
XGRAD_PUBLIC_MEMBER(backward_fn)
XGRAD_PUBLIC_MEMBER(backward_fn_)
XGRAD_PUBLIC_MEMBER(visit_mark)
XGRAD_PUBLIC_MEMBER(visit_mark_)
XGRAD_PUBLIC_MEMBER(released)
XGRAD_PUBLIC_MEMBER(released_)
XGRAD_PUBLIC_MEMBER(input_versions)
XGRAD_PUBLIC_MEMBER(input_versions_)
XGRAD_PUBLIC_MEMBER(grad_hooks)
XGRAD_PUBLIC_MEMBER(grad_hooks_)
XGRAD_PUBLIC_MEMBER(needs_input_grad_)
XGRAD_PUBLIC_MEMBER(non_differentiable_)
#undef XGRAD_PUBLIC_MEMBER
}  // namespace

TEST(EngineInternals, AreNotPublic) {
  using N = Node<double>;
  EXPECT_FALSE(public_backward_fn<N>::value || public_backward_fn_<N>::value);
  EXPECT_FALSE(public_visit_mark<N>::value || public_visit_mark_<N>::value);
  EXPECT_FALSE(public_released<N>::value || public_released_<N>::value);
  EXPECT_FALSE(public_input_versions<N>::value || public_input_versions_<N>::value);
  EXPECT_FALSE(public_grad_hooks<N>::value || public_grad_hooks_<N>::value);
  using C = AutogradContext<double>;
  EXPECT_FALSE(public_needs_input_grad_<C>::value);
  EXPECT_FALSE(public_non_differentiable_<C>::value);
}
