// mse_loss and cross_entropy: values against their formulas (and a PyTorch golden), gradchecks
// for every reduction and form, ignore_index, label smoothing, and the argument errors.
#include <cmath>
#include <string>
#include <vector>

#include "test_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

namespace {

const char* const kReductions[] = {"mean", "sum", "none"};

// -log softmax(x)[t] and -(1/C) sum_c log softmax(x)_c for one row of logits.
std::pair<double, double> naive_ce_terms(const std::vector<double>& x, std::size_t t) {
  double s = 0;
  for (double v : x) s += std::exp(v);
  double mean_logp = 0;
  for (double v : x) mean_logp += std::log(std::exp(v) / s) / static_cast<double>(x.size());
  return {-std::log(std::exp(x[t]) / s), -mean_logp};
}

}  // namespace

// ---- mse_loss ------------------------------------------------------------------------------

// The broadcast warning is raised once per call site, and only by a call that goes through: a
// call refused for shapes that cannot broadcast used to spend it, so the next call that did
// broadcast wrongly went unwarned. With a handler that throws (warnings as errors), every call
// from the site raises, not only the first.
TEST(MseLoss, ARefusedCallDoesNotSpendTheBroadcastWarning) {
  std::vector<std::string> messages;
  const WarningHandler previous = set_warning_handler([&](const Warning& w) { messages.push_back(w.message); });
  reset_warnings();
  EXPECT_THROW(mse_loss(ones<double>({3, 2}), ones<double>({4})), std::invalid_argument);  // (3, 2) vs (4)
  EXPECT_TRUE(messages.empty());
  mse_loss(ones<double>({3, 1}), ones<double>({3}));  // broadcasts to (3, 3): warned
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_NE(messages[0].find("using a target size (3) that is different to the input size (3, 1)"), std::string::npos)
      << messages[0];

  set_warning_handler([](const Warning& w) { throw std::runtime_error("as error: " + w.message); });
  reset_warnings();
  EXPECT_THROW(mse_loss(ones<double>({3, 1}), ones<double>({3})), std::runtime_error);
  EXPECT_THROW(mse_loss(ones<double>({3, 1}), ones<double>({3})), std::runtime_error);  // raised again
  set_warning_handler(previous);
  reset_warnings();
}

TEST(MseLoss, ValuesForEveryReduction) {
  auto a = input({3, 4}, 1), b = input({3, 4}, 2);
  Array<double> sq = (a.value() - b.value()) * (a.value() - b.value());
  const double total = xt::sum(sq)();
  EXPECT_NEAR(mse_loss(a, b).item(), total / 12, 1e-14);
  EXPECT_NEAR(mse_loss(a, b, "sum").item(), total, 1e-13);
  auto none = mse_loss(a, b, "none");
  EXPECT_EQ(none.shape(), (Shape{3, 4}));
  EXPECT_LT(max_abs_diff(none.value(), sq), 1e-15);
  EXPECT_EQ(mse_loss(a, b).dim(), 0);
}

TEST(MseLoss, GradcheckEveryReductionWithTargetRequiringGrad) {
  for (const char* r : kReductions) {
    SCOPED_TRACE(r);
    const std::string red = r;
    expect_gradcheck([red](const Inputs& in) { return mse_loss(in[0], in[1], red); },
                     {input({3, 4}, 1), input({3, 4}, 2)});
    // Only the input requiring grad (the usual case: a fixed target).
    auto t = input({2, 3, 2}, 4);
    t.requires_grad_(false);
    expect_gradcheck([red](const Inputs& in) { return mse_loss(in[0], in[1], red); }, {input({2, 3, 2}, 3), t});
    // Broadcast target, as PyTorch (with its warning); both gradients summed back.
    expect_gradcheck([red](const Inputs& in) { return mse_loss(in[0], in[1], red); },
                     {input({3, 4}, 5), input({4}, 6)});
    // Through a transposed input.
    expect_gradcheck([red](const Inputs& in) { return mse_loss(transpose(in[0], 0, 1), in[1], red); },
                     {input({4, 3}, 7), input({3, 4}, 8)});
  }
}

