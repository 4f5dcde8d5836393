// torch.utils.data.DataLoader: batches of a dataset, in a sampler's order, collated, optionally
// prepared ahead by background threads; its position can be saved and restored, so that a run
// resumed mid-epoch sees exactly the batches it would have seen.
//
//   auto loader = xgrad::data::make_data_loader(dataset, xgrad::data::DataLoaderOptions()
//                     .batch_size(64).shuffle(true).num_workers(2).generator(xgrad::Generator(0)));
//   for (int epoch = 0; epoch < 10; ++epoch)
//     for (auto& batch : loader) { ... }                      // each loop is one epoch
//
//   // or by steps, across epochs: next() returns nullopt at the end of each epoch
//   auto batch = loader.next();
//   if (!batch) batch = loader.next();                      // the next epoch's first batch
//
//   // checkpoints: the state is a short string for the checkpoint's metadata
//   metadata["data_loader"] = loader.state_dict().to_string();
//   loader.load_state_dict(DataLoaderState::from_string(ckpt.metadata.at("data_loader")));
//
// Defaults as in PyTorch: batch_size 1, shuffle false, drop_last false, num_workers 0 (batches are
// made on the calling thread), prefetch_factor 2. shuffle without a generator seeds the sampler's
// own generator with one draw from xgrad::default_generator() (as PyTorch draws its seed from the
// default generator), at construction.
//
// num_workers > 0: that many threads fetch and collate batches ahead of the loop, at most
// num_workers * prefetch_factor batches ahead; the loop receives them in the sampler's order, so
// the batches are the same as with 0 workers. An exception thrown while making a batch is
// rethrown by the next() that would have returned it (the call after goes on with the batch after). dataset.get and the collate function are
// then called from several threads at once and must allow it (the ones in xgrad::data do).
//
// Each epoch's order is drawn from the sampler when the epoch starts (set_epoch(e) first). The
// state is (epoch, batches of it already returned, the sampler's state before it drew that
// epoch's order): loading it redraws the same order and skips the returned batches.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <xgrad/arg.hpp>
#include <xgrad/base/check.hpp>
#include <xgrad/base/random.hpp>
#include <xgrad/data/collate.hpp>
#include <xgrad/data/dataset.hpp>
#include <xgrad/data/sampler.hpp>

namespace xgrad::data {

struct DataLoaderOptions {
  XGRAD_ARG(std::size_t, batch_size) = 1;
  XGRAD_ARG(bool, shuffle) = false;
  // A sampler of your own (then shuffle must be false); it sees the dataset's indices.
  XGRAD_ARG(std::shared_ptr<Sampler>, sampler) = nullptr;
  XGRAD_ARG(std::size_t, num_workers) = 0;
  XGRAD_ARG(bool, drop_last) = false;
  // Batches prepared ahead per worker.
  XGRAD_ARG(std::size_t, prefetch_factor) = 2;
  // The shuffling sampler's generator (torch's DataLoader(generator=...)).
  XGRAD_ARG(std::optional<Generator>, generator) = std::nullopt;
};

// A DataLoader's position, for checkpoints.
struct DataLoaderState {
  std::int64_t epoch = 0;        // the epoch in progress, or the next one if none is
  std::size_t next_batch = 0;    // batches of that epoch already returned
  std::optional<GeneratorState> sampler;  // the sampler's state before it drew that epoch's order
  std::size_t dataset_size = 0;  // checked on load
  std::size_t batch_size = 0;    // checked on load

  bool operator==(const DataLoaderState& o) const {
    return epoch == o.epoch && next_batch == o.next_batch && sampler == o.sampler &&
           dataset_size == o.dataset_size && batch_size == o.batch_size;
  }
  // One line of text: "DataLoaderState v1 epoch=2 next_batch=17 dataset_size=1000 batch_size=64
  // sampler=<seed>,<s0>,<s1>,<s2>,<s3>" (sampler=none for a fixed order).
  std::string to_string() const;
  // Throws std::invalid_argument naming what is malformed.
  static DataLoaderState from_string(const std::string& text);
};

namespace detail {

template <class Example, class = void>
struct has_default_collate : std::false_type {};
template <class Example>
struct has_default_collate<Example, std::void_t<typename DefaultCollate<Example>::Batch>> : std::true_type {};

template <class Example, bool = has_default_collate<Example>::value>
struct DefaultBatch {
  using type = void;  // no default collate: name the batch type and pass a collate_fn
};
template <class Example>
struct DefaultBatch<Example, true> {
  using type = typename DefaultCollate<Example>::Batch;
};

// Makes batches first .. end - 1 on `workers` threads, at most `window` ahead of the one the
// caller takes next, and hands them over in order.
template <class Batch>
class Prefetcher {
 public:
  Prefetcher(std::function<Batch(std::size_t)> make, std::size_t first, std::size_t end, std::size_t workers,
             std::size_t window)
      : make_(std::move(make)), next_issue_(first), next_take_(first), end_(end), window_(window) {
    for (std::size_t w = 0; w < workers; ++w) threads_.emplace_back([this] { run(); });
  }
  ~Prefetcher() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    for (auto& t : threads_) t.join();
  }
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // The next batch in order (waits for it); rethrows the exception that making it threw.
  Batch take() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return ready_.count(next_take_) > 0; });
    auto node = ready_.extract(next_take_);
    ++next_take_;
    lock.unlock();
    changed_.notify_all();
    if (node.mapped().error) std::rethrow_exception(node.mapped().error);
    return std::move(*node.mapped().batch);
  }

 private:
  struct Slot {
    std::optional<Batch> batch;
    std::exception_ptr error;
  };
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return stop_ || next_issue_ >= end_ || next_issue_ < next_take_ + window_; });
      if (stop_ || next_issue_ >= end_) return;
      const std::size_t k = next_issue_++;
      lock.unlock();
      Slot slot;
      try {
        slot.batch.emplace(make_(k));
      } catch (...) {
        slot.error = std::current_exception();
      }
      lock.lock();
      ready_.emplace(k, std::move(slot));
      changed_.notify_all();
    }
  }

  std::function<Batch(std::size_t)> make_;
  std::size_t next_issue_, next_take_, end_, window_;
  std::map<std::size_t, Slot> ready_;
  bool stop_ = false;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::thread> threads_;
};

}  // namespace detail

