// xgrad::data: datasets, samplers, collating, and the DataLoader (order, shuffling, drop_last,
// workers giving the same batches as none, the state and a mid-epoch resume through a checkpoint).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>

#include <xtensor/xview.hpp>

#include <xgrad/serialize/checkpoint.hpp>
#include <xgrad/xgrad.hpp>
#include "serialize_util.hpp"
#include "test_util.hpp"

namespace xgrad::data {
namespace {

using testing::error_of;
using Indices = std::vector<std::size_t>;

// Example i is the 1-D array {i}; get() sleeps a pseudo-random while (so that worker threads
// finish out of order) and throws for the index `bad`.
class Numbers : public Dataset<IndexArray> {
 public:
  explicit Numbers(std::size_t n, bool sleep = false, std::size_t bad = SIZE_MAX) : n_(n), sleep_(sleep), bad_(bad) {}
  std::size_t size() const override { return n_; }
  IndexArray get(std::size_t i) const override {
    detail::check_index("Numbers.get", i, n_);
    {
      std::lock_guard<std::mutex> lock(calls_mutex_);
      ++calls;
    }
    calls_changed_.notify_all();
    if (sleep_) std::this_thread::sleep_for(std::chrono::microseconds((i * 7919) % 13 * 150));
    if (i == bad_) throw std::runtime_error("example " + std::to_string(i) + " is bad");
    IndexArray a = IndexArray::from_shape({1});
    a(0) = static_cast<std::int64_t>(i);
    return a;
  }
  mutable std::atomic<int> calls{0};
  // Whether calls reached n within a minute (a generous bound for a loaded machine).
  bool wait_for_calls(int n) const {
    std::unique_lock<std::mutex> lock(calls_mutex_);
    return calls_changed_.wait_for(lock, std::chrono::minutes(1), [&] { return calls.load() >= n; });
  }

 private:
  mutable std::mutex calls_mutex_;
  mutable std::condition_variable calls_changed_;
  std::size_t n_;
  bool sleep_;
  std::size_t bad_;
};

// The indices in a batch of Numbers: (B, 1) -> B values.
Indices ids(const IndexArray& batch) { return Indices(batch.begin(), batch.end()); }

// Every batch of one epoch, through next().
template <class L>
std::vector<Indices> epoch(L& loader) {
  std::vector<Indices> out;
  while (auto b = loader.next()) out.push_back(ids(*b));
  return out;
}

Indices iota(std::size_t n) {
  Indices v(n);
  std::iota(v.begin(), v.end(), std::size_t(0));
  return v;
}

bool is_permutation_of_all(const std::vector<Indices>& batches, std::size_t n) {
  Indices all;
  for (const auto& b : batches) all.insert(all.end(), b.begin(), b.end());
  std::sort(all.begin(), all.end());
  return all == iota(n);
}

// ---- datasets -----------------------------------------------------------------------------------

TEST(DataDataset, TensorDatasetSlicesRows) {
  const Tensor<float> x = arange<float>(0.0f, 12.0f).detach();
  const Tensor<float> x2 = reshape(x, {4, 3}).detach();
  const Tensor<float> y = from_vector<float>({10, 11, 12, 13}, {4});
  TensorDataset<float> ds({x2, y});
  ASSERT_EQ(ds.size(), 4u);
  const auto e = ds.get(2);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].shape(), (Shape{3}));
  EXPECT_EQ(e[0].value(), (Array<float>{6, 7, 8}));
  EXPECT_EQ(e[1].shape(), Shape{});
  EXPECT_EQ(e[1].item(), 12.0f);
  EXPECT_EQ(error_of([&] { ds.get(4); }), "TensorDataset.get: index 4 is out of range for 4 examples");
  EXPECT_THROW(ds.get(4), std::out_of_range);
  EXPECT_NE(error_of([&] { TensorDataset<float>({x2, from_vector<float>({1, 2}, {2})}); }).find("same first dimension"),
            std::string::npos);
}

