// bfloat16 autocast, as torch.autocast(device_type="cpu", dtype=torch.bfloat16)
// (https://pytorch.org/docs/stable/amp.html#cpu-ops-that-can-autocast-to-bfloat16).
//
// compile: snippet given: nn::Linear<float> model(4, 2); auto x = randn<float>({3, 4}), y = randn<float>({3, 2});
//   {
//     xgrad::AutocastGuard autocast;                  // bf16 gemms from here on, on this thread
//     Tensor<float> loss = mse_loss(model.forward(x), y);
//     loss.backward();                                // uses the forward's choice, guard or not
//   }
//
// Under the guard, the gemms of linear, matmul and the fused attention take their float32 operands
// rounded to bfloat16 (round to nearest even) and accumulate and return float32 -- forward and
// backward. Everything else stays float32: LayerNorm, softmax, GELU, the losses, the gradients as
// stored, optimizer state and the master weights. Only float tensors are cast (torch autocasts
// fp32 alone); double tensors are unaffected.
//
// The state is per thread, as in torch. Each op reads it on the thread that builds it and records
// the choice in its node: its backward, wherever and whenever it runs, and the per-head gemms that
// attention hands to pool threads use bf16 exactly when the forward did.
#pragma once

#include <type_traits>

namespace xgrad {

// torch.is_autocast_cpu_enabled() / torch.set_autocast_cpu_enabled(): this thread's state.
bool is_autocast_enabled();
void set_autocast_enabled(bool enabled);

// torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=...): sets this thread's state
// for its lifetime and restores the previous one; nests (AutocastGuard(false) disables inside).
class AutocastGuard {
 public:
  explicit AutocastGuard(bool enabled = true) : previous_(is_autocast_enabled()) { set_autocast_enabled(enabled); }
  ~AutocastGuard() { set_autocast_enabled(previous_); }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool previous_;
};

// Which implementation the bf16 gemms under autocast run, for programs to print: "oneDNN bf16
// matmul (<isa>, native bf16; portable under 2^17 multiply-adds)" with the oneDNN gemm backend on
// a CPU where oneDNN has a bf16 matmul, else "portable (fp32 gemm on bf16-rounded operands)".
const char* autocast_gemm_path();

namespace detail {

// Whether an op on T tensors built now on this thread runs its gemms in bf16: float under the guard.
template <class T>
bool autocast_gemm() {
  return std::is_same_v<T, float> && is_autocast_enabled();
}

}  // namespace detail
}  // namespace xgrad
