// Error checking: XGRAD_CHECK throws std::invalid_argument with a message that names the op,
// what was expected and what came. Library code never exits and never prints.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
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

// The element count of `shape`, checked: every shape that enters the library (factories,
// from_vector, reshape, expand, the loaders) passes here before memory is allocated for it.
// Throws std::invalid_argument naming `who` and the shape when the product of the dims
// overflows, or when the tensor would need more than PTRDIFF_MAX bytes of elements of
// `element_size` bytes (more than malloc can give or xtensor's signed strides can address).
// Zero dims give 0 elements, but the other dims must still fit (xtensor computes strides from
// them).
template <class Range>
std::size_t checked_numel(const Range& shape, std::size_t element_size, const char* who) {
  constexpr std::size_t limit = static_cast<std::size_t>(PTRDIFF_MAX);
  std::size_t strides = 1;  // product of max(d, 1)
  bool zero = false;
  for (const auto d : shape) {
    const auto n = static_cast<std::size_t>(d);
    zero = zero || n == 0;
    if (n > 1 && strides > limit / n)
      throw std::invalid_argument(detail::concat(who, ": the shape ", shape_str(shape),
                                                 " has too many elements (the product of its sizes overflows)"));
    if (n > 1) strides *= n;
  }
  const std::size_t numel = zero ? 0 : strides;
  if (numel > limit / element_size)
    throw std::invalid_argument(detail::concat(who, ": the shape ", shape_str(shape), " has ", numel,
                                               " elements of ", element_size, " bytes, more than can be allocated (",
                                               limit, " bytes at most)"));
  return numel;
}

// a + b and a * b of sizes or counts (integers), checked: throws std::invalid_argument
// "<who>: <what> overflows (a + b)" when the exact result does not fit T. For the arithmetic of a
// public entry point's size arguments before anything is allocated for them
// (checked_add(t0, max_new_tokens, "GPT::generate", "the sequence length")).
template <class T>
T checked_add(T a, T b, const char* who, const char* what) {
  T r;
  if (__builtin_add_overflow(a, b, &r))
    throw std::invalid_argument(detail::concat(who, ": ", what, " overflows (", a, " + ", b, ")"));
  return r;
}
template <class T>
T checked_mul(T a, T b, const char* who, const char* what) {
  T r;
  if (__builtin_mul_overflow(a, b, &r))
    throw std::invalid_argument(detail::concat(who, ": ", what, " overflows (", a, " * ", b, ")"));
  return r;
}

// Thrown when the memory for a tensor cannot be had: a std::bad_alloc (catch either) whose what()
// names the op, the shape and the bytes asked for, as PyTorch's "not enough memory" error does.
class OutOfMemoryError : public std::bad_alloc {
 public:
  OutOfMemoryError(const char* who, const Shape& shape, std::size_t bytes)
      : message_(detail::concat(who, ": not enough memory for a tensor of shape ", shape_str(shape), ": tried to "
                                "allocate ", bytes, " bytes (", static_cast<double>(bytes) / (1 << 30), " GiB)")) {}
  // An allocation that failed inside `who` somewhere other than empty_array (a temporary buffer,
  // a user's hook): names `who` and what it was computing (`context`), as exactly as is known.
  OutOfMemoryError(const std::string& who, const std::string& context)
      : message_(detail::concat(who, ": not enough memory ", context)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

}  // namespace xgrad

// XGRAD_CHECK(a.dim() == 2, "matmul: expected a 2-D tensor, got ", a.shape());
#define XGRAD_CHECK(cond, ...)                                                 \
  do {                                                                         \
    if (!(cond)) throw std::invalid_argument(::xgrad::detail::concat(__VA_ARGS__)); \
  } while (0)
