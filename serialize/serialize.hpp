// Saving and loading: cereal archives of modules, optimizers, schedules, generators and whole
// checkpoints (archive.hpp, checkpoint.hpp), safetensors for weights shared with PyTorch
// (safetensors.hpp), and the atomic writer they all save through (atomic_file.hpp).
#pragma once

#include "serialize/archive.hpp"
#include "serialize/atomic_file.hpp"
#include "serialize/checkpoint.hpp"
#include "serialize/format_error.hpp"
#include "serialize/safetensors.hpp"