TEST(MseLoss, BroadcastValuesAndErrors) {
  auto a = from_vector<double>({1, 2, 3, 4}, {2, 2});
  auto b = from_vector<double>({1, 0}, {2});
  EXPECT_DOUBLE_EQ(mse_loss(a, b, "sum").item(), 0 + 4 + 4 + 16);
  XGRAD_EXPECT_THROW_MSG(mse_loss(zeros<double>({3, 4}), zeros<double>({5})), "mse_loss", "(3, 4)", "(5)");
  XGRAD_EXPECT_THROW_MSG(mse_loss(zeros<double>({3}), zeros<double>({3}), "avg"), "mse_loss", "reduction",
                         "\"avg\"");
  // The mean over no elements is nan (0/0), as PyTorch.
  EXPECT_TRUE(std::isnan(mse_loss(zeros<double>({0}), zeros<double>({0})).item()));
}

TEST(MseLoss, FloatMatchesDouble) {
  auto a = input({5, 7}, 1), b = input({5, 7}, 2);
  auto cast = [](const T64& t) { return Tensor<float>(Array<float>(xt::cast<float>(t.value())), true); };
  auto af = cast(a), bf = cast(b);
  auto ld = mse_loss(a, b);
  auto lf = mse_loss(af, bf);
  EXPECT_NEAR(lf.item(), ld.item(), 1e-6);
  ld.backward();
  lf.backward();
  EXPECT_LT(max_abs_diff(af.grad(), a.grad()), 1e-7);
  EXPECT_LT(max_abs_diff(bf.grad(), b.grad()), 1e-7);
}

// ---- cross_entropy -----------------------------------------------------------------------------

TEST(CrossEntropy, ValuesMatchNegativeLogSoftmaxPicked) {
  auto x = input({4, 5}, 1);
  IndexArray t = {3, 0, 4, 1};
  std::vector<double> nll(4);
  for (std::size_t i = 0; i < 4; ++i) {
    std::vector<double> row(5);
    for (std::size_t c = 0; c < 5; ++c) row[c] = x.value()(i, c);
    nll[i] = naive_ce_terms(row, static_cast<std::size_t>(t(i))).first;
  }
  const double total = nll[0] + nll[1] + nll[2] + nll[3];
  EXPECT_NEAR(cross_entropy(x, t).item(), total / 4, 1e-14);
  EXPECT_NEAR(cross_entropy(x, t, -100, "sum").item(), total, 1e-13);
  auto none = cross_entropy(x, t, -100, "none");
  EXPECT_EQ(none.shape(), (Shape{4}));
  for (std::size_t i = 0; i < 4; ++i) EXPECT_NEAR(none.value()(i), nll[i], 1e-14);
}

TEST(CrossEntropy, LabelSmoothingFormula) {
  // loss_i = (1 - ls) nll_i + ls * (-(1/C) sum_c logp_ic), ignored rows excluded from the mean.
  auto x = input({3, 4}, 2);
  IndexArray t = {1, -100, 2};
  const double ls = 0.3;
  auto none = cross_entropy(x, t, -100, "none", ls);
  double total = 0;
  for (std::size_t i : {0, 2}) {
    std::vector<double> row(4);
    for (std::size_t c = 0; c < 4; ++c) row[c] = x.value()(i, c);
    const auto [nll, smooth] = naive_ce_terms(row, static_cast<std::size_t>(t(i)));
    EXPECT_NEAR(none.value()(i), (1 - ls) * nll + ls * smooth, 1e-14);
    total += (1 - ls) * nll + ls * smooth;
  }
  EXPECT_EQ(none.value()(1), 0.0);
  EXPECT_NEAR(cross_entropy(x, t, -100, "mean", ls).item(), total / 2, 1e-14);
}