TEST(DataDataset, SubsetAndRandomSplit) {
  auto ds = std::make_shared<Numbers>(10);
  Subset<IndexArray> sub(ds, {7, 2});
  EXPECT_EQ(sub.size(), 2u);
  EXPECT_EQ(sub.get(0)(0), 7);
  EXPECT_EQ(error_of([&] { sub.get(2); }), "Subset.get: index 2 is out of range for 2 examples");
  EXPECT_THROW(Subset<IndexArray>(ds, {10}), std::out_of_range);

  Generator g1(5), g2(5), g3(6);
  const auto a = random_split(ds, {0.3, 0.3, 0.4}, g1);
  const auto b = random_split(ds, {3, 3, 4}, g2);
  const auto c = random_split(ds, {3, 3, 4}, g3);
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0]->size() + a[1]->size() + a[2]->size(), 10u);
  EXPECT_EQ(a[2]->size(), 4u);
  Indices all;
  for (std::size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(a[k]->indices(), b[k]->indices());  // same seed, same split
    all.insert(all.end(), a[k]->indices().begin(), a[k]->indices().end());
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, iota(10));  // disjoint, covering
  EXPECT_NE(a[0]->indices(), c[0]->indices());
  EXPECT_NE(a[0]->indices(), (Indices{0, 1, 2}));  // shuffled
  // Fractions that do not divide: floors, then the remainder one at a time from the first.
  Generator g4(0);
  const auto d = random_split(ds, {0.25, 0.75}, g4);
  EXPECT_EQ(d[0]->size(), 3u);
  EXPECT_EQ(d[1]->size(), 7u);
  Generator g5(0);
  EXPECT_NE(error_of([&] { random_split(ds, {3, 3}, g5); }).find("sum to 6, the dataset has 10"), std::string::npos);
}

// ---- samplers -----------------------------------------------------------------------------------

