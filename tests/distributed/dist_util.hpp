// Helpers of the distributed suites.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <xgrad/distributed/distributed.hpp>
#include <xgrad/xgrad.hpp>

#include "test_util.hpp"

namespace xgrad::testing {

inline int rank() { return distributed::get_rank(); }
inline int world() { return distributed::get_world_size(); }

// Whether every rank's bool is true (the assertion then holds for the whole job).
inline bool all_ranks(bool ok) {
  return distributed::all_reduce_scalar<std::int64_t>(ok ? 0 : 1, distributed::ReduceOp::SUM) == 0;
}

}  // namespace xgrad::testing
