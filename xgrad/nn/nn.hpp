// torch.nn for xgrad: every module, its options and the initializers.
#pragma once

#include <xgrad/nn/activation.hpp>
#include <xgrad/nn/dropout.hpp>
#include <xgrad/nn/embedding.hpp>
#include <xgrad/nn/init.hpp>
#include <xgrad/nn/kv_cache.hpp>
#include <xgrad/nn/layer_norm.hpp>
#include <xgrad/nn/linear.hpp>
#include <xgrad/nn/lora.hpp>
#include <xgrad/nn/module.hpp>
#include <xgrad/nn/multihead_attention.hpp>
#include <xgrad/nn/no_init_weights.hpp>
#include <xgrad/nn/rms_norm.hpp>
#include <xgrad/nn/sequential.hpp>
#include <xgrad/nn/transformer.hpp>
