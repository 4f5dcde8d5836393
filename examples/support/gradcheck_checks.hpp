// The finite-difference checks (double precision, central differences) of every op in
// ops/ops.hpp and every module in nn/: one list, run by the gradcheck tool at sizes chosen by
// its flags, and by tests/test_gradcheck_checks.cpp as one gtest per entry at the default sizes.
// Add an op or a module: add its entry in gradcheck_checks.cpp, and both run it.
//
// Ops take their inputs as gradcheck arguments (xgrad::gradcheck); modules are checked over
// their input and every parameter in place (xgrad::gradcheck_parameters). Dropout, in ops and
// modules, re-seeds its generator before every evaluation so that every evaluation draws the
// same mask.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <xgrad/xgrad.hpp>

namespace gradcheck_checks {

// The sizes a check builds its inputs from (the gradcheck tool's flags).
struct Sizes {
  std::size_t B = 2;  // --batch
  std::size_t L = 3;  // --seq
  std::size_t D = 4;  // --dim
  std::size_t H = 2;  // --heads (divides D)
  std::size_t F = 5;  // --hidden
  std::size_t C = 5;  // --classes
  std::uint64_t seed = 1;
};

// What a check ran on and what it found.
struct Outcome {
  std::string shapes;  // e.g. "(2, 3, 4) (3, 1)", or "(2, 3, 4) + 2 params (25 values)"
  xgrad::GradcheckResult result;
};

// A check passes when every checked tensor does and at least one was checked (nothing checked
// would make it vacuous).
inline bool passed(const Outcome& outcome) { return outcome.result.passed && !outcome.result.inputs.empty(); }

struct Check {
  std::string name;  // "matmul", "nn.Linear": unique
  std::string what;  // what is computed, in words and shapes
  std::function<Outcome(const Sizes&, const xgrad::GradcheckOptions&)> run;
};

// Every check, ops first (in the order of their source files), then the modules ("nn.*").
std::vector<Check> all_checks();

}  // namespace gradcheck_checks
