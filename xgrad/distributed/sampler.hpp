// DistributedSampler's defaults from the process group: torch's DistributedSampler(dataset) with
// num_replicas and rank left None takes them from torch.distributed; xgrad's data library knows
// nothing of MPI and takes them explicitly, and this header gives them.
//
//   xgrad::distributed::init_process_group();
//   auto sampler = std::make_shared<xgrad::data::DistributedSampler>(
//       dataset->size(), xgrad::distributed::sampler_options().seed(7));
//   auto loader = xgrad::data::make_data_loader(dataset, xgrad::data::DataLoaderOptions()
//                     .batch_size(global_batch / xgrad::distributed::get_world_size()).sampler(sampler));
#pragma once

#include <xgrad/base/check.hpp>
#include <xgrad/data/sampler.hpp>
#include <xgrad/distributed/distributed.hpp>

namespace xgrad::distributed {

// DistributedSamplerOptions(get_world_size(), get_rank()), the other options at torch's defaults
// (shuffle, seed 0, no drop_last). Throws std::invalid_argument when the process group is not
// initialized.
inline data::DistributedSamplerOptions sampler_options() {
  XGRAD_CHECK(is_initialized(), "distributed::sampler_options: the process group is not initialized; call ",
              "init_process_group() first, or give num_replicas and rank to DistributedSamplerOptions");
  return data::DistributedSamplerOptions(static_cast<std::size_t>(get_world_size()),
                                         static_cast<std::size_t>(get_rank()));
}

}  // namespace xgrad::distributed
