// xgrad's optimizers (torch.optim): SGD, Adam, AdamW, RMSprop, Adagrad, gradient clipping and
// learning-rate schedules, all in namespace xgrad::optim.
#pragma once

#include <xgrad/optim/adagrad.hpp>
#include <xgrad/optim/adam.hpp>
#include <xgrad/optim/clip_grad.hpp>
#include <xgrad/optim/lr_scheduler.hpp>
#include <xgrad/optim/optimizer.hpp>
#include <xgrad/optim/rmsprop.hpp>
#include <xgrad/optim/sgd.hpp>