TEST(CrossEntropy, MatchesPyTorchGoldenWithIgnoreIndexAndLabelSmoothing) {
  // PyTorch 1.13, float64:
  //   x = [[1, 2, .5, -1], [.3, -.2, 2.5, 1.5], [-1, 0, 1, 3]]; t = [2, -100, 3]
  //   F.cross_entropy(x, t, label_smoothing=ls) and x.grad after backward()
  T64 x(Array<double>{{1.0, 2.0, 0.5, -1.0}, {0.3, -0.2, 2.5, 1.5}, {-1.0, 0.0, 1.0, 3.0}}, true);
  IndexArray t = {2, -100, 3};
  auto l0 = cross_entropy(x, t);
  EXPECT_NEAR(l0.item(), 1.0901821753448342, 1e-13);
  l0.backward();
  const Array<double> g0 = {{0.1121039090, 0.3047300188, -0.4320055421, 0.0151716143},
                            {0, 0, 0, 0},
                            {0.0076097144, 0.0206853485, 0.0562286068, -0.0845236697}};
  EXPECT_LT(max_abs_diff(x.grad(), g0), 1e-9);
  x.zero_grad();
  auto l1 = cross_entropy(x, t, -100, "mean", 0.25);
  EXPECT_NEAR(l1.item(), 1.3558071753448342, 1e-13);
  l1.backward();
  const Array<double> g1 = {{0.0808539090, 0.2734800188, -0.3382555421, -0.0160783857},
                            {0, 0, 0, 0},
                            {-0.0236402856, -0.0105646515, 0.0249786068, 0.0092263303}};
  EXPECT_LT(max_abs_diff(x.grad(), g1), 1e-9);
}

TEST(CrossEntropy, GradcheckEveryReductionAndForm) {
  for (const char* r : kReductions) {
    for (double ls : {0.0, 0.2}) {
      SCOPED_TRACE(std::string(r) + " ls " + std::to_string(ls));
      const std::string red = r;
      // (N, C) + (N), with an ignored target
      IndexArray t2 = {2, -100, 0, 4};
      expect_gradcheck([&](const Inputs& in) { return cross_entropy(in[0], t2, -100, red, ls); },
                       {input({4, 5}, 1)});
      // (C) + ()
      IndexArray t1 = xt::xarray<std::int64_t>(3);
      expect_gradcheck([&](const Inputs& in) { return cross_entropy(in[0], t1, -100, red, ls); }, {input({6}, 2)});
      // (N, C, d1, d2) + (N, d1, d2), with ignore_index = 1 (a valid class number)
      IndexArray t4 = {{{0, 1, 2}, {2, 2, 0}}, {{1, 1, 0}, {0, 2, 1}}};
      expect_gradcheck([&](const Inputs& in) { return cross_entropy(in[0], t4, 1, red, ls); },
                       {input({2, 3, 2, 3}, 3)});
      // Logits made by a transpose: (N, d, C) -> (N, C, d)
      IndexArray t3 = {{0, 3}, {2, 1}};
      expect_gradcheck([&](const Inputs& in) { return cross_entropy(transpose(in[0], 1, 2), t3, -100, red, ls); },
                       {input({2, 2, 4}, 4)});
    }
  }
}

TEST(CrossEntropy, ManyClassesTakeTheVectorizedPath) {
  // C = 41: several SIMD batches plus a tail, values and gradients, float against double.
  auto x = input({3, 41}, 9);
  IndexArray t = {40, 0, 17};
  for (double ls : {0.0, 0.1}) {
    SCOPED_TRACE(ls);
    auto none = cross_entropy(x, t, -100, "none", ls);
    for (std::size_t i = 0; i < 3; ++i) {
      std::vector<double> row(41);
      for (std::size_t c = 0; c < 41; ++c) row[c] = x.value()(i, c);
      const auto [nll, smooth] = naive_ce_terms(row, static_cast<std::size_t>(t(i)));
      EXPECT_NEAR(none.value()(i), (1 - ls) * nll + ls * smooth, 1e-13);
    }
    expect_gradcheck([&](const Inputs& in) { return cross_entropy(in[0], t, -100, "mean", ls); }, {x});
    Tensor<float> xf(Array<float>(xt::cast<float>(x.value())), true);
    T64 xd(x.value(), true);
    cross_entropy(xf, t, -100, "mean", ls).backward();
    cross_entropy(xd, t, -100, "mean", ls).backward();
    EXPECT_LT(max_abs_diff(xf.grad(), xd.grad()), 1e-7);
  }
}

