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
//
// The cast cache (torch's cached_casts, autocast_mode.cpp): a leaf tensor that requires grad -- a
// weight -- is rounded to bf16 once and the copy reused by every later linear on this thread until
// its version() changes (an optimizer step, load_state_dict, an initializer: every
// mutable_value()), so a weight used by several forwards inside one guard (gradient accumulation,
// evaluation, generation token by token, a module called twice) is cast once per version, not
// once per use. The cache keeps the bf16 copies only: it holds no tensor (a freed weight's memory
// goes at once; its bf16 copy, at the latest, with the cache). It is per thread and emptied when
// the outermost AutocastGuard of the thread ends, as torch's is on leaving autocast (outside every
// guard, with set_autocast_enabled alone, nothing is cached). It serves linear's operands where
// they are cast once for its three gemms (oneDNN's bf16 matmul); matmul, attention and the
// portable path round their operands per gemm.
//
// The frozen-weight cache (beyond torch, which casts a frozen weight at every use): linear's weight
// when it is a leaf that does not require grad (a frozen weight: LoRA's base model, a model being
// evaluated or generating) is cast once per version and the copy kept across guards, steps and
// threads for as long as the tensor lives: its node's destructor drops it, and a version change
// (merge_lora, load_state_dict, nn::init, any mutable_value()) makes the next use cast again. The
// bytes it holds (half the float32 size of each frozen weight cast so far) are
// autocast_frozen_cache_bytes(). clear_autocast_cache() empties it too (every thread's entries);
// set_autocast_cache_enabled(false) (or AutocastGuard(true, false)) bypasses it on this thread,
// keeping what it holds; the guard's end leaves it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <type_traits>

namespace xgrad {

// torch.is_autocast_cpu_enabled() / torch.set_autocast_cpu_enabled(): this thread's state.
bool is_autocast_enabled();
void set_autocast_enabled(bool enabled);

// torch.is_autocast_cache_enabled() / torch.set_autocast_cache_enabled(): whether this thread's
// autocast reuses the casts of weights (the cast cache, above; on by default).
bool is_autocast_cache_enabled();
void set_autocast_cache_enabled(bool enabled);
// torch.clear_autocast_cache(): drops this thread's cached casts (the outermost guard's end does)
// and every cast of the frozen-weight cache (above), which only this or the weights' deaths empty.
void clear_autocast_cache();
// The bytes of bf16 copies the frozen-weight cache holds now (all threads').
std::size_t autocast_frozen_cache_bytes();

// torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=..., cache_enabled=...): sets
// this thread's state for its lifetime and restores the previous one; nests (AutocastGuard(false)
// disables inside). cache_enabled (default: as it is now) turns the cast cache on or off inside;
// the outermost guard of the thread empties the cache when it ends.
class AutocastGuard {
 public:
  explicit AutocastGuard(bool enabled = true, std::optional<bool> cache_enabled = std::nullopt);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool previous_, previous_cache_;
};

// Which implementation the bf16 gemms under autocast run, for programs to print: "oneDNN bf16
// matmul (<isa>, native bf16; portable under 2^18 multiply-adds)" with the oneDNN gemm backend on
// a CPU where oneDNN has a bf16 matmul, else "portable (fp32 gemm on bf16-rounded operands)".
const char* autocast_gemm_path();

namespace detail {

// Whether an op on T tensors built now on this thread runs its gemms in bf16: float under the guard.
template <class T>
bool autocast_gemm() {
  return std::is_same_v<T, float> && is_autocast_enabled();
}

struct Bf16Matrix;  // bf16.hpp

// The dense (rows, cols) float matrix at src rounded to bf16 (to_bf16, bf16.hpp), through this
// thread's cast cache: `owner` (the tensor's node: held weakly, never kept alive) at `version` is
// cast once, while the cache is enabled inside an AutocastGuard; a later call with the same owner,
// version, src and shape returns the same bits. Otherwise, and when the cache is off, a new cast.
Bf16Matrix autocast_cached_bf16(const std::shared_ptr<const void>& owner, std::uint64_t version, const float* src,
                                std::size_t rows, std::size_t cols);
// The frozen-weight cache (above): owner (a leaf that does not require grad, held weakly) at
// version cast once and kept until owner dies, its version changes or clear_autocast_cache();
// inside a guard or not. A new cast when the cache is off on this thread.
Bf16Matrix autocast_frozen_bf16(const std::shared_ptr<const void>& owner, std::uint64_t version, const float* src,
                                std::size_t rows, std::size_t cols);
// Drops node's frozen cast, if any: ~Node<float> calls it (a lock-free check when none is held).
void autocast_forget(const void* node) noexcept;

// The number of casts this thread's cache holds, and the frozen-weight cache (for tests).
std::size_t autocast_cache_size();
std::size_t autocast_frozen_cache_size();

}  // namespace detail
}  // namespace xgrad
