// torch.utils.data's samplers: the order in which a DataLoader visits a dataset's indices.
// A Sampler gives one epoch's indices at a time; BatchSampler groups them into batches.
//
// A sampler of your own (a DistributedSampler that keeps every rank's share) implements Sampler:
// size(), indices() for the next epoch, set_epoch (called by the DataLoader before each epoch,
// epoch 0 first), and state()/load_state() when its order depends on a generator, so that a
// checkpoint can restore the order of the epoch in progress.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <xgrad/autograd/random.hpp>

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
