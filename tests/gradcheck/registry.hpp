// The registry of finite-difference checks (double precision, central differences): one entry
// per op of ops/ops.hpp and per module of nn/. It is test code, not part of libxgrad: the object
// library xgrad_testing (tests/gradcheck/), linked by the test suites and by the gradcheck example
// tool. The tool runs every entry at sizes chosen by its flags; test_gradcheck_checks.cpp (beside
// this file) runs each as two gtests of their own at the default sizes, first and second order.
// `gradcheck --list` (or gradcheck_entries().size()) gives the count.
//
// An entry has PyTorch's OpInfo shape (torch/testing/_internal/opinfo/core.py): a name, the op,
// a function that makes its sample inputs, and supports_gradgrad. One entry, two checks over it,
// as test_ops.py's test_fn_grad and test_fn_gradgrad: run_gradcheck and run_gradgradcheck. An op
// is checked over its sample's inputs (xgrad::gradcheck); a module (the sample sets `module`)
// over its inputs and every parameter in place (xgrad::gradcheck_parameters). Dropout, in ops and
// modules, re-seeds its generator before every evaluation so that every evaluation draws the same
// mask.
//
// ---- Adding a check --------------------------------------------------------------------------
//
// The checks of xgrad/<folder>/<stem>.cpp live in tests/gradcheck/<folder>_<stem>.cpp, one block
// that returns its entries:
//
//   #include "registry.hpp"
//   #include <xgrad/ops/ops.hpp>
//   XGRAD_GRADCHECKS(ops_matmul) {
//     using namespace xgrad::gradcheck_support;
//     return {
//         {"matmul", "matmul(a (B, L, D), b (D, F))",
//          [](const Inputs& in, const SampleInput&) { return xgrad::matmul(in[0], in[1]); },
//          [](const Sizes& s) {
//            Maker make(s.seed);
//            return SampleInput{{make({s.B, s.L, s.D}), make({s.D, s.F})}};
//          }},
//         unary("tanh", "tanh(x)", [](const T64& a) { return xgrad::tanh(a); }),  // x (B, L, D)
//     };
//   }
//
// The block defines a static object that registers it (xgrad_testing is an OBJECT library, so
// every file's object is linked and no list of files exists). A new op in a file that already has
// checks adds its entry there; a new file only needs its block, named after its stem
// (test_gradcheck_checks.cpp checks the name and that xgrad/<folder>/<stem>.cpp exists).
//
// The order of gradcheck_entries(): the groups of ops/ first, then the others (core/, nn/), each part by
// group name; within a group, the order of its block; then the run-time entries of
// register_gradcheck(), in the order they were added.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <vector>

#include <xgrad/core/gradcheck.hpp>
#include <xgrad/nn/module.hpp>

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

// One sample of an entry, PyTorch's SampleInput: the tensors the check differentiates and the
// arguments it does not, made at one run's sizes.
struct SampleInput {
  std::vector<Tensor<double>> inputs;  // differentiated: an op's tensor arguments, a module's inputs
  std::string note = {};               // what the shapes do not say, for the report: "mask", "index (6)"
  IndexArray index = {};               // an index argument: index_select's index, embedding's, a target
  BoolArray mask = {};                 // a bool mask: masked_fill, where, attention
  Array<double> float_mask = {};       // an additive float mask: attention
  // A module entry's module (ModuleInfo): its parameters are checked in place with the inputs.
  std::shared_ptr<nn::Module<double>> module = nullptr;
  std::vector<std::string> input_names = {};  // modules: the inputs' names in the report (default "input")
  GradcheckSizes sizes = {};                  // set by the run: the sizes and seed it was made at

  // The module as its class (a module entry's op calls its forward).
  template <class M>
  M& module_as() const {
    M* m = dynamic_cast<M*>(module.get());
    if (m == nullptr) throw std::logic_error(std::string("gradcheck sample: the module is not a ") + typeid(M).name());
    return *m;
  }
};

