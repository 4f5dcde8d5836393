// The umbrella header: everything a user of xgrad needs.
#pragma once

#include <xgrad/base/check.hpp>
#include <xgrad/base/random.hpp>
#include <xgrad/base/warning.hpp>
#include <xgrad/backend/allocator.hpp>
#include <xgrad/backend/autocast.hpp>
#include <xgrad/backend/gemm_backend.hpp>
#include <xgrad/backend/parallel.hpp>
#include <xgrad/core/factories.hpp>
#include <xgrad/core/function.hpp>
#include <xgrad/core/grad_mode.hpp>
#include <xgrad/core/gradcheck.hpp>
#include <xgrad/core/graph.hpp>
#include <xgrad/core/profiler.hpp>
#include <xgrad/core/tensor.hpp>
#include <xgrad/ops/ops.hpp>
#include <xgrad/models/sampling.hpp>
#include <xgrad/nn/nn.hpp>
#include <xgrad/models/gpt.hpp>
#include <xgrad/models/hf_gpt2.hpp>
#include <xgrad/optim/optim.hpp>
#include <xgrad/data/data.hpp>
#include <xgrad/serialize/serialize.hpp>
#include <xgrad/text/bpe.hpp>
#include <xgrad/text/bpe_trainer.hpp>
#include <xgrad/train/trainer.hpp>
