// The builders shared by the files that register gradient checks (registry.hpp).
#include "registry.hpp"

#include <xgrad/base/random.hpp>
#include <xgrad/core/factories.hpp>

namespace xgrad {
namespace gradcheck_support {

T64 Maker::operator()(const Shape& shape, Values values) {
  Generator gen(seed_ * 1000 + count_++);
  T64 t = values == Values::positive ? rand<double>(shape, gen) : randn<double>(shape, gen);
  for (auto& v : t.mutable_value()) {
    if (values == Values::positive) v += 0.5;                        // [0.5, 1.5)
    if (values == Values::away_from_zero) v += v >= 0 ? 0.1 : -0.1;  // no kink within 0.1
  }
  return t.requires_grad_(true);
}

IndexArray Maker::indices(const Shape& shape, std::size_t high) {
  Generator gen(seed_ * 1000 + count_++);
  IndexArray a = empty_array<std::int64_t>(shape, "gradcheck");
  for (auto& v : a) v = static_cast<std::int64_t>(gen.next_u64() % high);
  return a;
}

BoolArray Maker::mask(const Shape& shape, double p_true) {
  Generator gen(seed_ * 1000 + count_++);
  BoolArray a = empty_array<bool>(shape, "gradcheck");
  for (auto& v : a) v = gen.uniform() < p_true;
  return a;
}

std::string shapes_of(const Inputs& inputs) {
  std::string s;
  for (const auto& t : inputs) s += (s.empty() ? "" : " ") + shape_str(t.shape());
  return s;
}

GradcheckOp reseeded(GradcheckOp op) {
  return [op = std::move(op)](const Inputs& in, const SampleInput& sample) {
    manual_seed(sample.sizes.seed + 7);
    return op(in, sample);
  };
}

GradcheckEntry unary(const std::string& name, const std::string& call, T64 (*op)(const T64&), Values values) {
  return {name, call + ", x (B, L, D)", [op](const Inputs& in, const SampleInput&) { return op(in[0]); },
          [values](const Sizes& s) {
            return SampleInput{{Maker(s.seed)({s.B, s.L, s.D}, values)}};
          }};
}

GradcheckEntry binary(const std::string& name, T64 (*op)(const T64&, const T64&), Values rhs) {
  return {name, name + "(a, b), a (B, L, D), b (L, 1) broadcast",
          [op](const Inputs& in, const SampleInput&) { return op(in[0], in[1]); },
          [rhs](const Sizes& s) {
            Maker make(s.seed);
            return SampleInput{{make({s.B, s.L, s.D}), make({s.L, 1}, rhs)}};
          }};
}

}  // namespace gradcheck_support
}  // namespace xgrad
