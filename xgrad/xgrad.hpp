// The umbrella header: everything a user of xgrad needs.
#pragma once

#include <xgrad/autograd/allocator.hpp>
#include <xgrad/autograd/autocast.hpp>
#include <xgrad/autograd/check.hpp>
#include <xgrad/autograd/gemm_backend.hpp>
#include <xgrad/autograd/gradcheck.hpp>
#include <xgrad/autograd/ops.hpp>
#include <xgrad/autograd/parallel.hpp>
#include <xgrad/autograd/random.hpp>
#include <xgrad/autograd/tensor.hpp>
#include <xgrad/autograd/warning.hpp>
#include <xgrad/data/data.hpp>
#include <xgrad/nn/nn.hpp>
#include <xgrad/optim/optim.hpp>
#include <xgrad/serialize/serialize.hpp>
