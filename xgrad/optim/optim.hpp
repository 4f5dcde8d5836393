// xgrad's optimizers (torch.optim): SGD, Adam, AdamW, RMSprop, Adagrad, gradient clipping,
// learning-rate schedules, and nanoGPT's weight-decay groups and warmup-cosine schedule, all in
// namespace xgrad::optim.
#pragma once

#include <xgrad/optim/adagrad.hpp>
#include <xgrad/optim/adam.hpp>
#include <xgrad/optim/clip_grad.hpp>
#include <xgrad/optim/lr_scheduler.hpp>
#include <xgrad/optim/optimizer.hpp>
#include <xgrad/optim/param_groups.hpp>
#include <xgrad/optim/rmsprop.hpp>
#include <xgrad/optim/sgd.hpp>
#include <xgrad/optim/warmup_cosine.hpp>
