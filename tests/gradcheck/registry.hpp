// The registry of finite-difference checks (double precision, central differences): one entry
// per op of ops/ops.hpp and per module of nn/. It is test code, not part of libxgrad: the static
// library xgrad_testing (tests/gradcheck/), linked by the test suites and by the gradcheck example
// tool. The tool runs every entry at sizes chosen by its flags; test_gradcheck_checks.cpp (beside
// this file) runs each as a gtest of its own at the default sizes. `gradcheck --list` (or
// gradcheck_entries().size()) gives the count.
//
// Ops take their inputs as gradcheck arguments (xgrad::gradcheck, in the library); modules are
// checked over their input and every parameter in place (xgrad::gradcheck_parameters). Dropout, in
// ops and modules, re-seeds its generator before every evaluation so that every evaluation draws
// the same mask.
//
// ---- Adding a check --------------------------------------------------------------------------
//
// The checks of xgrad/<folder>/<stem>.cpp live in tests/gradcheck/<folder>_<stem>.cpp, one block:
//
//   #include "registry.hpp"
//   #include <xgrad/ops/ops.hpp>
//   XGRAD_GRADCHECKS(ops_elementwise) {
//     using namespace xgrad::gradcheck_support;
//     checks.add(unary("tanh", "tanh(x)", [](const T64& a) { return xgrad::tanh(a); }));
//   }
//
// Inside the block `checks` is the GradcheckGroup to add to; the entries keep the order they are
// added in. A new op in a file that already has checks only adds its line there: nothing else.
//
// ---- Why every block is named in one list -----------------------------------------------------
//
// xgrad_testing is a static library: the linker copies a .cpp's object into a program only when
// the program references a symbol defined in it, and a self-registering static object in a .cpp
// that nothing references would be dropped. So no static initialisation is involved:
// XGRAD_GRADCHECKS(name) defines the function xgrad::detail::register_gradchecks_<name>, and
// gradcheck_entries() calls each of them, in the order of the one list of files in registry.cpp.
// That call links every check file into any program that asks for the entries, and the list fixes
// the order of the entries (ops in the order of ops.hpp, then the modules) independently of the
// link order.
//
// A new check file adds its name to that list (the link fails with an undefined reference to
// xgrad::detail::register_gradchecks_<name> only for a listed name without a block;
// test_gradcheck_checks.cpp fails for a block whose name is not listed, whose name is not its
// file's stem, or whose file checks no xgrad/<folder>/<stem>.cpp). Checks of code outside the
// library are added at run time with register_gradcheck().
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <xgrad/core/gradcheck.hpp>

namespace xgrad {

// The sizes a check builds its inputs from (the gradcheck tool's flags).
struct GradcheckSizes {
  std::size_t B = 2;  // --batch
  std::size_t L = 3;  // --seq
  std::size_t D = 4;  // --dim
  std::size_t H = 2;  // --heads (divides D)
  std::size_t F = 5;  // --hidden
  std::size_t C = 5;  // --classes
  std::uint64_t seed = 1;
};

// What a check ran on and what it found.
struct GradcheckOutcome {
  std::string shapes;  // e.g. "(2, 3, 4) (3, 1)", or "(2, 3, 4) + 2 params (25 values)"
  GradcheckResult result;

  // Every checked tensor passed and at least one was checked (nothing checked would make the
  // check vacuous).
  bool passed() const { return result.passed && !result.inputs.empty(); }
};

struct GradcheckEntry {
  std::string name;  // "matmul", "nn.Linear": unique
  std::string what;  // what is computed, in words and shapes
  std::function<GradcheckOutcome(const GradcheckSizes&, const GradcheckOptions&)> run;
  std::string group = {};  // the registering file, "ops_matmul", "nn_linear" (set by
                           // GradcheckGroup::add); "" for run-time entries
};

// The entries of one registering file, in the order they are added; `add` stamps the group.
class GradcheckGroup {
 public:
  explicit GradcheckGroup(std::string group) : group_(std::move(group)) {}
  void add(GradcheckEntry entry) {
    entry.group = group_;
    entries_.push_back(std::move(entry));
  }
  const std::string& group() const { return group_; }
  std::vector<GradcheckEntry>& entries() { return entries_; }