using SampleInputs = std::vector<Tensor<double>>;
// The op applied to the (perturbed) inputs, reading the sample's other arguments.
using GradcheckOp = std::function<Tensor<double>(const SampleInputs& inputs, const SampleInput& sample)>;
using SampleInputsFunction = std::function<SampleInput(const GradcheckSizes&)>;

// One entry: PyTorch's OpInfo (name, op, sample_inputs_func, supports_gradgrad).
struct GradcheckEntry {
  std::string name;                    // "matmul", "nn.Linear": unique
  std::string what;                    // what is computed, in words and shapes
  GradcheckOp op;                      // the op, or a module's forward
  SampleInputsFunction sample_inputs;  // the inputs at given sizes
  bool supports_gradgrad = true;       // false: run_gradgradcheck refuses it, its gtest is skipped
  std::string group = {};              // the registering file, "ops_matmul", "nn_linear"; "" for run-time entries
};

// What a check ran on and what it found.
struct GradcheckOutcome {
  std::string shapes;  // e.g. "(2, 3, 4) (3, 1)", or "(2, 3, 4) + 2 params (25 values)"
  GradcheckResult result;

  // Every checked tensor passed and at least one was checked (nothing checked would make the
  // check vacuous).
  bool passed() const { return result.passed && !result.inputs.empty(); }
};

// The entry's op over a sample made at `sizes`: first derivatives (gradcheck), or second
// (gradgradcheck; throws std::invalid_argument for an entry without supports_gradgrad).
GradcheckOutcome run_gradcheck(const GradcheckEntry& entry, const GradcheckSizes& sizes,
                               const GradcheckOptions& options);
GradcheckOutcome run_gradgradcheck(const GradcheckEntry& entry, const GradcheckSizes& sizes,
                                   const GradcheckOptions& options);

// Every entry, in the order said at the top of this file. Built once, on the first call.
std::vector<GradcheckEntry> gradcheck_entries();

// Adds a check of code outside the library (its group is left empty). Throws
// std::invalid_argument when the name is empty, already taken, or the entry has no op or no
// sample inputs.
void register_gradcheck(GradcheckEntry entry);

namespace detail {
// The static object of an XGRAD_GRADCHECKS block: records the group's function (called when the
// registry is first built, not during static initialisation).
struct GradcheckRegistration {
  GradcheckRegistration(const char* group, std::vector<GradcheckEntry> (*entries)());
};
}  // namespace detail

// Builders shared by the registering files.
namespace gradcheck_support {

using ::xgrad::GradcheckEntry;
using ::xgrad::SampleInput;
using T64 = Tensor<double>;
using Inputs = SampleInputs;
using Sizes = GradcheckSizes;

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

// The op with the default generator re-seeded (sample seed + 7) first, so that every evaluation
// of a module with dropout draws the same masks.
GradcheckOp reseeded(GradcheckOp op);

// One input x (B, L, D); `call` says what is computed from it.
GradcheckEntry unary(const std::string& name, const std::string& call, T64 (*op)(const T64&),
                     Values values = Values::normal);

// Binary ops with broadcasting: a (B, L, D) with b (L, 1).
GradcheckEntry binary(const std::string& name, T64 (*op)(const T64&, const T64&), Values rhs = Values::normal);

}  // namespace gradcheck_support
}  // namespace xgrad

// Registers the entries of one file (see the top of this header), at global scope (outside any
// namespace): `group` is the file's folder and stem, `ops_matmul` for xgrad/ops/matmul.cpp; the
// block that follows returns the entries (a std::vector<xgrad::GradcheckEntry>).
#define XGRAD_GRADCHECKS(group)                                                                                        \
  static std::vector<::xgrad::GradcheckEntry> xgrad_gradchecks_##group();                                              \
  static const ::xgrad::detail::GradcheckRegistration xgrad_gradcheck_registration_##group(#group,                     \
                                                                                           &xgrad_gradchecks_##group); \
  static std::vector<::xgrad::GradcheckEntry> xgrad_gradchecks_##group()
