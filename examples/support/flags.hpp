// Checks for the examples' numeric flags, with short messages. CLI11's own CLI::PositiveNumber and
// CLI::Range print the whole double range ("Value abc not in range 2.2250738585072014e-308 to
// 1797693134862315708145274237317043567981...": some 300 digits); these print
//   --lr: expected a positive number, got 'abc'
//   --heads: expected an integer in [1, 256], got '0'
// (CLI11 puts the flag's name in front). Header-only: the training plumbing and the gradcheck tool
// both use it.
#pragma once
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <string>

namespace flags {

namespace detail {

// The whole of `text` as a finite double, or false.
inline bool to_double(const std::string& text, double& v) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  v = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && errno != ERANGE && std::isfinite(v);
}

// The whole of `text` as an integer, or false (no fraction, no exponent, no overflow).
inline bool to_integer(const std::string& text, long long& v) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  v = std::strtoll(text.c_str(), &end, 10);
  return end == text.c_str() + text.size() && errno != ERANGE;
}

template <class T>
std::string str(T v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

inline std::string got(const std::string& text) { return ", got '" + text + "'"; }

}  // namespace detail

// A finite number > 0.
inline CLI::Validator positive() {
  return CLI::Validator(
      [](std::string& text) {
        double v;
        return detail::to_double(text, v) && v > 0 ? std::string() : "expected a positive number" + detail::got(text);
      },
      "POSITIVE");
}

// A finite number >= 0.
inline CLI::Validator non_negative() {
  return CLI::Validator(
      [](std::string& text) {
        double v;
        return detail::to_double(text, v) && v >= 0 ? std::string()
                                                    : "expected a number >= 0" + detail::got(text);
      },
      "NONNEGATIVE");
}

// An integer in [lo, hi].
inline CLI::Validator integer_in(long long lo, long long hi) {
  const std::string range = "[" + detail::str(lo) + ", " + detail::str(hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& text) {
        long long v;
        return detail::to_integer(text, v) && v >= lo && v <= hi ? std::string()
                                                                 : "expected an integer in " + range + detail::got(text);
      },
      range);
}

// An int >= lo (and at most INT_MAX, so that it fits the flag's variable).
inline CLI::Validator integer_from(int lo) {
  return CLI::Validator(
      [lo](std::string& text) {
        long long v;
        return detail::to_integer(text, v) && v >= lo && v <= std::numeric_limits<int>::max()
                   ? std::string()
                   : "expected an integer >= " + detail::str(lo) + detail::got(text);
      },
      ">= " + detail::str(lo));
}

// A finite number in [lo, hi].
inline CLI::Validator number_in(double lo, double hi) {
  const std::string range = "[" + detail::str(lo) + ", " + detail::str(hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& text) {
        double v;
        return detail::to_double(text, v) && v >= lo && v <= hi ? std::string()
                                                                : "expected a number in " + range + detail::got(text);
      },
      range);
}

}  // namespace flags
