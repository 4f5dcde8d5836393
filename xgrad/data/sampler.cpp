// Samplers (sampler.hpp).
#include <xgrad/data/sampler.hpp>

#include <new>

#include <xgrad/base/check.hpp>
#include <xgrad/data/dataset.hpp>

namespace xgrad::data {

void Sampler::load_state(const std::optional<GeneratorState>& state) {
  XGRAD_CHECK(!state, "Sampler::load_state: this sampler has a fixed order, but the state holds a generator's "
              "state (saved from a random sampler: build the loader with the same shuffle and sampler)");
}

std::vector<std::size_t> SequentialSampler::indices() {
  std::vector<std::size_t> order = detail::index_vector(size_, "SequentialSampler", "the dataset's indices");
  for (std::size_t i = 0; i < size_; ++i) order[i] = i;
  return order;
}

RandomSampler::RandomSampler(std::size_t size, Generator generator, bool replacement,
                             std::optional<std::size_t> num_samples)
    : data_size_(size), replacement_(replacement), num_samples_(num_samples.value_or(size)),
      generator_(generator) {
  XGRAD_CHECK(!num_samples || *num_samples > 0, "RandomSampler: num_samples must be positive, got 0");
  XGRAD_CHECK(replacement || !num_samples || *num_samples == size, "RandomSampler: num_samples (", num_samples_,
              ") differs from the dataset's size (", size, "): only allowed with replacement=true");
}

std::vector<std::size_t> RandomSampler::indices() {
  if (!replacement_) return detail::randperm(data_size_, generator_, "RandomSampler");
  XGRAD_CHECK(data_size_ > 0, "RandomSampler: cannot draw with replacement from an empty dataset");
  std::vector<std::size_t> order = detail::index_vector(num_samples_, "RandomSampler", "an epoch of num_samples");
  for (auto& i : order) i = detail::uniform_index(generator_, data_size_);
  return order;
}

void RandomSampler::load_state(const std::optional<GeneratorState>& state) {
  XGRAD_CHECK(state.has_value(), "RandomSampler::load_state: the state holds no generator state (saved from a ",
              "sequential sampler: build the loader with the same shuffle and sampler)");
  generator_.set_state(*state);
}

DistributedSampler::DistributedSampler(std::size_t dataset_size, DistributedSamplerOptions options)
    : dataset_size_(dataset_size), options_(options) {
  const std::size_t replicas = options_.num_replicas();
  XGRAD_CHECK(replicas > 0, "DistributedSampler: num_replicas must be positive, got 0");
  XGRAD_CHECK(options_.rank() < replicas, "DistributedSampler: invalid rank ", options_.rank(),
              ", rank should be in the interval [0, ", replicas - 1, "]");
  // torch: ceil((N - R) / R) with drop_last when R does not divide N, which is floor(N / R).
  num_samples_ = options_.drop_last() ? dataset_size_ / replicas : (dataset_size_ + replicas - 1) / replicas;
}

std::vector<std::size_t> DistributedSampler::indices() {
  std::vector<std::size_t> order;
  if (options_.shuffle()) {
    // seed + epoch, wrapping as torch's manual_seed does for a 64-bit seed.
    Generator generator(options_.seed() + static_cast<std::uint64_t>(epoch_));
    order = detail::randperm(dataset_size_, generator, "DistributedSampler");
  } else {
    order = detail::index_vector(dataset_size_, "DistributedSampler", "the dataset's indices");
    for (std::size_t i = 0; i < dataset_size_; ++i) order[i] = i;
  }
  const std::size_t total = total_size();
  if (order.size() < total) {
    // Not drop_last: pad with the order's first indices, cycling when the padding is longer than
    // the order (fewer examples than ranks). total > 0 here, so the order is not empty.
    const std::size_t n = order.size();
    for (std::size_t i = 0; order.size() < total; ++i) order.push_back(order[i % n]);
  }
  order.resize(total);  // drop_last: cut the tail
  std::vector<std::size_t> mine;
  mine.reserve(num_samples_);
  for (std::size_t i = options_.rank(); i < total; i += options_.num_replicas()) mine.push_back(order[i]);
  return mine;
}

BatchSampler::BatchSampler(std::shared_ptr<Sampler> sampler, std::size_t batch_size, bool drop_last)
    : sampler_(std::move(sampler)), batch_size_(batch_size), drop_last_(drop_last) {
  XGRAD_CHECK(sampler_ != nullptr, "BatchSampler: the sampler is null");
  XGRAD_CHECK(batch_size_ > 0, "BatchSampler: batch_size must be positive, got 0");
}

std::size_t BatchSampler::size() const {
  const std::size_t n = sampler_->size();
  return n / batch_size_ + (drop_last_ || n % batch_size_ == 0 ? 0 : 1);  // n + batch_size - 1 could wrap
}

std::vector<std::vector<std::size_t>> BatchSampler::batches() {
  const std::vector<std::size_t> order = sampler_->indices();
  std::vector<std::vector<std::size_t>> out;
  try {
    out.reserve(order.size() / batch_size_ + 1);
    for (std::size_t begin = 0; begin < order.size(); begin += batch_size_) {
      const std::size_t end = std::min(order.size(), begin + batch_size_);
      if (drop_last_ && end - begin < batch_size_) break;
      out.emplace_back(order.begin() + begin, order.begin() + end);
    }
  } catch (const std::bad_alloc&) {  // the batches copy the order: twice its memory
    throw OutOfMemoryError("BatchSampler", xgrad::detail::concat("for an epoch's batches of ", batch_size_, " (",
                                                                 order.size(), " indices, copied into batches: ",
                                                                 order.size() * sizeof(std::size_t), " bytes more)"));
  }
  return out;
}

}  // namespace xgrad::data