template <class Example, class Batch = typename detail::DefaultBatch<Example>::type>
class DataLoader {
 public:
  using CollateFn = std::function<Batch(const std::vector<Example>&)>;

  // collate_fn: nullptr for default_collate.
  DataLoader(std::shared_ptr<const Dataset<Example>> dataset, DataLoaderOptions options = {},
             CollateFn collate_fn = nullptr)
      : dataset_(std::move(dataset)), options_(std::move(options)), collate_(std::move(collate_fn)) {
    static_assert(!std::is_void_v<Batch>, "DataLoader: this example type has no default collate; name the batch "
                                          "type, DataLoader<Example, Batch>, and pass a collate_fn");
    XGRAD_CHECK(dataset_ != nullptr, "DataLoader: the dataset is null");
    XGRAD_CHECK(options_.batch_size() > 0, "DataLoader: batch_size must be positive, got 0");
    XGRAD_CHECK(options_.prefetch_factor() > 0, "DataLoader: prefetch_factor must be positive, got 0");
    XGRAD_CHECK(!(options_.shuffle() && options_.sampler()), "DataLoader: sampler option is mutually exclusive ",
                "with shuffle (the sampler decides the order)");
    if (!collate_) {
      if constexpr (std::is_same_v<typename detail::DefaultBatch<Example>::type, Batch>) {
        collate_ = [](const std::vector<Example>& e) { return DefaultCollate<Example>::collate(e); };
      } else {
        XGRAD_CHECK(false, "DataLoader: this example type has no default collate; pass a collate_fn");
      }
    }
    std::shared_ptr<Sampler> sampler = options_.sampler();
    if (!sampler && options_.shuffle()) {
      // Without a generator, one draw from the default generator seeds the sampler's (only then).
      const Generator generator =
          options_.generator() ? *options_.generator() : Generator(default_generator().next_u64());
      sampler = std::make_shared<RandomSampler>(dataset_->size(), generator);
    }
    if (!sampler) sampler = std::make_shared<SequentialSampler>(dataset_->size());
    batch_sampler_ = std::make_shared<BatchSampler>(sampler, options_.batch_size(), options_.drop_last());
  }
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;
  DataLoader(DataLoader&&) = default;
  DataLoader& operator=(DataLoader&&) = default;

  // Batches per epoch (len(loader)).
  std::size_t size() const { return batch_sampler_->size(); }
  const std::shared_ptr<const Dataset<Example>>& dataset() const { return dataset_; }
  const std::shared_ptr<Sampler>& sampler() const { return batch_sampler_->sampler(); }
  const DataLoaderOptions& options() const { return options_; }
  // The epoch in progress, or the next one.
  std::int64_t epoch() const { return in_epoch_ ? epoch_ - 1 : epoch_; }

  // The next batch of the epoch in progress (starting one if none is); nullopt when it is over,
  // after which the next call starts the next epoch.
  std::optional<Batch> next() {
    if (!in_epoch_) start_epoch(0);
    if (next_batch_ >= batches_->size()) {
      in_epoch_ = false;
      prefetcher_.reset();
      return std::nullopt;
    }
    // A batch whose making throws counts as returned (the next call goes on to the one after), with
    // workers or without.
    const std::size_t k = next_batch_++;
    return prefetcher_ ? prefetcher_->take() : make_batch(*dataset_, collate_, *batches_, k);
  }

  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = Batch*;
    using reference = Batch&;
    Iterator() = default;
    explicit Iterator(DataLoader* loader) : loader_(loader) { ++*this; }
    Batch& operator*() { return *batch_; }
    Batch* operator->() { return &*batch_; }
    Iterator& operator++() {
      batch_ = loader_->next();
      return *this;
    }
    bool operator==(const Iterator& o) const { return !batch_ && !o.batch_; }
    bool operator!=(const Iterator& o) const { return !(*this == o); }