 private:
  std::string group_;
  std::vector<GradcheckEntry> entries_;
};

// Every entry: the library's (ops first, in the order of ops.hpp, then the modules), then those
// added by register_gradcheck(), in the order they were added. Built once, on the first call.
std::vector<GradcheckEntry> gradcheck_entries();

// Adds a check of code outside the library (its group is left empty). Throws
// std::invalid_argument when the name is empty, already taken, or the entry has no function.
void register_gradcheck(GradcheckEntry entry);

// While one is alive (on this thread), every entry's run checks second derivatives instead:
// gradgradcheck / gradgradcheck_parameters over the same function and inputs (test
// GradgradcheckList.Passes/<name>).
class SecondOrderChecks {
 public:
  SecondOrderChecks();
  ~SecondOrderChecks();
  SecondOrderChecks(const SecondOrderChecks&) = delete;
  SecondOrderChecks& operator=(const SecondOrderChecks&) = delete;
  static bool active();

 private:
  bool previous_;
};

// Builders shared by the registering files.
namespace gradcheck_support {

using T64 = Tensor<double>;
using Inputs = std::vector<T64>;

enum class Values { normal, away_from_zero, positive };

// Random double inputs requiring grad, each from its own stream derived from the seed: the n-th
// tensor (or index array, or mask) made uses Generator(seed * 1000 + n).
class Maker {
 public:
  explicit Maker(std::uint64_t seed) : seed_(seed) {}
  // normal: standard normal; away_from_zero: the same moved 0.1 away from 0 (no kink within 0.1);
  // positive: uniform in [0.5, 1.5).
  T64 operator()(const Shape& shape, Values values = Values::normal);
  IndexArray indices(const Shape& shape, std::size_t high);  // uniform in [0, high)
  BoolArray mask(const Shape& shape, double p_true);

 private:
  std::uint64_t seed_;
  std::uint64_t count_ = 0;
};

// "(2, 3, 4) (3, 1)"
std::string shapes_of(const Inputs& inputs);

// An op over its inputs; `note` adds what the shapes do not say (indices, masks).
GradcheckOutcome op_check(const GradcheckFunction& f, const Inputs& inputs, const GradcheckOptions& options,
                          const std::string& note = "");

// A module over its input x (when defined) and every parameter; `evaluate` computes the output
// from x and re-seeds whatever it draws; `input_note` names the input when x is undefined.
GradcheckOutcome parameters_check(const NamedTensors& parameters, const T64& x, const std::function<T64()>& evaluate,
                                  const GradcheckOptions& options, const std::string& input_note = "");
template <class Module>
GradcheckOutcome module_check(const Module& module, const T64& x, const std::function<T64()>& evaluate,
                              const GradcheckOptions& options, const std::string& input_note = "") {
  NamedTensors parameters;
  for (const auto& p : module.named_parameters()) parameters.emplace_back(p.first, p.second);
  return parameters_check(parameters, x, evaluate, options, input_note);
}

// A module's evaluation with the default generator re-seeded (seed + 7) first, so that every
// evaluation draws the same dropout masks.
std::function<T64()> reseeded(std::uint64_t seed, std::function<T64()> evaluate);

// One input x (B, L, D); `call` says what is computed from it.
GradcheckEntry unary(const std::string& name, const std::string& call, T64 (*op)(const T64&),
                     Values values = Values::normal);

// Binary ops with broadcasting: a (B, L, D) with b (L, 1).
GradcheckEntry binary(const std::string& name, T64 (*op)(const T64&, const T64&), Values rhs = Values::normal);

}  // namespace gradcheck_support
}  // namespace xgrad

// Defines the registration function of one file (see the top of this header), at global scope
// (outside any namespace): `name` is the file's folder and stem, `ops_matmul` for
// xgrad/ops/matmul.cpp; the block that follows adds entries to `checks` (a GradcheckGroup&).
#define XGRAD_GRADCHECKS(name)                                      \
  namespace xgrad::detail {                                         \
  void register_gradchecks_##name(::xgrad::GradcheckGroup& checks); \
  }                                                                 \
  void xgrad::detail::register_gradchecks_##name(::xgrad::GradcheckGroup& checks)
