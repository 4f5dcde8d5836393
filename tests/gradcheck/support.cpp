// The builders shared by the files that register gradient checks (registry.hpp).
#include "registry.hpp"

#include <xgrad/base/random.hpp>
#include <xgrad/core/factories.hpp>

namespace xgrad {

namespace {
thread_local bool second_order = false;
}  // namespace

SecondOrderChecks::SecondOrderChecks() : previous_(second_order) { second_order = true; }
SecondOrderChecks::~SecondOrderChecks() { second_order = previous_; }
bool SecondOrderChecks::active() { return second_order; }

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

GradcheckOutcome op_check(const GradcheckFunction& f, const Inputs& inputs, const GradcheckOptions& options,
                          const std::string& note) {
  return {shapes_of(inputs) + (note.empty() ? "" : " " + note),
          second_order ? gradgradcheck(f, inputs, options) : gradcheck(f, inputs, options)};
}

GradcheckOutcome parameters_check(const NamedTensors& parameters, const T64& x, const std::function<T64()>& evaluate,
                                  const GradcheckOptions& options, const std::string& input_note) {
  NamedTensors tensors;
  if (x.defined()) tensors.emplace_back("input", x);
  std::size_t n = 0;
  for (const auto& p : parameters) {
    tensors.push_back(p);
    n += p.second.numel();
  }
  const std::string input = x.defined() ? shape_str(x.shape()) : input_note;
  const std::size_t count = tensors.size() - (x.defined() ? 1 : 0);
  return {count == 0 ? input : input + " + " + std::to_string(count) + " params (" + std::to_string(n) + " values)",
          second_order ? gradgradcheck_parameters(evaluate, tensors, options)
                       : gradcheck_parameters(evaluate, tensors, options)};
}

std::function<T64()> reseeded(std::uint64_t seed, std::function<T64()> evaluate) {
  return [=] {
    manual_seed(seed + 7);
    return evaluate();
  };
}

GradcheckEntry unary(const std::string& name, const std::string& call, T64 (*op)(const T64&), Values values) {
  return {name, call + ", x (B, L, D)", [=](const GradcheckSizes& s, const GradcheckOptions& o) {
            Maker make(s.seed);
            return op_check([=](const Inputs& in) { return op(in[0]); }, {make({s.B, s.L, s.D}, values)}, o);
          }};
}

GradcheckEntry binary(const std::string& name, T64 (*op)(const T64&, const T64&), Values rhs) {
  return {name, name + "(a, b), a (B, L, D), b (L, 1) broadcast",
          [=](const GradcheckSizes& s, const GradcheckOptions& o) {
            Maker make(s.seed);
            return op_check([=](const Inputs& in) { return op(in[0], in[1]); },
                            {make({s.B, s.L, s.D}), make({s.L, 1}, rhs)}, o);
          }};
}

}  // namespace gradcheck_support
}  // namespace xgrad
