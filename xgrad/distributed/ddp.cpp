// DistributedDataParallel's Reducer: the construction check and broadcast, the gradient buckets
// and their all-reduces, started from post-accumulate-grad hooks and finished at the end of
// backward (see ddp.hpp).
#include <xgrad/distributed/ddp.hpp>

#include <algorithm>
#include <chrono>
#include <sstream>

namespace xgrad::distributed::detail {

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One line per parameter and buffer: what every rank's model must agree on.
template <class T>
std::vector<std::string> describe(const nn::Module<T>& module, const DistributedDataParallelOptions& options) {
  std::vector<std::string> lines;
  lines.push_back(::xgrad::detail::concat("bucket_cap_mb ", options.bucket_cap_mb()));
  for (const auto& [name, p] : module.named_parameters())
    lines.push_back(::xgrad::detail::concat("parameter \"", name, "\" of shape ", p.shape(),
                                            p.requires_grad() ? "" : " (requires_grad=false)"));
  for (const auto& [name, b] : module.named_buffers())
    lines.push_back(::xgrad::detail::concat("buffer \"", name, "\" of shape ", b.shape()));
  return lines;
}

std::string join(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + '\n';
  return s;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> lines;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Every rank gets every rank's description and throws the same error if any differs from rank
// 0's: no rank goes on to a broadcast the others will not join.
template <class T>
void check_same_model(const nn::Module<T>& module, const DistributedDataParallelOptions& options) {
  const std::vector<std::string> all = all_gather_string(join(describe(module, options)));
  const std::vector<std::string> reference = split(all[0]);
  for (std::size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    const std::vector<std::string> lines = split(all[r]);
    std::size_t i = 0;
    while (i < lines.size() && i < reference.size() && lines[i] == reference[i]) ++i;
    const std::string theirs = i < lines.size() ? lines[i] : "nothing more";
    const std::string ours = i < reference.size() ? reference[i] : "nothing more";
    throw std::invalid_argument(::xgrad::detail::concat(
        "DistributedDataParallel: rank ", r, "'s model differs from rank 0's (", lines.size() - 1,
        " vs ", reference.size() - 1, " parameters and buffers): entry ", i, " is ", theirs, " on rank ", r,
        " but ", ours, " on rank 0. Every rank must build the same model, with the same options."));
  }
}
}  // namespace

template <class T>
struct Reducer<T>::Bucket {
  std::vector<std::size_t> params;  // indices into params_
  std::vector<T> buffer;            // the gradients, concatenated
  std::size_t pending = 0;          // parameters not yet ready in this backward
  bool launched = false;
  Work work;
};

template <class T>
Reducer<T>::Reducer(nn::Module<T>& module, const DistributedDataParallelOptions& options)
    : module_(module), options_(options) {
  XGRAD_CHECK(is_initialized(), "DistributedDataParallel: the process group is not initialized "
              "(call xgrad::distributed::init_process_group() first)");
  XGRAD_CHECK(options.bucket_cap_mb() > 0, "DistributedDataParallel: bucket_cap_mb must be positive, got ",
              options.bucket_cap_mb());
  check_same_model(module, options);

  // Rank 0's values everywhere (in place: optimizers holding the parameters see them).
  {
    NoGradGuard no_grad;
    for (auto& p : module.parameters()) broadcast(p, 0);
    for (auto& b : module.buffers()) broadcast(b, 0);
  }

  for (const auto& [name, p] : module.named_parameters()) {
    if (!p.requires_grad()) continue;
    names_.push_back(name);
    params_.push_back(p);
  }
  // Buckets in reverse registration order, each under the cap unless one parameter exceeds it.
  const double cap_bytes = options.bucket_cap_mb() * 1024.0 * 1024.0;
  bucket_of_.assign(params_.size(), 0);
  offset_of_.assign(params_.size(), 0);
  std::size_t bucket_elements = 0;
  for (std::size_t k = params_.size(); k-- > 0;) {
    const std::size_t n = params_[k].numel();
    if (buckets_.empty() ||
        (bucket_elements > 0 && static_cast<double>((bucket_elements + n) * sizeof(T)) > cap_bytes)) {
      buckets_.push_back(std::make_unique<Bucket>());
      bucket_elements = 0;
    }
    Bucket& b = *buckets_.back();
    bucket_of_[k] = buckets_.size() - 1;
    offset_of_[k] = bucket_elements;
    b.params.push_back(k);
    bucket_elements += n;
    b.buffer.resize(bucket_elements);
  }
  ready_.assign(params_.size(), false);

  for (std::size_t k = 0; k < params_.size(); ++k)
    hooks_.push_back(params_[k].register_post_accumulate_grad_hook([this, k](Tensor<T>&) { on_grad_ready(k); }));
}

template <class T>
Reducer<T>::~Reducer() {
  for (auto& h : hooks_) h.remove();
  // Unfinished Works wait in their destructors (the buffers outlive them: Work is declared last).
}

template <class T>
void Reducer<T>::prepare_for_forward(bool sync) {
  if (options_.broadcast_buffers()) {
    NoGradGuard no_grad;
    for (auto& b : module_.buffers()) broadcast(b, 0);
  }
  // A backward left unfinished (one that threw) leaves Works behind: finish them first.
  for (auto& b : buckets_) {
    if (b->launched) b->work.wait();
    b->launched = false;
    b->pending = b->params.size();
  }
  std::fill(ready_.begin(), ready_.end(), false);
  next_bucket_ = 0;
  callback_queued_ = false;
  armed_ = sync && !params_.empty();
}

template <class T>
std::vector<std::vector<std::string>> Reducer<T>::bucket_parameter_names() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& b : buckets_) {
    out.emplace_back();
    for (std::size_t k : b->params) out.back().push_back(names_[k]);
  }
  return out;
}