TEST(CrossEntropy, SpatialFormMatchesRowForm) {
  // (N, C, d) equals moving C last and flattening to (N*d, C).
  auto x = input({2, 3, 4}, 5);
  IndexArray t = {{0, 2, 1, 1}, {2, 0, -100, 1}};
  auto rows = reshape(permute(x, {0, 2, 1}), {8, 3});
  IndexArray tf = t;
  tf.reshape({8});
  for (const char* r : kReductions) {
    SCOPED_TRACE(r);
    Array<double> spatial = cross_entropy(x, t, -100, r, 0.1).value();
    Array<double> flat = cross_entropy(rows, tf, -100, r, 0.1).value();
    if (spatial.dimension() > 0) spatial.reshape({8});
    EXPECT_LT(max_abs_diff(spatial, flat), 1e-14);
  }
}

TEST(CrossEntropy, AllTargetsIgnored) {
  // "mean" is 0/0 = nan as in PyTorch 1.13, with a zero gradient; "sum" is 0; "none" zeros.
  T64 x = input({3, 4}, 6);
  IndexArray t = {-100, -100, -100};
  auto l = cross_entropy(x, t);
  EXPECT_TRUE(std::isnan(l.item()));
  l.backward();
  EXPECT_EQ(x.grad(), (Array<double>(xt::zeros<double>({3, 4}))));
  EXPECT_EQ(cross_entropy(x, t, -100, "sum").item(), 0.0);
  EXPECT_EQ(cross_entropy(x, t, -100, "none", 0.3).value(), (Array<double>(xt::zeros<double>({3}))));
}

TEST(CrossEntropy, LargeLogitsAreStable) {
  Tensor<float> x(Array<float>{{1e4f, -1e4f, 0.0f}, {-1e4f, -1e4f + 1.0f, -1e4f}}, true);
  IndexArray t = {1, 1};
  auto l = cross_entropy(x, t, -100, "none");
  EXPECT_NEAR(l.value()(0), 2e4f, 1.0f);                   // -log softmax at -1e4 when the max is 1e4
  EXPECT_NEAR(l.value()(1), std::log(1 + 2 * std::exp(-1.0f)), 1e-5f);
  l.backward(ones<float>({2}));
  for (float g : x.grad()) EXPECT_TRUE(std::isfinite(g));
}

TEST(CrossEntropy, FloatMatchesDouble) {
  auto x = input({6, 10}, 7);
  Tensor<float> xf(Array<float>(xt::cast<float>(x.value())), true);
  IndexArray t = {0, 9, 3, -100, 5, 5};
  auto ld = cross_entropy(x, t, -100, "mean", 0.1);
  auto lf = cross_entropy(xf, t, -100, "mean", 0.1);
  EXPECT_NEAR(lf.item(), ld.item(), 1e-6);
  ld.backward();
  lf.backward();
  EXPECT_LT(max_abs_diff(xf.grad(), x.grad()), 1e-7);
}

TEST(CrossEntropy, ArgumentErrors) {
  auto x = zeros<double>({3, 5});
  XGRAD_EXPECT_THROW_MSG(cross_entropy(x, IndexArray{1, 7, 0}), "cross_entropy", "target 7", "5 classes");
  XGRAD_EXPECT_THROW_MSG(cross_entropy(x, IndexArray{1, -1, 0}), "cross_entropy", "target -1", "5 classes");
  XGRAD_EXPECT_THROW_MSG(cross_entropy(x, IndexArray{1, 2}), "cross_entropy", "target of shape (3)", "(3, 5)",
                         "got (2)");
  XGRAD_EXPECT_THROW_MSG(cross_entropy(zeros<double>({2, 3, 4}), IndexArray{{0, 1, 2}, {0, 1, 2}}), "cross_entropy",
                         "(2, 4)", "got (2, 3)");
  XGRAD_EXPECT_THROW_MSG(cross_entropy(x, IndexArray{1, 2, 3}, -100, "avg"), "cross_entropy", "\"avg\"");
  XGRAD_EXPECT_THROW_MSG(cross_entropy(x, IndexArray{1, 2, 3}, -100, "mean", 1.5), "cross_entropy", "label_smoothing",
                         "1.5");
  XGRAD_EXPECT_THROW_MSG(cross_entropy(zeros<double>({}), IndexArray(xt::xarray<std::int64_t>(0))),
                         "cross_entropy", "()");
}
