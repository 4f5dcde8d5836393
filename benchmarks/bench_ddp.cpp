// bench_ddp: samples per second of data-parallel training steps, bench_train_step's model and
// step over the ranks that mpirun starts, each rank with --threads threads, and the cost of the
// gradients' all-reduce: how long it took and how much of it ran while backward was still going.
//
//   step on each rank:  opt.zero_grad();  loss = mse_loss(ddp(x_r), target_r);  loss.backward();  opt.step();
//   the global batch B (the configuration's, or --batch) split across the N ranks: B/N rows each;
//   x, target: fixed standard-normal (B, S, d) tensors, the same on every rank before the split.
//
// With one rank (no mpirun, or mpirun -np 1) the step is the plain one of bench_train_step (no
// DistributedDataParallel). samples/s = B / (median step time); every rank runs the same number
// of steps (--warmup, then --steps timed), which the all-reduces keep in lockstep.
//
//   bench_ddp --config large --threads 1                                  1 rank x 1 thread
//   mpirun -np 2 bench_ddp --config large --threads 1                     2 ranks x 1 thread
//   bench_ddp --config large --threads 2                                  1 rank x 2 threads
//   benchmarks/ddp_scaling.sh build/release/benchmarks/bench_ddp          the three, with ratios
//
// Reported by rank 0 (--json: one JSON object): the median step and its quartiles, samples/s,
// and with several ranks, per step (medians): the all-reduce span (from the first bucket's start
// to the last bucket's end, DistributedDataParallel's last_allreduce_seconds), the wait after
// backward (last_wait_seconds: the part that did not overlap backward), the overlapped fraction
// 1 - wait / span, and a blocking all_reduce of every gradient at once, timed alone, for the
// transport's speed; and CPU time / wall time during the timed steps, summed over the ranks and
// the least of one rank: the cores the run actually had (ranks x threads on an idle machine; less
// on a shared one), and samples per CPU second, which the machine's other load changes less.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <xtensor/xview.hpp>

#include <xgrad/distributed/ddp.hpp>
#include <xgrad/distributed/distributed.hpp>
#include <xgrad/xgrad.hpp>

namespace {

namespace dist = xgrad::distributed;
using xgrad::Tensor;

struct Config {
  const char* name;
  std::size_t B, N, d, h, ff, L;  // batch, sequence, d_model, heads, dim_feedforward, layers
};

// bench_train_step's configurations.
constexpr Config kConfigs[] = {
    {"tiny", 2, 3, 4, 2, 64, 3},
    {"small", 16, 32, 64, 4, 256, 2},
    {"medium", 32, 64, 256, 8, 1024, 4},
    {"large", 8, 128, 512, 8, 2048, 2},
};

struct Options {
  std::string config = "large";
  std::size_t batch = 0;  // 0: the configuration's B
  int threads = 1;
  int warmup = 2, steps = 8;
  double bucket_cap_mb = 25.0;  // DistributedDataParallelOptions' (torch's default)
  bool json = false;
};

using Clock = std::chrono::steady_clock;

// CPU seconds this process has used (all its threads).
double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * double(v.size() - 1);
  const std::size_t lo = std::size_t(pos), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - double(lo)) * (v[hi] - v[lo]);
}

void usage() {
  std::printf(
      "bench_ddp [--config tiny|small|medium|large] [--batch B] [--threads T] [--warmup W] [--steps S]\n"
      "          [--bucket-cap-mb MB] [--json]\n"
      "  run under mpirun -np N for N ranks (as root: mpirun --allow-run-as-root ...); defaults: large, the\n"
      "  configuration's batch, 1 thread, 2 warm-up and 8 timed steps, 25 MB buckets\n");
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--config") o.config = value();
    else if (a == "--batch") o.batch = std::stoul(value());
    else if (a == "--threads") o.threads = std::stoi(value());
    else if (a == "--warmup") o.warmup = std::stoi(value());
    else if (a == "--steps") o.steps = std::stoi(value());
    else if (a == "--bucket-cap-mb") o.bucket_cap_mb = std::stod(value());
    else if (a == "--json") o.json = true;
    else if (a == "--help" || a == "-h") return false;
    else throw std::invalid_argument("unknown flag " + a);
  }
  if (o.threads < 1 || o.steps < 1 || o.warmup < 0) throw std::invalid_argument("--threads and --steps must be >= 1");
  return true;
}

