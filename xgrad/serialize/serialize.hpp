// Saving and loading: cereal archives of modules, optimizers, schedules, generators and whole
// checkpoints (archive.hpp, checkpoint.hpp), safetensors for weights shared with PyTorch
// (safetensors.hpp), and the atomic writer they all save through (atomic_file.hpp).
#pragma once

#include <xgrad/serialize/archive.hpp>
#include <xgrad/serialize/atomic_file.hpp>
#include <xgrad/serialize/checkpoint.hpp>
#include <xgrad/serialize/format_error.hpp>
#include <xgrad/serialize/safetensors.hpp>
