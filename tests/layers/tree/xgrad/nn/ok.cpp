// Uses its own floor and those below: no violation.
#include <xgrad/backend/array.hpp>
#include <xgrad/ops/ops.hpp>
#include "linear.hpp"

void g() { xgrad::nn::Linear* p = nullptr; (void)p; }
