// XGRAD_ARG declares one option of an Options struct the way LibTorch's TORCH_ARG does: a
// chained setter and a getter with PyTorch's Python argument name, and the default right after
// the macro.
//
//   struct DropoutOptions {
//     XGRAD_ARG(double, p) = 0.5;
//   };
//   DropoutOptions().p(0.2).p()  // 0.2
#pragma once

#include <utility>

#define XGRAD_ARG(TYPE, NAME)                                      \
 public:                                                           \
  inline auto& NAME(TYPE new_##NAME) {                             \
    this->NAME##_ = std::move(new_##NAME);                         \
    return *this;                                                  \
  }                                                                \
  inline const TYPE& NAME() const noexcept { return this->NAME##_; } \
                                                                   \
 private:                                                          \
  TYPE NAME##_