// A parameter's gradient is complete: copy it into its bucket; start every bucket that is full,
// in bucket order.
template <class T>
void Reducer<T>::on_grad_ready(std::size_t k) {
  if (!armed_ || ready_[k]) return;
  if (!callback_queued_) {
    callback_queued_ = true;
    queue_backward_callback([this] { finalize(); });
  }
  ready_[k] = true;
  Bucket& b = *buckets_[bucket_of_[k]];
  const Array<T>& g = params_[k].grad();
  std::copy(g.data(), g.data() + g.size(), b.buffer.data() + offset_of_[k]);
  --b.pending;
  launch_ready_buckets();
  // Let Open MPI progress the buckets in flight (it has no progress thread by default).
  for (std::size_t i = 0; i < next_bucket_; ++i) buckets_[i]->work.is_completed();
}

template <class T>
void Reducer<T>::launch_ready_buckets() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_]->pending == 0) launch(next_bucket_++);
}

template <class T>
void Reducer<T>::launch(std::size_t index) {
  Bucket& b = *buckets_[index];
  if (index == 0) first_launch_time_ = now_seconds();
  b.launched = true;
  b.work = all_reduce_async(b.buffer.data(), b.buffer.size(), ReduceOp::SUM);
}

// The end of the synchronized backward: start what is left (a parameter without a gradient on
// this rank contributes zeros), wait, and write back the averages.
template <class T>
void Reducer<T>::finalize() {
  if (!armed_) return;
  armed_ = false;
  last_started_in_backward_ = next_bucket_;
  for (std::size_t k = 0; k < params_.size(); ++k) {
    if (ready_[k]) continue;
    Bucket& b = *buckets_[bucket_of_[k]];
    T* dst = b.buffer.data() + offset_of_[k];
    if (params_[k].has_grad()) {
      const Array<T>& g = params_[k].grad();
      std::copy(g.data(), g.data() + g.size(), dst);
    } else {
      std::fill(dst, dst + params_[k].numel(), T(0));
    }
    ready_[k] = true;
    --b.pending;
  }
  launch_ready_buckets();
  const double wait_start = now_seconds();
  for (auto& b : buckets_) b->work.wait();
  const double end = now_seconds();
  last_wait_seconds_ = end - wait_start;
  last_allreduce_seconds_ = end - first_launch_time_;

  const T world = static_cast<T>(get_world_size());
  for (std::size_t k = 0; k < params_.size(); ++k) {
    const Bucket& b = *buckets_[bucket_of_[k]];
    const T* src = b.buffer.data() + offset_of_[k];
    if (!params_[k].has_grad()) params_[k].set_grad(empty_array<T>(params_[k].shape(), "DistributedDataParallel"));
    Array<T>& g = params_[k].mutable_grad();
    T* dst = g.data();
    for (std::size_t i = 0, n = g.size(); i < n; ++i) dst[i] = src[i] / world;
  }
  for (auto& b : buckets_) b->launched = false;
}

template class Reducer<float>;
template class Reducer<double>;

}  // namespace xgrad::distributed::detail
