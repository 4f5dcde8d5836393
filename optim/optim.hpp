// xgrad's optimizers (torch.optim): SGD, Adam, AdamW, gradient clipping and learning-rate
// schedules, all in namespace xgrad::optim.
#pragma once

#include "optim/adam.hpp"
#include "optim/clip_grad.hpp"
#include "optim/lr_scheduler.hpp"
#include "optim/optimizer.hpp"
#include "optim/sgd.hpp"
