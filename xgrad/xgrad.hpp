// The umbrella header: everything a user of xgrad needs.
#pragma once

#include <xgrad/backend/allocator.hpp>
#include <xgrad/backend/autocast.hpp>
#include <xgrad/base/check.hpp>
#include <xgrad/backend/gemm_backend.hpp>
#include <xgrad/core/gradcheck.hpp>
#include <xgrad/ops/ops.hpp>
#include <xgrad/backend/parallel.hpp>
#include <xgrad/base/random.hpp>
#include <xgrad/core/tensor.hpp>
#include <xgrad/base/warning.hpp>
#include <xgrad/data/data.hpp>
#include <xgrad/nn/nn.hpp>
#include <xgrad/optim/optim.hpp>
#include <xgrad/serialize/serialize.hpp>
