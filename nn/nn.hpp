// torch.nn for xgrad: every module, its options and the initializers.
#pragma once

#include "nn/activation.hpp"
#include "nn/dropout.hpp"
#include "nn/embedding.hpp"
#include "nn/init.hpp"
#include "nn/layer_norm.hpp"
#include "nn/linear.hpp"
#include "nn/module.hpp"
#include "nn/multihead_attention.hpp"
#include "nn/sequential.hpp"
#include "nn/transformer.hpp"
