// torch.utils.data's samplers: the order in which a DataLoader visits a dataset's indices.
// A Sampler gives one epoch's indices at a time; BatchSampler groups them into batches.
//
// DistributedSampler keeps one rank's share of each epoch. A sampler of your own implements Sampler:
// size(), indices() for the next epoch, set_epoch (called by the DataLoader before each epoch,
// epoch 0 first), and state()/load_state() when its order depends on a generator, so that a
// checkpoint can restore the order of the epoch in progress.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <xgrad/arg.hpp>
#include <xgrad/base/random.hpp>

namespace xgrad::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  // The number of indices in one epoch (len(sampler)).
  virtual std::size_t size() const = 0;
  // The indices of the next epoch, in order; a random sampler advances its generator.
  virtual std::vector<std::size_t> indices() = 0;
  // Called with the epoch's number before indices() (DistributedSampler.set_epoch).
  virtual void set_epoch(std::int64_t epoch) { (void)epoch; }
  // What the next indices() depends on besides the epoch: its generator's state, or nullopt for a
  // sampler whose order is fixed.
  virtual std::optional<GeneratorState> state() const { return std::nullopt; }
  // Restores state(); the default accepts only nullopt.
  virtual void load_state(const std::optional<GeneratorState>& state);
};

// 0, 1, ..., size - 1.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(std::size_t size) : size_(size) {}
  std::size_t size() const override { return size_; }
  std::vector<std::size_t> indices() override;

 private:
  std::size_t size_;
};

// A new random permutation of 0 .. size - 1 each epoch, drawn from its own generator (so the
// order depends only on the generator's seed, not on other random draws of the program). With
// replacement: num_samples (default size) indices drawn uniformly with replacement.
class RandomSampler : public Sampler {
 public:
  RandomSampler(std::size_t size, Generator generator, bool replacement = false,
                std::optional<std::size_t> num_samples = std::nullopt);
  std::size_t size() const override { return num_samples_; }
  std::vector<std::size_t> indices() override;
  std::optional<GeneratorState> state() const override { return generator_.get_state(); }
  void load_state(const std::optional<GeneratorState>& state) override;
  Generator& generator() { return generator_; }

 private:
  std::size_t data_size_;
  bool replacement_;
  std::size_t num_samples_;
  Generator generator_;
};

// torch.utils.data.DistributedSampler's arguments: num_replicas and rank are required here (the
// data library knows nothing of MPI); xgrad::distributed::sampler_options() fills them from the
// process group, as PyTorch does when they are None.
struct DistributedSamplerOptions {
  DistributedSamplerOptions(std::size_t num_replicas, std::size_t rank) : num_replicas_(num_replicas), rank_(rank) {}
  XGRAD_ARG(std::size_t, num_replicas);
  XGRAD_ARG(std::size_t, rank);
  XGRAD_ARG(bool, shuffle) = true;
  XGRAD_ARG(std::uint64_t, seed) = 0;
  XGRAD_ARG(bool, drop_last) = false;
};

// torch.utils.data.DistributedSampler: rank's share of the dataset's indices, for one process of
// num_replicas that each train on their own part of every epoch.
//
// Each epoch, every rank computes the same order -- a permutation drawn from a Generator seeded
// with seed + epoch (shuffle), or 0 .. N - 1 -- makes it a multiple of num_replicas long, and keeps
// the positions rank, rank + num_replicas, ... of it. Without drop_last the order is padded by
// repeating its first indices (so a few examples are seen twice per epoch); with drop_last its
// tail is cut. size() is ceil(N / num_replicas), or floor(N / num_replicas) with drop_last.
//
//   auto sampler = std::make_shared<DistributedSampler>(dataset->size(),
//                                                       DistributedSamplerOptions(world_size, rank));
//   auto loader = make_data_loader(dataset, DataLoaderOptions().batch_size(per_rank).sampler(sampler));
//
// The DataLoader calls set_epoch(e) before each epoch (PyTorch leaves that to the loop), so every
// epoch has a new order. The order depends on (seed, epoch) alone: state() is nullopt, and a
// loader's checkpoint resumes it from its epoch. It is not torch's order for the same seed (the
// generators differ), but has every property of it.
class DistributedSampler : public Sampler {
 public:
  DistributedSampler(std::size_t dataset_size, DistributedSamplerOptions options);
  // Indices per epoch on this rank (len(sampler)).
  std::size_t size() const override { return num_samples_; }
  std::vector<std::size_t> indices() override;
  void set_epoch(std::int64_t epoch) override { epoch_ = epoch; }
  std::int64_t epoch() const { return epoch_; }
  // Indices per epoch over all ranks: size() * num_replicas.
  std::size_t total_size() const { return num_samples_ * options_.num_replicas(); }
  const DistributedSamplerOptions& options() const { return options_; }

 private:
  std::size_t dataset_size_;
  DistributedSamplerOptions options_;
  std::size_t num_samples_;
  std::int64_t epoch_ = 0;
};

// torch.utils.data.BatchSampler: the sampler's indices in groups of batch_size; the last group is
// smaller unless drop_last.
class BatchSampler {
 public:
  BatchSampler(std::shared_ptr<Sampler> sampler, std::size_t batch_size, bool drop_last);
  // The number of batches in one epoch (len(batch_sampler)).
  std::size_t size() const;
  // One epoch's batches: calls sampler->indices() once.
  std::vector<std::vector<std::size_t>> batches();
  const std::shared_ptr<Sampler>& sampler() const { return sampler_; }
  std::size_t batch_size() const { return batch_size_; }
  bool drop_last() const { return drop_last_; }

 private:
  std::shared_ptr<Sampler> sampler_;
  std::size_t batch_size_;
  bool drop_last_;
};

}  // namespace xgrad::data
