// The umbrella header: everything a user of xgrad needs.
#pragma once

#include "autograd/check.hpp"
#include "autograd/gradcheck.hpp"
#include "autograd/ops.hpp"
#include "autograd/parallel.hpp"
#include "autograd/random.hpp"
#include "autograd/tensor.hpp"
#include "nn/nn.hpp"
#include "optim/optim.hpp"
#include "serialize/serialize.hpp"
