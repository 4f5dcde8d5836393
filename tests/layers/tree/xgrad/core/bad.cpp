// A core file that uses two floors above its own. A comment may name nn::Linear freely.
#include <xgrad/core/tensor.hpp>
#include <xgrad/nn/linear.hpp>
#include <xgrad/xgrad.hpp>

const char* text = "optim::SGD in a string is no use";
void f() { xgrad::optim::SGD<float>* p = nullptr; (void)p; }