   private:
    DataLoader* loader_ = nullptr;
    std::optional<Batch> batch_;
  };

  // A new epoch, as iter(loader) in PyTorch; right after load_state_dict, the saved epoch from
  // the saved batch on.
  Iterator begin() {
    if (!resume_) {
      in_epoch_ = false;
      prefetcher_.reset();
    }
    resume_ = false;
    return Iterator(this);
  }
  Iterator end() { return Iterator(); }

  DataLoaderState state_dict() const {
    DataLoaderState s;
    s.epoch = epoch();
    s.next_batch = in_epoch_ ? next_batch_ : 0;
    s.sampler = in_epoch_ ? epoch_start_state_ : sampler()->state();
    s.dataset_size = dataset_->size();
    s.batch_size = options_.batch_size();
    return s;
  }

  // Continues from a saved position: the next batch is the one the saved loader would have
  // returned next. The loader must be built like the saved one (dataset size, batch size,
  // sampler kind); otherwise throws std::invalid_argument and changes nothing.
  void load_state_dict(const DataLoaderState& state) {
    XGRAD_CHECK(state.dataset_size == dataset_->size() && state.batch_size == options_.batch_size(),
                "DataLoader::load_state_dict: the state was saved by a loader over ", state.dataset_size,
                " examples in batches of ", state.batch_size, ", this loader has ", dataset_->size(),
                " examples in batches of ", options_.batch_size(),
                " (a state of a run on another dataset or with another batch size: build the loader over the "
                "dataset it was saved with)");
    XGRAD_CHECK(state.epoch >= 0 && state.next_batch <= size(), "DataLoader::load_state_dict: batch ",
                state.next_batch, " of epoch ", state.epoch, " does not exist (", size(), " batches per epoch)");
    const std::optional<GeneratorState> before = sampler()->state();
    sampler()->load_state(state.sampler);
    prefetcher_.reset();
    in_epoch_ = false;
    epoch_ = state.epoch;
    if (state.next_batch > 0) {
      try {
        start_epoch(state.next_batch);
      } catch (...) {
        sampler()->load_state(before);
        throw;
      }
    }
    resume_ = true;
  }

 private:
  static Batch make_batch(const Dataset<Example>& dataset, const CollateFn& collate,
                          const std::vector<std::vector<std::size_t>>& batches, std::size_t k) {
    std::vector<Example> examples;
    examples.reserve(batches[k].size());
    for (std::size_t i : batches[k]) examples.push_back(dataset.get(i));
    return collate(examples);
  }

  // Draws the order of epoch epoch_ and positions the loader at batch `first` of it.
  void start_epoch(std::size_t first) {
    prefetcher_.reset();
    epoch_start_state_ = sampler()->state();
    sampler()->set_epoch(epoch_);
    batches_ = std::make_shared<const std::vector<std::vector<std::size_t>>>(batch_sampler_->batches());
    next_batch_ = first;
    ++epoch_;
    in_epoch_ = true;
    if (options_.num_workers() > 0 && first < batches_->size()) {
      prefetcher_ = std::make_unique<detail::Prefetcher<Batch>>(
          [dataset = dataset_, collate = collate_, batches = batches_](std::size_t k) {
            return make_batch(*dataset, collate, *batches, k);
          },
          first, batches_->size(), options_.num_workers(), options_.num_workers() * options_.prefetch_factor());
    }
  }

  std::shared_ptr<const Dataset<Example>> dataset_;
  DataLoaderOptions options_;
  CollateFn collate_;
  std::shared_ptr<BatchSampler> batch_sampler_;
  std::int64_t epoch_ = 0;  // epochs started
  bool in_epoch_ = false;
  bool resume_ = false;
  std::shared_ptr<const std::vector<std::vector<std::size_t>>> batches_;
  std::size_t next_batch_ = 0;
  std::optional<GeneratorState> epoch_start_state_;
  std::unique_ptr<detail::Prefetcher<Batch>> prefetcher_;
};

// DataLoader<D::ExampleType> over a shared_ptr to any dataset D.
template <class D>
DataLoader<typename D::ExampleType> make_data_loader(std::shared_ptr<D> dataset, DataLoaderOptions options = {}) {
  return DataLoader<typename D::ExampleType>(std::move(dataset), std::move(options));
}
// The same with a collate function; the batch type is what it returns.
template <class D, class F>
auto make_data_loader(std::shared_ptr<D> dataset, DataLoaderOptions options, F collate_fn) {
  using Example = typename D::ExampleType;
  using Batch = std::decay_t<std::invoke_result_t<F&, const std::vector<Example>&>>;
  return DataLoader<Example, Batch>(std::move(dataset), std::move(options), std::move(collate_fn));
}

}  // namespace xgrad::data