int run(const Options& o, int rank, int world) {
  const Config* found = nullptr;
  for (const Config& c : kConfigs)
    if (o.config == c.name) found = &c;
  if (found == nullptr) throw std::invalid_argument("unknown --config " + o.config);
  const Config& c = *found;
  const std::size_t B = o.batch > 0 ? o.batch : c.B;
  if (B % static_cast<std::size_t>(world) != 0)
    throw std::invalid_argument("the batch of " + std::to_string(B) + " is not divisible by the " +
                                std::to_string(world) + " ranks");
  const std::size_t rows = B / static_cast<std::size_t>(world), first = rows * static_cast<std::size_t>(rank);
  xgrad::set_num_threads(o.threads);

  xgrad::manual_seed(0);
  std::shared_ptr<xgrad::nn::TransformerEncoder<float>> encoder;
  {
    auto layer = std::make_shared<xgrad::nn::TransformerEncoderLayer<float>>(
        xgrad::nn::TransformerEncoderLayerOptions(std::int64_t(c.d), std::int64_t(c.h))
            .dim_feedforward(std::int64_t(c.ff))
            .dropout(0.0)
            .activation("gelu")
            .batch_first(true)
            .norm_first(true));
    encoder = std::make_shared<xgrad::nn::TransformerEncoder<float>>(layer, std::int64_t(c.L));
  }
  std::unique_ptr<dist::DistributedDataParallel<xgrad::nn::TransformerEncoder<float>>> ddp;
  if (world > 1)
    ddp = std::make_unique<dist::DistributedDataParallel<xgrad::nn::TransformerEncoder<float>>>(
        encoder, dist::DistributedDataParallelOptions().bucket_cap_mb(o.bucket_cap_mb));
  xgrad::optim::Adam<float> opt(encoder->parameters(), xgrad::optim::AdamOptions(1e-4));
  // The global batch, then this rank's rows of it: (rows, S, d).
  const xgrad::Array<float> x_all = xgrad::randn<float>({B, c.N, c.d}).value();
  const xgrad::Array<float> t_all = xgrad::randn<float>({B, c.N, c.d}).value();
  const Tensor<float> x(xgrad::Array<float>(xt::view(x_all, xt::range(first, first + rows))));
  const Tensor<float> target(xgrad::Array<float>(xt::view(t_all, xt::range(first, first + rows))));

  std::vector<double> step_ms, forward_ms, backward_ms, span_ms, wait_ms;
  float loss_value = 0;
  const auto ms_between = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  Clock::time_point timed_start{};
  double cpu_start = 0;
  for (int i = 0; i < o.warmup + o.steps; ++i) {
    if (i == o.warmup) {
      timed_start = Clock::now();
      cpu_start = process_cpu_seconds();
    }
    const auto t0 = Clock::now();
    opt.zero_grad();
    Tensor<float> loss = xgrad::mse_loss(ddp ? ddp->forward(x) : encoder->forward(x), target);
    const auto t1 = Clock::now();
    loss.backward();  // with DDP: the all-reduces too, finished when it returns
    const auto t2 = Clock::now();
    opt.step();
    const double ms = ms_between(t0, Clock::now());
    loss_value = loss.value().data()[0];
    if (i < o.warmup) continue;
    step_ms.push_back(ms);
    forward_ms.push_back(ms_between(t0, t1));
    backward_ms.push_back(ms_between(t1, t2));
    if (ddp) {
      span_ms.push_back(1e3 * ddp->last_allreduce_seconds());
      wait_ms.push_back(1e3 * ddp->last_wait_seconds());
    }
  }
  if (!std::isfinite(loss_value)) throw std::runtime_error("the loss is not finite");
  // The cores this rank had during the timed steps (CPU time / wall time): below its thread
  // count when other processes took turns on its cores. The least over ranks is reported.
  const double cpu_share =
      (process_cpu_seconds() - cpu_start) / std::chrono::duration<double>(Clock::now() - timed_start).count();
  double least_share = cpu_share, cores_used = cpu_share;
  if (world > 1) {
    least_share = -cpu_share;
    dist::all_reduce(&least_share, 1, dist::ReduceOp::MAX);
    least_share = -least_share;
    dist::all_reduce(&cores_used, 1, dist::ReduceOp::SUM);
  }

  // Every gradient in one blocking all-reduce, alone: what the transport costs without overlap.
  double blocking_ms = 0;
  std::size_t grad_count = 0;
  for (const auto& p : encoder->parameters()) grad_count += p.numel();
  if (world > 1) {
    std::vector<float> buffer(grad_count, 1.0f);
    std::vector<double> times;
    for (int i = 0; i < 3; ++i) {
      dist::barrier();
      const auto t0 = Clock::now();
      dist::all_reduce(buffer.data(), buffer.size(), dist::ReduceOp::SUM);
      times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    blocking_ms = median(times);
  }

  if (rank != 0) return 0;
  const double step = median(step_ms), samples = double(B) / (step / 1e3);
  const double span = median(span_ms), wait = median(wait_ms);
  const double overlap = span > 0 ? std::max(0.0, 1.0 - wait / span) : 0.0;
  const double grad_mib = double(grad_count) * sizeof(float) / (1024.0 * 1024.0);
  if (o.json) {
    std::printf("{\"kind\":\"ddp_step\",\"config\":\"%s\",\"ranks\":%d,\"threads\":%d,\"batch\":%zu,"
                "\"steps\":%zu,\"median_ms\":%.6g,\"p25_ms\":%.6g,\"p75_ms\":%.6g,\"samples_per_s\":%.6g,"
                "\"forward_ms\":%.6g,\"backward_ms\":%.6g,\"bucket_cap_mb\":%.6g,\"least_cpu_share\":%.6g,\"cores_used\":%.6g,\"samples_per_cpu_s\":%.6g,"
                "\"grad_mib\":%.6g,\"buckets\":%zu,\"allreduce_span_ms\":%.6g,\"wait_ms\":%.6g,"
                "\"overlap\":%.6g,\"blocking_allreduce_ms\":%.6g,\"final_loss\":%.6g}\n",
                c.name, world, o.threads, B, step_ms.size(), step, quantile(step_ms, 0.25), quantile(step_ms, 0.75),
                samples, median(forward_ms), median(backward_ms), o.bucket_cap_mb, least_share, cores_used, samples / cores_used, grad_mib, ddp ? ddp->bucket_parameter_names().size() : std::size_t(0), span, wait, overlap,
                blocking_ms, double(loss_value));
  } else {
    std::printf("%s: %d rank(s) x %d thread(s), batch %zu (%zu per rank): step median %.1f ms [%.1f, %.1f] over %zu "
                "steps = %.2f samples/s (zero_grad+forward %.1f ms, backward %.1f ms)\n"
                "  CPU time / wall time: %.2f cores in all, %.2f on the least busy rank; %.2f samples per CPU second\n",
                c.name, world, o.threads, B, rows, step, quantile(step_ms, 0.25), quantile(step_ms, 0.75),
                step_ms.size(), samples, median(forward_ms), median(backward_ms), cores_used, least_share,
                samples / cores_used);
    if (ddp)
      std::printf("  gradients %.1f MiB in %zu buckets: all-reduce span %.1f ms per step, of which %.1f ms waited "
                  "after backward (%.0f%% overlapped backward); one blocking all-reduce of it all: %.1f ms\n",
                  grad_mib, ddp->bucket_parameter_names().size(), span, wait, 100 * overlap, blocking_ms);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  xgrad::allocator_tuning_from_env();  // as bench_train_step: keep freed tensor memory for the next step
  Options o;
  try {
    if (!parse(argc, argv, o)) {
      usage();
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ddp: %s\n", e.what());
    usage();
    return 2;
  }
  // Under mpirun with several processes: the process group (an error on one rank ends the job).
  const char* launched = std::getenv("OMPI_COMM_WORLD_SIZE");
  const bool distributed = launched != nullptr && std::atoi(launched) > 1;
  if (distributed) dist::init_process_group();
  const int rank = distributed ? dist::get_rank() : 0, world = distributed ? dist::get_world_size() : 1;
  int status = 0;
  try {
    status = run(o, rank, world);
  } catch (const std::exception& e) {
    if (distributed) dist::abort(std::string("bench_ddp: ") + e.what());
    std::fprintf(stderr, "bench_ddp: %s\n", e.what());
    status = 1;
  }
  if (distributed) dist::destroy_process_group();
  return status;
}
