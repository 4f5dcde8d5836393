// A list of tensors walked as one flat range (the multi-tensor, "foreach" form of torch.optim's
// steps), for the optimizers' and clip_grad's elementwise loops and reductions.
//
// How it splits work: each tensor of n elements is cut into ceil(n / kUnit) units of kUnit
// elements counted from its own start (the last unit shorter). The units of all tensors, in list
// order, are one index range that parallel_for splits into one contiguous chunk per pool thread,
// with at least kGrainUnits units (kUnit * kGrainUnits elements) per chunk. So 200 tensors of 1,000
// elements keep every thread busy, a 3072x768 weight is split within itself, and one step costs a
// single fork/join. A chunk hands its function one contiguous (tensor, begin, end) piece per tensor
// it touches; split points inside a tensor fall on multiples of kUnit, a multiple of every SIMD
// width, so a kernel run over a piece sees the same SIMD batches and scalar tail as over the whole
// tensor (results do not depend on the split). Reductions keep one partial per unit and combine
// them in unit order, so their result does not depend on the thread count either.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include <xgrad/backend/parallel.hpp>

namespace xgrad::optim::flat {

class FlatUnits {
 public:
  static constexpr std::size_t kUnit = 1024;
  static constexpr std::size_t kGrainUnits = 32;  // 32K elements: below 64K a step runs inline

  FlatUnits() = default;
  // sizes: the element count of each tensor, in list order.
  explicit FlatUnits(const std::vector<std::size_t>& sizes) { reset(sizes); }

  // Keeps the capacity of the previous list (no allocation when the list does not grow).
  void reset(const std::vector<std::size_t>& sizes) {
    sizes_ = sizes;
    first_unit_.resize(sizes.size() + 1);
    first_unit_[0] = 0;
    for (std::size_t k = 0; k < sizes.size(); ++k) first_unit_[k + 1] = first_unit_[k] + (sizes[k] + kUnit - 1) / kUnit;
  }

  std::size_t tensors() const { return sizes_.size(); }
  std::size_t units() const { return first_unit_.empty() ? 0 : first_unit_.back(); }
  // The index of the unit that holds element `offset` of tensor k (offset < its size).
  std::size_t unit_of(std::size_t k, std::size_t offset) const { return first_unit_[k] + offset / kUnit; }
  // The units of tensor k: [first_unit(k), first_unit(k + 1)).
  std::size_t first_unit(std::size_t k) const { return first_unit_[k]; }

  // fn(k, begin, end) for each piece of the units [u0, u1): elements [begin, end) of tensor k, in
  // list order, at most one piece per tensor.
  template <class F>
  void walk(std::size_t u0, std::size_t u1, const F& fn) const {
    if (u0 >= u1) return;
    // The tensor holding unit u0: the last k with first_unit_[k] <= u0 and a unit of its own.
    std::size_t k =
        static_cast<std::size_t>(std::upper_bound(first_unit_.begin(), first_unit_.end(), u0) - first_unit_.begin()) -
        1;
    for (; k < sizes_.size() && first_unit_[k] < u1; ++k) {
      if (sizes_[k] == 0) continue;
      const std::size_t a = std::max(u0, first_unit_[k]) - first_unit_[k];
      const std::size_t b = std::min(u1, first_unit_[k + 1]) - first_unit_[k];
      fn(k, a * kUnit, std::min(b * kUnit, sizes_[k]));
    }
  }

  // walk over every unit, split across the pool as the header says.
  template <class F>
  void parallel_walk(const F& fn) const {
    xgrad::detail::parallel_for(units(), kGrainUnits, [&](std::size_t u0, std::size_t u1) { walk(u0, u1, fn); });
  }

 private:
  std::vector<std::size_t> sizes_;
  std::vector<std::size_t> first_unit_;  // tensor k's units start here; back(): all units
};

}  // namespace xgrad::optim::flat
