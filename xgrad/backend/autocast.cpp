// The per-thread autocast state behind AutocastGuard (autocast.hpp).
#include <xgrad/backend/autocast.hpp>

#include <xgrad/backend/gemm.hpp>

namespace xgrad {

namespace {
thread_local bool autocast_enabled = false;
}  // namespace

bool is_autocast_enabled() { return autocast_enabled; }
void set_autocast_enabled(bool enabled) { autocast_enabled = enabled; }

const char* autocast_gemm_path() { return detail::bf16_gemm_path(); }

}  // namespace xgrad
