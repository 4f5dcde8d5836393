// expect_bitwise: a fused op's arrays (its output, then its gradients) against the unfused ops',
// byte for byte; a difference names the array and its largest |difference|.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace xgrad::testing {

// Whether a and b have one shape and the same bytes.
template <class T>
bool same_bits(const Array<T>& a, const Array<T>& b) {
  return shape_of(a) == shape_of(b) && (a.size() == 0 || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

template <class T>
void expect_bitwise(const std::vector<Array<T>>& want, const std::vector<Array<T>>& got, const std::string& what,
                    const std::string& legend) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (std::size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(shape_of(want[i]), shape_of(got[i])) << what << ", array " << i;
    if (want[i].size() == 0) continue;  // memcmp takes no null buffer, even for 0 bytes
    EXPECT_EQ(std::memcmp(want[i].data(), got[i].data(), want[i].size() * sizeof(T)), 0)
        << what << ", array " << i << " (" << legend << "): max |diff| " << max_abs_diff(want[i], got[i]);
  }
}

}  // namespace xgrad::testing
