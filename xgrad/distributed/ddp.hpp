// DistributedDataParallel<M>: torch.nn.parallel.DistributedDataParallel for an xgrad module.
// Each rank holds a replica of the model and feeds it its own part of the global batch; during
// backward the gradients are summed over ranks and divided by the world size, so after
// backward every replica holds the gradient of the mean over the whole batch and the same
// optimizer step keeps the replicas identical.
//
//   xgrad::distributed::init_process_group();
//   auto model = std::make_shared<Net>();
//   xgrad::distributed::DistributedDataParallel<Net> ddp(model);   // rank 0's weights everywhere
//   xgrad::optim::Adam<float> opt(ddp.parameters());
//   auto loss = xgrad::mse_loss(ddp.forward(x_of_this_rank), y_of_this_rank);
//   opt.zero_grad();
//   loss.backward();                                                // gradients averaged over ranks
//   opt.step();
//
// As PyTorch's Reducer: construction checks that every rank has the same parameters and buffers,
// then broadcasts them from rank 0; the parameters that require grad are grouped in buckets in
// reverse registration order; during backward a post-accumulate-grad hook copies each finished
// gradient into its bucket and a full bucket's MPI_Iallreduce starts at once (buckets in bucket
// order on every rank); an engine callback at the end of backward starts the rest, waits, and
// divides by the world size, so gradients are final when backward() returns. no_sync() skips the
// synchronization of the forwards made under it. docs/distributed.md has the details.
//
// Every rank must call forward and backward the same number of times (as in PyTorch); a backward
// that reaches none of the parameters synchronizes nothing.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <xgrad/arg.hpp>
#include <xgrad/distributed/distributed.hpp>
#include <xgrad/nn/module.hpp>

namespace xgrad::distributed {

struct DistributedDataParallelOptions {
  // Size cap of one gradient bucket in MiB (torch's bucket_cap_mb).
  XGRAD_ARG(double, bucket_cap_mb) = 25.0;
  // Broadcast the module's buffers from rank 0 at each forward (torch's broadcast_buffers).
  XGRAD_ARG(bool, broadcast_buffers) = true;
};

namespace detail {

// The part of DistributedDataParallel that does not depend on the module's class: the
// construction check and broadcast, the buckets and the hooks.
template <class T>
class Reducer {
 public:
  Reducer(nn::Module<T>& module, const DistributedDataParallelOptions& options);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Called by each forward: broadcasts the buffers when asked, then arms (sync) or disarms the
  // gradient synchronization of the next backward.
  void prepare_for_forward(bool sync);
  // The parameter names of each bucket, bucket 0 first (the last registered parameters).
  std::vector<std::vector<std::string>> bucket_parameter_names() const;
  // Seconds the last synchronized backward spent in its end callback waiting for the buckets'
  // all-reduces (what did not overlap backward), and the seconds from the first bucket's start
  // to the end of that wait.
  double last_wait_seconds() const { return last_wait_seconds_; }
  double last_allreduce_seconds() const { return last_allreduce_seconds_; }
  // How many buckets the last synchronized backward started from hooks, before its end (the rest
  // started at the end: buckets waiting for an unused parameter, or for an earlier bucket).
  std::size_t last_buckets_started_in_backward() const { return last_started_in_backward_; }

 private:
  struct Bucket;
  void on_grad_ready(std::size_t param);
  void launch_ready_buckets();
  void launch(std::size_t bucket);
  void finalize();

  nn::Module<T>& module_;
  DistributedDataParallelOptions options_;
  std::vector<std::string> names_;     // parameters that require grad, registration order
  std::vector<Tensor<T>> params_;
  std::vector<std::size_t> bucket_of_;  // param -> bucket
  std::vector<std::size_t> offset_of_;  // param -> offset in its bucket's buffer
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<RemovableHandle> hooks_;
  std::vector<bool> ready_;
  std::size_t next_bucket_ = 0;         // the next bucket to start
  bool armed_ = false;                  // the next backward synchronizes
  bool callback_queued_ = false;
  double first_launch_time_ = 0;
  double last_wait_seconds_ = 0;
  double last_allreduce_seconds_ = 0;
  std::size_t last_started_in_backward_ = 0;
};

template <class T>
T scalar_type_of(const nn::Module<T>*);

extern template class Reducer<float>;
extern template class Reducer<double>;

}  // namespace detail

template <class M>
class DistributedDataParallel {
 public:
  using T = decltype(detail::scalar_type_of(static_cast<const M*>(nullptr)));

  explicit DistributedDataParallel(std::shared_ptr<M> module,
                                   const DistributedDataParallelOptions& options = DistributedDataParallelOptions())
      : module_(std::move(module)) {
    XGRAD_CHECK(module_ != nullptr, "DistributedDataParallel: the module is null");
    reducer_ = std::make_unique<detail::Reducer<T>>(*module_, options);
  }

  // The module's forward (any signature), after prepare_for_forward.
  template <class... Args>
  decltype(auto) forward(Args&&... args) {
    prepare_for_forward();
    return module_->forward(std::forward<Args>(args)...);
  }
  // What forward does before the module's forward: broadcasts the buffers when asked, and arms
  // the gradient synchronization of the next backward (disarms it under a NoSyncGuard). For a
  // caller that runs the module's forward itself (train::DataParallel).
  void prepare_for_forward() { reducer_->prepare_for_forward(require_backward_grad_sync_); }
  template <class... Args>
  decltype(auto) operator()(Args&&... args) {
    return forward(std::forward<Args>(args)...);
  }

  const std::shared_ptr<M>& module() const { return module_; }
  std::vector<Tensor<T>> parameters() const { return module_->parameters(); }
  auto named_parameters() const { return module_->named_parameters(); }
  void train(bool on = true) { module_->train(on); }
  void eval() { module_->train(false); }
  void zero_grad(bool set_to_none = true) { module_->zero_grad(set_to_none); }

  // torch's `with ddp.no_sync():` as an RAII guard: forwards made while it is alive do not
  // synchronize their backward; gradients accumulate locally until the next synchronized one.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp) : ddp_(&ddp), previous_(ddp.require_backward_grad_sync_) {
      ddp.require_backward_grad_sync_ = false;
    }
    ~NoSyncGuard() { ddp_->require_backward_grad_sync_ = previous_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel* ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  std::vector<std::vector<std::string>> bucket_parameter_names() const { return reducer_->bucket_parameter_names(); }
  double last_wait_seconds() const { return reducer_->last_wait_seconds(); }
  double last_allreduce_seconds() const { return reducer_->last_allreduce_seconds(); }
  std::size_t last_buckets_started_in_backward() const { return reducer_->last_buckets_started_in_backward(); }

 private:
  std::shared_ptr<M> module_;
  std::unique_ptr<detail::Reducer<T>> reducer_;
  bool require_backward_grad_sync_ = true;
};

}  // namespace xgrad::distributed
