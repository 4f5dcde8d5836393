// The thread pool behind set_num_threads and detail::parallel_for.
//
// One job runs at a time. The caller publishes it as a "ticket" word (generation, chunk count,
// next unclaimed chunk); every participant, the caller included, claims chunks from it with a
// compare-and-swap until none is left, and the caller waits until every claimed chunk is done.
// Workers spin briefly after a job (the next one usually follows within microseconds during a
// training step), then sleep on a condition variable. A worker that wakes late finds nothing
// to claim: the caller has done its chunks already.
#include <xgrad/backend/parallel.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <algorithm>
#include <chrono>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <xgrad/base/check.hpp>
#include <xgrad/backend/signals.hpp>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define XGRAD_CPU_RELAX() _mm_pause()
#else
#define XGRAD_CPU_RELAX() std::this_thread::yield()
#endif

namespace xgrad {
namespace {

thread_local bool t_in_parallel_region = false;
std::atomic<void (*)(int)> thread_start_hook{nullptr};
// The profiler's view (parallel.hpp): the observer, this thread's worker number, and the last job
// this thread ran a chunk of (to tell a worker's first chunk of a job).
std::atomic<detail::PoolObserver> pool_observer{nullptr};
thread_local int t_worker = 0;
thread_local std::uint64_t t_last_job = ~std::uint64_t(0);

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int default_num_threads() {
  if (const char* env = std::getenv("OMP_NUM_THREADS")) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (end != env && n >= 1 && n <= 1024) return static_cast<int>(n);
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

class Pool {
 public:
  // If the default count cannot be started (a process near its thread limit), one thread.
  Pool() {
    try {
      start(default_num_threads());
    } catch (const std::exception&) {
      stop();
      start(1);
    }
  }
  ~Pool() { stop(); }

  int size() const { return size_.load(std::memory_order_relaxed); }

  // All or nothing: when a thread cannot be started, the ones that were are stopped, the
  // previous count is started again, and the error says what happened.
  void resize(int n) {
    std::lock_guard<std::mutex> run(run_mutex_);
    const int previous = size();
    stop();
    try {
      start(n);
    } catch (const std::exception& e) {
      const std::string failed = "set_num_threads(" + std::to_string(n) + "): started " +
                                 std::to_string(workers_.size()) + " of the " + std::to_string(n - 1) +
                                 " worker threads, then thread creation failed (" + e.what() + "); stopped them, ";
      stop();
      try {
        start(previous);
      } catch (const std::exception&) {
        stop();
        throw std::runtime_error(failed + "nor restart the previous " + std::to_string(previous) +
                                 " threads; running on 1 thread");
      }
      throw std::runtime_error(failed + "kept the previous " + std::to_string(previous) + " threads");
    }
  }

  // Runs fn(ctx, begin, end) over [0, n) in `chunks` balanced contiguous chunks (the first
  // n % chunks get one more item). Serial when another thread is running a job.
  void run(std::size_t n, std::size_t chunks, detail::RangeFn fn, const void* ctx) {
    std::unique_lock<std::mutex> run(run_mutex_, std::try_to_lock);
    if (!run.owns_lock() || workers_.empty()) {
      fn(ctx, 0, n);
      return;
    }
    const detail::PoolObserver observe = pool_observer.load(std::memory_order_relaxed);
    job_ = Job{fn, ctx, n / chunks, n % chunks, observe, observe ? now_ns() : 0};
    error_ = nullptr;
    pending_.store(chunks, std::memory_order_relaxed);
    generation_ = (generation_ + 1) & kGenMask;
    ticket_.store(pack(generation_, chunks, 0), std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard<std::mutex> lock(sleep_mutex_);
      wake_.notify_all();
    }
    t_in_parallel_region = true;
    while (claim_and_run()) {
    }
    t_in_parallel_region = false;
    for (unsigned spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
      if (spins < 4096) XGRAD_CPU_RELAX();
      else std::this_thread::yield();
    }
    if (observe)
      observe({detail::PoolEvent::Kind::Job, t_worker, generation_, job_.published_ns, job_.published_ns, now_ns(), n,
               false});
    if (error_) std::rethrow_exception(error_);
  }

 private:
  // ticket_: generation (32 bits) | chunk count (16) | next unclaimed chunk (16).
  static constexpr std::uint64_t kGenMask = 0xffffffffu;
  static std::uint64_t pack(std::uint64_t gen, std::uint64_t chunks, std::uint64_t next) {
    return gen << 32 | chunks << 16 | next;
  }
  static std::size_t chunks_of(std::uint64_t t) { return (t >> 16) & 0xffff; }
  static std::size_t next_of(std::uint64_t t) { return t & 0xffff; }
  static bool claimable(std::uint64_t t) { return next_of(t) < chunks_of(t); }

  // Claims one chunk of the current job and runs it; false when none is left.
  bool claim_and_run() {
    std::uint64_t t = ticket_.load(std::memory_order_acquire);
    while (claimable(t)) {
      if (ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
        // The job cannot end while this chunk is pending, so job_ is this chunk's job.
        const std::size_t i = next_of(t), begin = i * job_.base + std::min(i, job_.extra);
        const std::size_t end = begin + job_.base + (i < job_.extra ? 1 : 0);
        const std::int64_t start_ns = job_.observe ? now_ns() : 0;
        try {
          job_.fn(job_.ctx, begin, end);
        } catch (...) {
          std::lock_guard<std::mutex> lock(error_mutex_);
          if (!error_) error_ = std::current_exception();
        }
        if (job_.observe) {
          const std::uint64_t job = t >> 32;
          job_.observe({detail::PoolEvent::Kind::Chunk, t_worker, job, job_.published_ns, start_ns, now_ns(),
                        end - begin, job != t_last_job});
          t_last_job = job;
        }
        pending_.fetch_sub(1, std::memory_order_acq_rel);
        return true;
      }
    }
    return false;
  }

  void worker_loop() {
    t_in_parallel_region = true;
    // The process's signals go to the user's threads; a worker runs oneDNN's kernels unguarded.
    detail::block_async_signals_for_this_thread();  // already blocked since its start: records it
    for (;;) {
      // Spin a little: during a training step the next job follows within microseconds.
      for (unsigned spins = 0; spins < 20000 && !claimable(ticket_.load(std::memory_order_acquire)); ++spins) {
        if (stopping_.load(std::memory_order_relaxed)) return;
        XGRAD_CPU_RELAX();
      }
      if (claim_and_run()) continue;
      std::unique_lock<std::mutex> lock(sleep_mutex_);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      wake_.wait(lock, [&] {
        return stopping_.load(std::memory_order_relaxed) || claimable(ticket_.load(std::memory_order_seq_cst));
      });
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
      if (stopping_.load(std::memory_order_relaxed)) return;
    }
  }

  void start(int n) {
    stopping_.store(false);
    // Workers start with the asynchronous signals blocked (inherited from this thread's mask).
    const detail::AsyncSignalBlock inherited_by_workers;
    for (int i = 1; i < n; ++i) {
      if (auto hook = thread_start_hook.load()) hook(i);
      workers_.emplace_back([this, i] {
        t_worker = i;
        worker_loop();
      });
    }
    size_.store(n, std::memory_order_relaxed);
  }

  void stop() {
    size_.store(1, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(sleep_mutex_);
      stopping_.store(true);
    }
    wake_.notify_all();
    for (std::thread& w : workers_) w.join();
    workers_.clear();
  }

  std::vector<std::thread> workers_;
  std::atomic<int> size_{1};  // workers_.size() + 1, read without run_mutex_
  std::mutex run_mutex_;  // one job at a time; held by resize too
  std::atomic<std::uint64_t> ticket_{0};
  std::atomic<std::size_t> pending_{0};
  struct Job {
    detail::RangeFn fn = nullptr;
    const void* ctx = nullptr;
    std::size_t base = 0, extra = 0;  // chunk i: [i * base + min(i, extra), + base + (i < extra))
    detail::PoolObserver observe = nullptr;  // the profiler's, when it watches this job
    std::int64_t published_ns = 0;
  };
  Job job_;
  std::uint64_t generation_ = 0;
  std::mutex error_mutex_;
  std::exception_ptr error_;
  std::mutex sleep_mutex_;
  std::condition_variable wake_;
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stopping_{false};
};

Pool& pool() {
  static Pool p;
  return p;
}

}  // namespace

void set_num_threads(int n) {
  XGRAD_CHECK(n >= 1 && n <= 1024, "set_num_threads: expected a thread count in [1, 1024], got ", n);
  XGRAD_CHECK(!t_in_parallel_region, "set_num_threads: cannot be called from inside a parallel region");
  pool().resize(n);
}

int get_num_threads() { return pool().size(); }

namespace detail {

bool in_parallel_region() { return t_in_parallel_region; }

void set_thread_start_hook(void (*hook)(int worker)) { thread_start_hook.store(hook); }

void set_pool_observer(PoolObserver observer) { pool_observer.store(observer); }

void parallel_for_impl(std::size_t n, std::size_t grain, RangeFn fn, const void* ctx) {
  if (n == 0) return;
  if (grain == 0) grain = 1;
  const AsyncSignalScope one_signal_block;  // for every oneDNN call of this job on this thread
  const std::size_t chunks = t_in_parallel_region ? 1 : std::min<std::size_t>(pool().size(), n / grain);
  if (chunks <= 1) {
    fn(ctx, 0, n);
    return;
  }
  pool().run(n, chunks, fn, ctx);
}

}  // namespace detail
}  // namespace xgrad
