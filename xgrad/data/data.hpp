// torch.utils.data for xgrad, in namespace xgrad::data: datasets, samplers, collating, the
// DataLoader, readers for .npy, CSV and text files, and memory-mapped token files.
#pragma once

#include <xgrad/data/collate.hpp>
#include <xgrad/data/dataloader.hpp>
#include <xgrad/data/dataset.hpp>
#include <xgrad/data/readers.hpp>
#include <xgrad/data/sampler.hpp>
#include <xgrad/data/token_file.hpp>
