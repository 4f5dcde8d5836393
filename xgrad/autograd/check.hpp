// Error checking: XGRAD_CHECK throws std::invalid_argument with a message that names the op,
// what was expected and what came. Library code never exits and never prints.
#pragma once

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <xtensor/xstorage.hpp>

namespace xgrad {

// A tensor shape, row-major, outermost dimension first.
using Shape = std::vector<std::size_t>;

// "(2, 3, 4)"; "()" for a scalar.
template <class Range>
std::string shape_str(const Range& shape) {
  std::ostringstream s;
  s << '(';
  bool first = true;
  for (auto d : shape) {
    s << (first ? "" : ", ") << d;
    first = false;
  }
  s << ')';
  return s.str();
}

namespace detail {

template <class A>
void append(std::ostringstream& s, const A& a) { s << a; }
inline void append(std::ostringstream& s, const Shape& a) { s << shape_str(a); }
inline void append(std::ostringstream& s, const std::vector<std::int64_t>& a) { s << shape_str(a); }
inline void append(std::ostringstream& s, const std::vector<int>& a) { s << shape_str(a); }
template <class V, std::size_t N, class A, bool I>
void append(std::ostringstream& s, const xt::svector<V, N, A, I>& a) { s << shape_str(a); }

template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream s;
  (append(s, args), ...);
  return s.str();
}

}  // namespace detail
}  // namespace xgrad

// XGRAD_CHECK(a.dim() == 2, "matmul: expected a 2-D tensor, got ", a.shape());
#define XGRAD_CHECK(cond, ...)                                                 \
  do {                                                                         \
    if (!(cond)) throw std::invalid_argument(::xgrad::detail::concat(__VA_ARGS__)); \
  } while (0)
