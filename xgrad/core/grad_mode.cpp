// Grad mode and anomaly mode (grad_mode.hpp): two flags per thread, read when an op records its
// result (graph.cpp) and when a gradient is accumulated.
#include <xgrad/core/grad_mode.hpp>

namespace xgrad {

namespace {
thread_local bool grad_enabled = true;
thread_local bool anomaly_enabled = false;
}  // namespace

bool is_grad_enabled() { return grad_enabled; }
void set_grad_enabled(bool enabled) { grad_enabled = enabled; }
bool is_anomaly_enabled() { return anomaly_enabled; }
void set_detect_anomaly(bool enabled) { anomaly_enabled = enabled; }

}  // namespace xgrad