TEST(DataSampler, SequentialRandomBatch) {
  EXPECT_EQ(SequentialSampler(5).indices(), iota(5));
  RandomSampler r1(50, Generator(3)), r2(50, Generator(3));
  const Indices e0 = r1.indices(), e1 = r1.indices();
  EXPECT_EQ(e0, r2.indices());  // the same generator gives the same orders
  EXPECT_NE(e0, e1);            // a new order each epoch
  EXPECT_TRUE(std::is_permutation(e0.begin(), e0.end(), iota(50).begin()));
  EXPECT_NE(e0, iota(50));
  RandomSampler with(4, Generator(1), /*replacement=*/true, 1000);
  const Indices w = with.indices();
  EXPECT_EQ(w.size(), 1000u);
  EXPECT_EQ(std::set<std::size_t>(w.begin(), w.end()), (std::set<std::size_t>{0, 1, 2, 3}));

  BatchSampler keep(std::make_shared<SequentialSampler>(10), 4, false), drop(std::make_shared<SequentialSampler>(10), 4, true);
  EXPECT_EQ(keep.size(), 3u);
  EXPECT_EQ(drop.size(), 2u);
  EXPECT_EQ(keep.batches(), (std::vector<Indices>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}));
  EXPECT_EQ(drop.batches(), (std::vector<Indices>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
}

// ---- collate ------------------------------------------------------------------------------------

TEST(DataCollate, DefaultStacksAndPadMasks) {
  auto ds = std::make_shared<TensorDataset<double>>(std::vector<Tensor<double>>{
      reshape(arange<double>(0.0, 15.0), {5, 3}).detach(), arange<double>(5.0)});
  auto loader = make_data_loader(ds, DataLoaderOptions().batch_size(2));
  const auto batch = *loader.next();
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(batch[1].shape(), (Shape{2}));
  EXPECT_EQ(batch[0].value(), (Array<double>{{0, 1, 2}, {3, 4, 5}}));
  EXPECT_FALSE(batch[0].requires_grad());
  EXPECT_NE(error_of([] { default_collate(std::vector<IndexArray>{IndexArray{1, 2}, IndexArray{1}}); })
                .find("example 0 has (2), example 1 has (1) (pad_collate"),
            std::string::npos);

  // Sequences (L_i, 2) -> (3, 4, 2), mask true past each end.
  std::vector<Array<float>> seqs{Array<float>{{1, 1}, {2, 2}}, Array<float>{{3, 3}, {4, 4}, {5, 5}, {6, 6}},
                                 Array<float>{{7, 7}}};
  const PaddedBatch<float> p = pad_collate(seqs, -1.0f);
  EXPECT_EQ(shape_of(p.padded), (Shape{3, 4, 2}));
  EXPECT_EQ(p.lengths, (std::vector<std::size_t>{2, 4, 1}));
  EXPECT_EQ(p.key_padding_mask,
            (BoolArray{{false, false, true, true}, {false, false, false, false}, {false, true, true, true}}));
  EXPECT_EQ(p.padded(0, 1, 1), 2.0f);
  EXPECT_EQ(p.padded(0, 2, 0), -1.0f);
  EXPECT_EQ(p.padded(1, 3, 0), 6.0f);
  EXPECT_EQ(p.padded(2, 1, 1), -1.0f);
  EXPECT_THROW(pad_collate(std::vector<Array<float>>{Array<float>{{1, 1}}, Array<float>{{1, 1, 1}}}),
               std::invalid_argument);

  // The mask is the one TransformerEncoder takes: padded keys change nothing.
  manual_seed(0);
  auto layer = std::make_shared<nn::TransformerEncoderLayer<float>>(
      nn::TransformerEncoderLayerOptions(2, 1).dim_feedforward(4).dropout(0.0).batch_first(true));
  layer->eval();
  const Tensor<float> full = layer->forward(Tensor<float>(p.padded), {}, p.key_padding_mask);
  Array<float> changed = p.padded;
  changed(0, 3, 0) = 100.0f;  // a padded position of sequence 0
  const Tensor<float> again = layer->forward(Tensor<float>(changed), {}, p.key_padding_mask);
  const Array<float> kept = xt::view(full.value(), 0, xt::range(0, 2)), kept2 = xt::view(again.value(), 0, xt::range(0, 2));
  EXPECT_EQ(kept, kept2);
}

// ---- the DataLoader ---------------------------------------------------------------------------

TEST(DataLoaderTest, DefaultsOrderAndDropLast) {
  auto ds = std::make_shared<Numbers>(10);
  auto one = make_data_loader(ds);  // PyTorch's defaults: batch_size 1, in order
  EXPECT_EQ(one.size(), 10u);
  EXPECT_EQ(one.options().num_workers(), 0u);
  std::vector<Indices> expected;
  for (std::size_t i = 0; i < 10; ++i) expected.push_back({i});
  EXPECT_EQ(epoch(one), expected);

  auto keep = make_data_loader(ds, DataLoaderOptions().batch_size(4));
  auto drop = make_data_loader(ds, DataLoaderOptions().batch_size(4).drop_last(true));
  EXPECT_EQ(keep.size(), 3u);
  EXPECT_EQ(drop.size(), 2u);
  EXPECT_EQ(epoch(keep), (std::vector<Indices>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}));
  EXPECT_EQ(epoch(drop), (std::vector<Indices>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  // next() is nullopt once at the end, then starts the next epoch; range-for is one epoch.
  EXPECT_EQ(ids(*drop.next()), (Indices{0, 1, 2, 3}));
  std::size_t n = 0;
  for (auto& batch : keep) n += batch.size();
  EXPECT_EQ(n, 10u);
  EXPECT_EQ(keep.epoch(), 2);
}

TEST(DataLoaderTest, ShuffleIsSeededAndNewEachEpoch) {
  auto ds = std::make_shared<Numbers>(23);
  const auto opts = DataLoaderOptions().batch_size(5).shuffle(true);
  auto a = make_data_loader(ds, DataLoaderOptions(opts).generator(Generator(11)));
  auto b = make_data_loader(ds, DataLoaderOptions(opts).generator(Generator(11)));
  auto c = make_data_loader(ds, DataLoaderOptions(opts).generator(Generator(12)));
  const auto a0 = epoch(a), a1 = epoch(a), b0 = epoch(b), c0 = epoch(c);
  EXPECT_EQ(a0, b0);
  EXPECT_NE(a0, a1);
  EXPECT_NE(a0, c0);
  EXPECT_TRUE(is_permutation_of_all(a0, 23));
  EXPECT_TRUE(is_permutation_of_all(a1, 23));
  EXPECT_EQ(a0.back().size(), 3u);
  // Without a generator, the seed is one draw from the default generator.
  manual_seed(4);
  auto d = make_data_loader(ds, opts);
  manual_seed(4);
  auto e = make_data_loader(ds, opts);
  EXPECT_EQ(epoch(d), epoch(e));
  // With a generator, the default generator is left alone.
  manual_seed(4);
  auto f = make_data_loader(ds, DataLoaderOptions(opts).generator(Generator(11)));
  EXPECT_EQ(default_generator().get_state(), Generator(4).get_state());
  EXPECT_EQ(epoch(f), a0);
  EXPECT_THROW(make_data_loader(ds, DataLoaderOptions(opts).sampler(std::make_shared<SequentialSampler>(23))),
               std::invalid_argument);
}

// A sampler of one's own (as DistributedSampler will be): every other index, shifted by the epoch.
class EveryOther : public Sampler {
 public:
  std::size_t size() const override { return 5; }
  std::vector<std::size_t> indices() override {
    Indices v;
    for (std::size_t i = 0; i < 5; ++i) v.push_back((2 * i + static_cast<std::size_t>(epoch_)) % 10);
    return v;
  }
  void set_epoch(std::int64_t e) override { epoch_ = e; }

 private:
  std::int64_t epoch_ = -1;
};

TEST(DataLoaderTest, CustomSamplerSeesEpochs) {
  auto loader = make_data_loader(std::make_shared<Numbers>(10),
                                 DataLoaderOptions().batch_size(5).sampler(std::make_shared<EveryOther>()));
  EXPECT_EQ(epoch(loader), (std::vector<Indices>{{0, 2, 4, 6, 8}}));
  EXPECT_EQ(epoch(loader), (std::vector<Indices>{{1, 3, 5, 7, 9}}));
}

TEST(DataLoaderTest, WorkersGiveTheSameBatchesInTheSameOrder) {
  auto ds = std::make_shared<Numbers>(103, /*sleep=*/true);
  for (std::size_t workers : {1u, 2u, 3u, 5u}) {
    const auto opts = DataLoaderOptions().batch_size(4).shuffle(true).generator(Generator(9));
    auto serial = make_data_loader(ds, opts);
    auto parallel = make_data_loader(ds, DataLoaderOptions(opts).num_workers(workers).prefetch_factor(3));
    for (int e = 0; e < 2; ++e) {
      const auto s = epoch(serial);
      EXPECT_EQ(s, epoch(parallel)) << workers << " workers, epoch " << e;
      EXPECT_TRUE(is_permutation_of_all(s, 103));
    }
  }
  // The workers run ahead of the loop, but no further than num_workers * prefetch_factor batches.
  auto ahead = std::make_shared<Numbers>(100);
  auto loader = make_data_loader(ahead, DataLoaderOptions().batch_size(1).num_workers(2).prefetch_factor(2));
  EXPECT_EQ(ids(*loader.next()), Indices{0});
  // Waits (without a fixed sleep) until the workers have fetched the 4 batches they may hold
  // beyond the one taken; they must stop there (or at 5 while one is being handed over).
  ASSERT_TRUE(ahead->wait_for_calls(4)) << "the workers fetched only " << ahead->calls.load() << " batches";
  EXPECT_LE(ahead->calls.load(), 5);
}

TEST(DataLoaderTest, AnErrorReachesTheLoopAtItsBatch) {
  for (std::size_t workers : {0u, 2u}) {
    auto loader = make_data_loader(std::make_shared<Numbers>(20, true, /*bad=*/9),
                                   DataLoaderOptions().batch_size(4).num_workers(workers));
    EXPECT_EQ(ids(*loader.next()), (Indices{0, 1, 2, 3}));
    EXPECT_EQ(ids(*loader.next()), (Indices{4, 5, 6, 7}));
    EXPECT_EQ(error_of([&] { loader.next(); }), "example 9 is bad") << workers << " workers";
    EXPECT_EQ(ids(*loader.next()), (Indices{12, 13, 14, 15}));  // the loop may go on
  }
}

// Runs epochs 0 and part of 1, saves, and checks that a loader built from scratch (another
// generator seed even) and loaded with the state gives the rest, and the epoch after.
TEST(DataLoaderTest, StateResumesMidEpoch) {
  auto ds = std::make_shared<Numbers>(37, true);
  for (std::size_t workers : {0u, 2u}) {
    const auto opts = DataLoaderOptions().batch_size(4).shuffle(true).num_workers(workers);
    auto a = make_data_loader(ds, DataLoaderOptions(opts).generator(Generator(1)));
    epoch(a);
    std::vector<Indices> first;
    for (int k = 0; k < 3; ++k) first.push_back(ids(*a.next()));
    const DataLoaderState state = a.state_dict();
    EXPECT_EQ(state.epoch, 1);
    EXPECT_EQ(state.next_batch, 3u);
    const std::string text = state.to_string();
    EXPECT_EQ(DataLoaderState::from_string(text), state);
    const auto rest = epoch(a), after = epoch(a);

    auto b = make_data_loader(ds, DataLoaderOptions(opts).generator(Generator(99)));
    b.load_state_dict(DataLoaderState::from_string(text));
    std::vector<Indices> resumed;
    for (auto& batch : b) resumed.push_back(ids(batch));  // range-for continues the saved epoch
    EXPECT_EQ(resumed, rest) << workers << " workers";
    EXPECT_EQ(epoch(b), after);
    first.insert(first.end(), rest.begin(), rest.end());
    EXPECT_TRUE(is_permutation_of_all(first, 37));
  }
  // A state at an epoch boundary, and one of a sequential loader.
  auto seq = make_data_loader(ds, DataLoaderOptions().batch_size(10));
  epoch(seq);
  EXPECT_EQ(seq.state_dict().to_string(), "DataLoaderState v1 epoch=1 next_batch=0 dataset_size=37 batch_size=10 sampler=none");
  seq.next();
  auto seq2 = make_data_loader(ds, DataLoaderOptions().batch_size(10));
  seq2.load_state_dict(seq.state_dict());
  EXPECT_EQ(ids(*seq2.next()), (Indices{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}));
  EXPECT_EQ(seq2.epoch(), 1);
}

TEST(DataLoaderTest, StateMismatchesAreRejected) {
  auto shuffled = make_data_loader(std::make_shared<Numbers>(37), DataLoaderOptions().batch_size(4).shuffle(true));
  auto other_size = make_data_loader(std::make_shared<Numbers>(36), DataLoaderOptions().batch_size(4).shuffle(true));
  auto sequential = make_data_loader(std::make_shared<Numbers>(37), DataLoaderOptions().batch_size(4));
  const DataLoaderState s = shuffled.state_dict();
  EXPECT_EQ(error_of([&] { other_size.load_state_dict(s); }),
            "DataLoader::load_state_dict: the state was saved by a loader over 37 examples in batches of 4, this "
            "loader has 36 examples in batches of 4 (a state of a run on another dataset or with another batch "
            "size: build the loader over the dataset it was saved with)");
  EXPECT_NE(error_of([&] { sequential.load_state_dict(s); }).find("this sampler has a fixed order"), std::string::npos);
  DataLoaderState past = s;
  past.next_batch = 11;
  EXPECT_NE(error_of([&] { shuffled.load_state_dict(past); }).find("batch 11 of epoch 0 does not exist"),
            std::string::npos);
  for (const char* bad : {"", "DataLoaderState v1 epoch=1", "DataLoaderState v1 epoch=x next_batch=0 dataset_size=1 batch_size=1 sampler=none",
                          "DataLoaderState v1 epoch=1 next_batch=0 dataset_size=1 batch_size=1 sampler=1,2"})
    EXPECT_THROW(DataLoaderState::from_string(bad), std::invalid_argument) << bad;
}

// A model trained from the loader, checkpointed mid-epoch with the loader's state in the metadata:
// resumed into fresh objects, it ends with the same weights, bit for bit, as the run that went on.
TEST(DataLoaderTest, CheckpointResumesTrainingBitForBit) {
  testing::TempDir dir;
  Generator g(3);
  auto ds = std::make_shared<TensorDataset<float>>(
      std::vector<Tensor<float>>{randn<float>({50, 3}, g), randn<float>({50, 2}, g)});
  struct Run {
    nn::Linear<float> model{3, 2};
    optim::SGD<float> sgd{model.parameters(), optim::SGDOptions(0.1).momentum(0.9)};
    DataLoader<std::vector<Tensor<float>>> loader;
    explicit Run(std::shared_ptr<TensorDataset<float>> ds, std::size_t workers)
        : loader(ds, DataLoaderOptions().batch_size(8).shuffle(true).num_workers(workers).generator(Generator(5))) {}
    void step() {
      auto batch = loader.next();
      if (!batch) batch = loader.next();
      const Tensor<float> loss = mse_loss(model.forward((*batch)[0]), (*batch)[1]);
      sgd.zero_grad();
      loss.backward();
      sgd.step();
    }
  };
  for (std::size_t workers : {0u, 2u}) {
    manual_seed(0);
    Run a(ds, workers);
    for (int i = 0; i < 10; ++i) a.step();  // one epoch of 7 batches and 3 more
    save_checkpoint(dir.file("run.ckpt"), a.model, a.sgd, nullptr, default_generator(), 10,
                    {{"data_loader", a.loader.state_dict().to_string()}});
    for (int i = 0; i < 9; ++i) a.step();

    manual_seed(1);
    Run b(ds, workers);
    const auto ckpt = load_checkpoint(dir.file("run.ckpt"), b.model, b.sgd, nullptr, default_generator());
    b.loader.load_state_dict(DataLoaderState::from_string(ckpt.metadata.at("data_loader")));
    for (int i = 0; i < 9; ++i) b.step();
    EXPECT_TRUE(testing::same_bits(a.model.weight.value(), b.model.weight.value())) << workers << " workers";
    EXPECT_TRUE(testing::same_bits(a.model.bias.value(), b.model.bias.value()));
  }
}

}  // namespace
}  // namespace xgrad::data
