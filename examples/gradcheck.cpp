// gradcheck: the finite-difference check (double precision, central differences) of every op in
// ops/ops.hpp and every module in nn/, or of the ones named, at sizes chosen by flags.
// Prints one row per check (name, shapes, largest absolute and relative error, PASS/FAIL) and
// exits with 1 when any check fails.
//
//   gradcheck                          # everything at the default sizes
//   gradcheck --list                   # the names
//   gradcheck matmul 'nn.*' --batch 3 --seq 5 --dim 8 --verbose
//
// The checks themselves are the registry of the testing library xgrad_testing
// (tests/gradcheck/registry.hpp: each op's and module's entries sit in a file named after its
// .cpp), which the test suite runs too (tests/gradcheck/test_gradcheck_checks.cpp, one gtest per
// check). `gradcheck --list` shows them all.

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <gradcheck/registry.hpp>

#include <xgrad/train/cli.hpp>

namespace {

namespace cli = xgrad::train::cli;  // the flag checks with short messages

using Check = xgrad::GradcheckEntry;

// "name" matches itself; "prefix*" every name that starts with prefix.
bool matches(const std::string& pattern, const std::string& name) {
  if (!pattern.empty() && pattern.back() == '*')
    return name.compare(0, pattern.size() - 1, pattern, 0, pattern.size() - 1) == 0;
  return pattern == name;
}

}  // namespace

int main(int argc, char** argv) {
  xgrad::GradcheckSizes sizes;
  xgrad::GradcheckOptions options;
  std::vector<std::string> names;
  bool list = false, verbose = false;

  CLI::App app{
      "Finite-difference gradient check (double, central differences) of every op and module.\n"
      "Exits with 1 when any check fails."};
  app.get_formatter()->column_width(36);
  app.add_option("names", names, "checks to run (default: all); 'prefix*' selects by prefix, e.g. 'nn.*'");
  app.add_flag("--list", list, "list the checks and exit");
  app.add_flag("-v,--verbose", verbose, "one row per checked tensor too");
  app.add_option("--batch", sizes.B, "B, the batch size")->check(cli::integer_in(1, 64))->capture_default_str();
  app.add_option("--seq", sizes.L, "L, the sequence length")->check(cli::integer_in(1, 64))->capture_default_str();
  app.add_option("--dim", sizes.D, "D, the feature size (a multiple of --heads)")
      ->check(cli::integer_in(1, 256))
      ->capture_default_str();
  app.add_option("--heads", sizes.H, "H, attention heads")->check(cli::integer_in(1, 64))->capture_default_str();
  app.add_option("--hidden", sizes.F, "F, a second feature size (linear outputs, feed-forward)")
      ->check(cli::integer_in(1, 256))
      ->capture_default_str();
  app.add_option("--classes", sizes.C, "C, classes of cross_entropy and rows of embedding")
      ->check(cli::integer_in(2, 256))
      ->capture_default_str();
  app.add_option("--seed", sizes.seed, "seed of the inputs and weights")
      ->check(cli::unsigned_integer())
      ->capture_default_str();
  app.add_option("--eps", options.eps, "finite-difference step")->check(cli::positive())->capture_default_str();
  app.add_option("--atol", options.atol, "absolute tolerance")->check(cli::non_negative())->capture_default_str();
  app.add_option("--rtol", options.rtol, "relative tolerance")->check(cli::non_negative())->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const std::vector<Check> checks = xgrad::gradcheck_entries();
  if (list) {
    for (const auto& check : checks) std::printf("%-40s %s\n", check.name.c_str(), check.what.c_str());
    return 0;
  }
  if (sizes.D % sizes.H != 0) {
    std::fprintf(stderr, "--dim %zu must be a multiple of --heads %zu\n", sizes.D, sizes.H);
    return 2;
  }
  std::vector<const Check*> chosen;
  for (const auto& check : checks) {
    bool wanted = names.empty();
    for (const auto& pattern : names) wanted = wanted || matches(pattern, check.name);
    if (wanted) chosen.push_back(&check);
  }
  for (const auto& pattern : names) {
    bool found = false;
    for (const auto& check : checks) found = found || matches(pattern, check.name);
    if (!found) {
      std::fprintf(stderr, "no check named \"%s\" (gradcheck --list shows the names)\n", pattern.c_str());
      return 2;
    }
  }

  std::printf(
      "B %zu, L %zu, D %zu, H %zu, F %zu, C %zu, seed %llu; eps %g, pass when |analytic - numeric| <= "
      "%g + %g |numeric|\n\n",
      sizes.B, sizes.L, sizes.D, sizes.H, sizes.F, sizes.C, static_cast<unsigned long long>(sizes.seed), options.eps,
      options.atol, options.rtol);
  std::printf("%-40s %-44s %11s %11s\n", "name", "shapes", "max abs err", "max rel err");
  std::vector<std::string> failed;
  for (const Check* check : chosen) {
    xgrad::GradcheckOutcome outcome;
    try {
      outcome = xgrad::run_gradcheck(*check, sizes, options);
    } catch (const std::exception& e) {
      std::printf("%-40s error: %s\n", check->name.c_str(), e.what());
      failed.push_back(check->name);
      continue;
    }
    double abs_err = 0, rel_err = 0;
    for (const auto& r : outcome.result.inputs) {
      abs_err = std::max(abs_err, r.max_abs_error);
      rel_err = std::max(rel_err, r.max_rel_error);
    }
    const bool passed = outcome.passed();
    std::printf("%-40s %-44s %11.2e %11.2e  %s\n", check->name.c_str(), outcome.shapes.c_str(), abs_err, rel_err,
                passed ? "PASS" : "FAIL");
    if (verbose || !passed) {
      for (const auto& r : outcome.result.inputs) {
        const std::string label = r.name.empty() ? "input " + std::to_string(r.input) : r.name;
        std::printf("    %-36s %-44s %11.2e %11.2e  %s", label.c_str(), xgrad::shape_str(r.shape).c_str(),
                    r.max_abs_error, r.max_rel_error, r.passed ? "PASS" : "FAIL");
        if (!r.passed)
          std::printf("  (element %zu: analytic %.10g, numeric %.10g)", r.worst_element, r.analytic, r.numeric);
        std::printf("\n");
      }
    }
    if (!passed) failed.push_back(check->name);
  }
  std::printf("\n");
  if (failed.empty()) {
    std::printf("all %zu checks passed\n", chosen.size());
    return 0;
  }
  std::printf("%zu of %zu checks FAILED:", failed.size(), chosen.size());
  for (const auto& name : failed) std::printf(" %s", name.c_str());
  std::printf("\n");
  return 1;
}
