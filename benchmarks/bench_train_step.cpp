// bench_train_step: the time of one float32 training step of xgrad's pre-norm GELU
// TransformerEncoder (dropout 0, batch_first), and the machine's sgemm rate through the same
// BLAS, so that a step's GFLOP/s can be read as a fraction of what the machine can do.
//
//   step:  opt.zero_grad();  loss = mse_loss(encoder(x), target);  loss.backward();  opt.step();
//   x, target: fixed (B, N, d) standard-normal tensors; Adam(lr=1e-4); torch defaults otherwise.
//
// The configuration gpt2s is a GPT-2-small-shaped language model instead (xgrad::models::GPT:
// 12 layers, d 768, 12 heads, 1,024 tokens, batch 1, a causal mask, the tied head over a vocabulary
// of 256, the model of benchmarks/gpt_long.py):
//   step:  opt.zero_grad();  loss = cross_entropy(gpt(x), y);  loss.backward();  opt.step();
//   x, y: fixed random tokens, y = x shifted by one; AdamW(lr 1e-4, betas (0.9, 0.99), weight decay
//   0.1 on the matrices only), as nanoGPT's configure_optimizers.
//
// Usage:
//   bench_train_step                  the sgemm rate, then every encoder configuration (gpt2s
//                                     only when named), each in its own child process (so that
//                                     each peak RSS is its own)
//   bench_train_step --config small   one configuration, in this process
//   bench_train_step --gemm           the gemm rates only: 1024^3 float32 through OpenBLAS and
//                                     through oneDNN, and the bf16 gemm (fp32 accumulation)
//   --configs tiny,small   subset for the default mode      --no-gemm   skip the sgemm rate
//   --json                 one JSON object per line          --quick     shorter runs
//   --breakdown            also the median of each phase (zero_grad, forward+loss, backward, step)
//   --min-time S  --min-reps R  --max-reps R  --warmup W  --warmup-time S
//   --threads N            xgrad::set_num_threads(N) (default: xgrad's default, OMP_NUM_THREADS
//                          or every core); xgrad splits gemms and kernels over its own threads and
//                          keeps BLAS single-threaded. The count in use is printed.
//   --bf16                 the step's forward and loss under xgrad::AutocastGuard (bfloat16 gemms,
//                          fp32 accumulation; everything else fp32), as torch.autocast on CPU; the
//                          bf16 gemm path is printed. benchmarks/compare.py runs the same steps in PyTorch beside this
//                          program.
//   --profile FILE         profile the timed steps (xgrad::profiler; the timings include its cost):
//                          the Chrome trace to FILE (FILE.<config>.json for each of several configs)
//                          and the op and thread-pool tables to stderr
#include <dlfcn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <xgrad/backend/bf16.hpp>
#include <xgrad/backend/gemm.hpp>
#include <xgrad/backend/onednn.hpp>
#include <xgrad/models/gpt.hpp>
#include <xgrad/xgrad.hpp>

namespace {

struct Config {
  const char* name;
  std::size_t B, N, d, h, ff, L;  // batch, sequence, d_model, heads, dim_feedforward, layers
  std::size_t vocab = 0;          // > 0: a GPT language model (ff = 4 d) over this vocabulary
};

// The same as benchmarks/compare.py's CONFIGS.
constexpr Config kConfigs[] = {
    {"tiny", 2, 3, 4, 2, 64, 3},        {"small", 16, 32, 64, 4, 256, 2},           {"medium", 32, 64, 256, 8, 1024, 4},
    {"large", 8, 128, 512, 8, 2048, 2}, {"gpt2s", 1, 1024, 768, 12, 3072, 12, 256},
};

// Model FLOPs of one training step: the matmuls only (LayerNorm, softmax, GELU, the loss and
// Adam are not counted). With T = B*N tokens, one layer's forward is
//   QKV projection 2*T*d*3d + out-projection 2*T*d*d           = 8*T*d^2
//   Q K^T and P V: 2 * (2 * B*h * N*N * d/h)                   = 4*B*N^2*d
//   linear1 2*T*d*ff + linear2 2*T*ff*d                        = 4*T*d*ff
// and backward costs twice the forward (a gradient for each matmul operand). The GPT adds its
// tied head, 2*T*d*V forward; its causal attention is counted whole (N^2), as PyTorch computes it.
constexpr const char* kFlopFormula = "3 * L * (8*T*d^2 + 4*T*d*ff + 4*B*N^2*d), T = B*N (+ 3 * 2*T*d*V, a GPT's head)";

double step_flops(const Config& c) {
  const double B = double(c.B), N = double(c.N), d = double(c.d), ff = double(c.ff), L = double(c.L);
  const double T = B * N;
  return 3.0 * L * (8.0 * T * d * d + 4.0 * T * d * ff + 4.0 * B * N * N * d) + 3.0 * 2.0 * T * d * double(c.vocab);
}

struct Options {
  std::string config;                // --config: run this one in-process
  std::vector<std::string> configs;  // --configs: the default mode's subset
  bool gemm_only = false, no_gemm = false, json = false, breakdown = false, bf16 = false;
  int threads = 0;                   // --threads: xgrad::set_num_threads (0: the default)
  std::string profile;               // --profile: the Chrome trace's file
  double min_time = 3.0, warmup_time = 0.5;
  std::size_t min_reps = 5, max_reps = 100000, warmup = 3;
};

struct Stats {
  std::size_t reps = 0;
  double median = 0, p25 = 0, p75 = 0, min = 0, max = 0;  // ms
};

double quantile(const std::vector<double>& sorted, double q) {
  const double pos = q * double(sorted.size() - 1);
  const std::size_t lo = std::size_t(pos), hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (pos - double(lo)) * (sorted[hi] - sorted[lo]);
}

Stats summarize(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  Stats s;
  s.reps = ms.size();
  s.median = quantile(ms, 0.5);
  s.p25 = quantile(ms, 0.25);
  s.p75 = quantile(ms, 0.75);
  s.min = ms.front();
  s.max = ms.back();
  return s;
}

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Warm-up (at least `warmup` calls and `warmup_time` seconds), then on_timed_start(), then times
// each call until both min_reps calls and min_time seconds are reached, or max_reps calls.
template <class F, class G>
Stats time_calls(F&& call, const Options& o, G&& on_timed_start) {
  const auto warm_start = Clock::now();
  for (std::size_t i = 0; i < o.warmup || seconds_since(warm_start) < o.warmup_time; ++i) call();
  on_timed_start();
  std::vector<double> ms;
  const auto start = Clock::now();
  while (ms.size() < o.max_reps && (ms.size() < o.min_reps || seconds_since(start) < o.min_time)) {
    const auto t0 = Clock::now();
    call();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return summarize(std::move(ms));
}

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

// OpenBLAS's own report of its threads and build, looked up at run time so that the program
// still runs (reporting -1) on another BLAS.
int blas_threads() {
  using Fn = int (*)();
  auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  return fn ? fn() : -1;
}
std::string blas_config() {
  using Fn = const char* (*)();
  auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "openblas_get_config"));
  std::string s = fn ? fn() : "unknown BLAS";
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

std::string json_escape(const std::string& s) {
  std::string r;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') r += '\\';
    r += ch;
  }
  return r;
}

void print_stats_json(const Stats& s) {
  std::printf("\"reps\":%zu,\"median_ms\":%.6g,\"p25_ms\":%.6g,\"p75_ms\":%.6g,\"min_ms\":%.6g,\"max_ms\":%.6g", s.reps,
              s.median, s.p25, s.p75, s.min, s.max);
}

// C = A B with A, B: (1024, 1024) standard normal, through xgrad's gemm entry point on each
// float32 backend, and through detail::gemm_bf16 (operands rounded to bf16, fp32 accumulation;
// oneDNN's bf16 matmul where the CPU has one, its path printed).
int run_gemm(const Options& o) {
  constexpr std::size_t n = 1024;
  xgrad::manual_seed(0);
  const xgrad::Array<float> a = xgrad::randn<float>({n, n}).value();
  const xgrad::Array<float> b = xgrad::randn<float>({n, n}).value();
  xgrad::Array<float> c = xgrad::zeros<float>({n, n}).value();
  Options g = o;
  g.min_time = std::min(o.min_time, 1.5);
  g.min_reps = std::max<std::size_t>(o.min_reps, 10);
  const xgrad::GemmBackend backend = xgrad::get_gemm_backend();
  const std::string isa = xgrad::detail::onednn_isa();
  for (const char* kind : {"openblas", "onednn", "bf16"}) {
    const std::string k = kind;
    std::function<void()> call;
    if (k == "bf16") {
      xgrad::set_gemm_backend(backend);
      call = [&] {
        xgrad::detail::gemm_bf16(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
      };
    } else {
      xgrad::set_gemm_backend(k == "onednn" ? xgrad::GemmBackend::onednn : xgrad::GemmBackend::openblas);
      call = [&] {
        xgrad::detail::gemm<float>(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
      };
    }
    const Stats s = time_calls(call, g, [] {});
    const double flops = 2.0 * double(n) * n * n;
    const double gflops = flops / (s.median * 1e6), best = flops / (s.min * 1e6);
    if (o.json) {
      std::printf("{\"kind\":\"gemm\",\"framework\":\"xgrad\",\"gemm\":\"%s\",\"isa\":\"%s\","
                  "\"bf16_native\":%s,\"n\":%zu,\"xgrad_threads\":%d,\"blas_threads\":%d,\"blas\":\"%s\",",
                  kind, isa.c_str(), xgrad::detail::onednn_bf16_native() ? "true" : "false", n,
                  xgrad::get_num_threads(), blas_threads(), json_escape(blas_config()).c_str());
      if (k == "bf16")
        std::printf("\"dtype\":\"bf16\",\"bf16_path\":\"%s\",", json_escape(xgrad::autocast_gemm_path()).c_str());
      print_stats_json(s);
      std::printf(",\"gflops\":%.6g,\"gflops_best\":%.6g,\"peak_rss_mib\":%.6g}\n", gflops, best, peak_rss_mib());
    } else {
      std::printf("%-8s gemm 1024x1024x1024 (%d xgrad threads, oneDNN ISA %s): median %.2f ms = %.1f GFLOP/s "
                  "(best %.1f), %zu runs%s%s\n", kind, xgrad::get_num_threads(), isa.c_str(), s.median, gflops, best,
                  s.reps, k == "bf16" ? "; path: " : "", k == "bf16" ? xgrad::autocast_gemm_path() : "");
    }
  }
  xgrad::set_gemm_backend(backend);
  return 0;
}

// The model of configuration c, its optimizer, and one step's forward and loss.
struct Model {
  std::shared_ptr<xgrad::nn::Module<float>> module;
  std::unique_ptr<xgrad::optim::Optimizer<float>> opt;
  std::function<xgrad::Tensor<float>()> forward_loss;
};

Model make_encoder(const Config& c) {
  using namespace xgrad;
  Model m;
  std::shared_ptr<nn::TransformerEncoder<float>> encoder;
  {
    // The prototype layer is only copied from; dropping it keeps its parameters out of the peak.
    auto layer = std::make_shared<nn::TransformerEncoderLayer<float>>(
        nn::TransformerEncoderLayerOptions(std::int64_t(c.d), std::int64_t(c.h))
            .dim_feedforward(std::int64_t(c.ff))
            .dropout(0.0)
            .activation("gelu")
            .batch_first(true)
            .norm_first(true));
    encoder = std::make_shared<nn::TransformerEncoder<float>>(layer, std::int64_t(c.L));
  }
  m.module = encoder;
  m.opt = std::make_unique<optim::Adam<float>>(encoder->parameters(), optim::AdamOptions(1e-4));
  const Tensor<float> x = randn<float>({c.B, c.N, c.d});       // (B, N, d)
  const Tensor<float> target = randn<float>({c.B, c.N, c.d});  // (B, N, d)
  m.forward_loss = [encoder, x, target] { return mse_loss(encoder->forward(x), target); };
  return m;
}

Model make_gpt(const Config& c) {
  using namespace xgrad;
  Model m;
  models::GPTConfig config;
  config.vocab_size = std::int64_t(c.vocab);
  config.block_size = std::int64_t(c.N);
  config.n_layer = std::int64_t(c.L);
  config.n_head = std::int64_t(c.h);
  config.n_embd = std::int64_t(c.d);
  config.n_inner = std::int64_t(c.ff);
  auto gpt = std::make_shared<models::GPT<float>>(config);
  m.module = gpt;
  // nanoGPT's configure_optimizers: weight decay on the matrices only.
  std::vector<Tensor<float>> decay, no_decay;
  for (const auto& p : gpt->parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  const auto options = optim::AdamWOptions(1e-4).betas({0.9, 0.99}).weight_decay(0.1);
  m.opt = std::make_unique<optim::AdamW<float>>(
      std::vector<optim::ParamGroup<float>>{
          optim::ParamGroup<float>(decay),
          optim::ParamGroup<float>(no_decay, optim::AdamWOptions(options).weight_decay(0))},
      options);
  // x: (B, N) random tokens, y: (B*N) the next ones.
  IndexArray x = IndexArray::from_shape({c.B, c.N}), y = IndexArray::from_shape({c.B * c.N});
  std::uint64_t s = 0x9E3779B97F4A7C15ULL;
  auto draw = [&] {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return std::int64_t((s >> 33) % std::uint64_t(c.vocab));
  };
  for (std::size_t b = 0; b < c.B; ++b) {
    std::int64_t next = draw();
    for (std::size_t i = 0; i < c.N; ++i) {
      x(b, i) = next;
      next = draw();
      y(b * c.N + i) = next;
    }
  }
  const std::int64_t vocab = std::int64_t(c.vocab);
  m.forward_loss = [gpt, x, y, vocab] { return cross_entropy(reshape(gpt->forward(x), {-1, vocab}), y); };
  return m;
}

int run_config(const Config& c, const Options& o) {
  using namespace xgrad;
  const double baseline_mib = peak_rss_mib();
  manual_seed(0);
  Model model = c.vocab > 0 ? make_gpt(c) : make_encoder(c);
  optim::Optimizer<float>& opt = *model.opt;

  // Each timed step also records its phases: zero_grad | forward and loss | backward | Adam step.
  float loss_value = 0;
  bool timing = false;
  std::vector<double> phase_ms[4];
  const auto step = [&] {
    const auto t0 = Clock::now();
    opt.zero_grad();
    const auto t1 = Clock::now();
    Tensor<float> loss;
    {
      AutocastGuard autocast(o.bf16);  // the backward follows the forward's choice
      loss = model.forward_loss();
    }
    const auto t2 = Clock::now();
    loss.backward();
    const auto t3 = Clock::now();
    opt.step();
    const auto t4 = Clock::now();
    loss_value = loss.value().data()[0];
    if (!timing) return;
    const Clock::time_point t[] = {t0, t1, t2, t3, t4};
    for (int i = 0; i < 4; ++i)
      phase_ms[i].push_back(std::chrono::duration<double, std::milli>(t[i + 1] - t[i]).count());
  };
  std::unique_ptr<profiler::Profile> profile;
  const Stats s = time_calls(step, o, [&] {
    timing = true;
    if (!o.profile.empty()) profile = std::make_unique<profiler::Profile>();
  });
  if (profile) std::fprintf(stderr, "%s", profiler::save_report(*profile, o.profile).c_str());
  double phase_median[4];
  for (int i = 0; i < 4; ++i) phase_median[i] = summarize(phase_ms[i]).median;
  if (!std::isfinite(loss_value)) {
    std::fprintf(stderr, "bench_train_step: %s: the loss is not finite (%g)\n", c.name, double(loss_value));
    return 1;
  }
  const double flops = step_flops(c), gflops = flops / (s.median * 1e6), peak = peak_rss_mib();
  if (o.json) {
    std::printf(
        "{\"kind\":\"train_step\",\"framework\":\"xgrad\",\"config\":\"%s\",\"model\":\"%s\",\"B\":%zu,"
        "\"N\":%zu,\"d\":%zu,\"h\":%zu,\"ff\":%zu,\"L\":%zu,\"vocab\":%zu,\"xgrad_threads\":%d,"
        "\"blas_threads\":%d,\"gemm_backend\":\"%s\",\"flops\":%.6g,",
        c.name, c.vocab > 0 ? "gpt" : "encoder", c.B, c.N, c.d, c.h, c.ff, c.L, c.vocab, get_num_threads(),
        blas_threads(), gemm_backend_name(get_gemm_backend()), flops);
    if (o.bf16)
      std::printf("\"precision\":\"bf16\",\"bf16_path\":\"%s\",", json_escape(xgrad::autocast_gemm_path()).c_str());
    print_stats_json(s);
    std::printf(",\"gflops\":%.6g,\"peak_rss_mib\":%.6g,\"baseline_rss_mib\":%.6g,\"final_loss\":%.6g,"
                "\"phases_median_ms\":{\"zero_grad\":%.6g,\"forward_loss\":%.6g,\"backward\":%.6g,\"step\":%.6g}}\n",
                gflops, peak, baseline_mib, double(loss_value), phase_median[0], phase_median[1], phase_median[2],
                phase_median[3]);
  } else {
    std::printf("%-7s %3zu %4zu %4zu %3zu %5zu %2zu %7zu %11.3f  [%9.3f, %9.3f]  %9.3f .. %9.3f %8.2f %9.1f\n", c.name,
                c.B, c.N, c.d, c.h, c.ff, c.L, s.reps, s.median, s.p25, s.p75, s.min, s.max, gflops, peak);
    if (o.breakdown)
      std::printf("        phases (median ms): zero_grad %.4g, forward+loss %.4g, backward %.4g, Adam step %.4g\n",
                  phase_median[0], phase_median[1], phase_median[2], phase_median[3]);
  }
  return 0;
}

// Re-runs this program with `args` and waits; the child writes to our stdout.
int run_child(const std::vector<std::string>& args) {
  std::fflush(stdout);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    execv("/proc/self/exe", argv.data());
    std::perror("bench_train_step: execv");
    _exit(127);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return 1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

const Config* find_config(const std::string& name) {
  for (const auto& c : kConfigs)
    if (name == c.name) return &c;
  return nullptr;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= s.size()) {
    const std::size_t comma = std::min(s.find(',', start), s.size());
    if (comma > start) parts.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return parts;
}

void usage() {
  std::fprintf(stderr,
               "usage: bench_train_step [--config NAME | --gemm | --configs A,B,...] [--no-gemm] [--json]\n"
               "                        [--breakdown] [--quick] [--min-time S] [--min-reps R] [--max-reps R]\n"
               "                        [--warmup W] [--warmup-time S] [--threads N] [--bf16] [--profile FILE]\n"
               "configurations: tiny small medium large gpt2s\n");
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--config") o.config = value();
    else if (a == "--configs") o.configs = split(value());
    else if (a == "--gemm") o.gemm_only = true;
    else if (a == "--no-gemm") o.no_gemm = true;
    else if (a == "--json") o.json = true;
    else if (a == "--breakdown") o.breakdown = true;
    else if (a == "--quick") { o.min_time = 1.0; o.min_reps = 3; o.warmup = 1; o.warmup_time = 0.2; }
    else if (a == "--min-time") o.min_time = std::stod(value());
    else if (a == "--min-reps") o.min_reps = std::stoul(value());
    else if (a == "--max-reps") o.max_reps = std::stoul(value());
    else if (a == "--warmup") o.warmup = std::stoul(value());
    else if (a == "--warmup-time") o.warmup_time = std::stod(value());
    else if (a == "--threads") o.threads = std::stoi(value());
    else if (a == "--bf16") o.bf16 = true;
    else if (a == "--profile")
      o.profile = value();
    else throw std::invalid_argument("unknown argument " + a);
  }
  if (o.min_reps < 1) o.min_reps = 1;
  if (o.max_reps < o.min_reps) o.max_reps = o.min_reps;
  for (const auto& name : o.configs)
    if (!find_config(name)) throw std::invalid_argument("unknown configuration " + name);
  if (!o.config.empty() && !find_config(o.config)) throw std::invalid_argument("unknown configuration " + o.config);
  return o;
}

// The timing flags, passed on to the children.
std::vector<std::string> timing_args(const Options& o) {
  std::vector<std::string> args = {"--min-time", std::to_string(o.min_time), "--min-reps", std::to_string(o.min_reps),
                                   "--max-reps", std::to_string(o.max_reps), "--warmup", std::to_string(o.warmup),
                                   "--warmup-time", std::to_string(o.warmup_time)};
  if (o.threads > 0) {
    args.push_back("--threads");
    args.push_back(std::to_string(o.threads));
  }
  if (o.bf16) args.push_back("--bf16");
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  xgrad::allocator_tuning_from_env();  // keep freed tensor memory for the next step
  Options o;
  try {
    o = parse(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train_step: %s\n", e.what());
    usage();
    return 2;
  }
  try {
    if (o.threads > 0) xgrad::set_num_threads(o.threads);
    if (o.gemm_only) return run_gemm(o);
    if (!o.config.empty()) return run_config(*find_config(o.config), o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train_step: %s\n", e.what());
    return 1;
  }

  // The default mode: every step in its own process.
  if (o.configs.empty())  // the encoders; gpt2s (seconds a step) only when named
    for (const auto& c : kConfigs)
      if (c.vocab == 0) o.configs.push_back(c.name);
  std::vector<std::string> base = {argv[0]};
  if (o.json) base.push_back("--json");
  if (o.breakdown) base.push_back("--breakdown");
  for (const auto& a : timing_args(o)) base.push_back(a);
  if (o.json) {
    std::printf("{\"kind\":\"header\",\"flop_formula\":\"%s\",\"blas\":\"%s\"", kFlopFormula,
                json_escape(blas_config()).c_str());
    if (o.bf16)
      std::printf(",\"precision\":\"bf16\",\"bf16_path\":\"%s\"",
                  json_escape(xgrad::autocast_gemm_path()).c_str());
    std::printf("}\n");
  } else {
    std::printf(
        "xgrad %s training step: zero_grad, forward, mse_loss(encoder(x), target), backward, Adam\n"
        "model: pre-norm GELU TransformerEncoder, dropout 0, batch_first (gpt2s: a GPT, cross_entropy over\n"
        "the next tokens, AdamW); BLAS: %s; %d xgrad threads\n"
        "GFLOP/s = model matmul FLOPs / median step time, FLOPs = %s (backward = 2x forward)\n"
        "each configuration runs in its own process: peak MiB is that process's ru_maxrss\n",
        o.bf16 ? "bfloat16 autocast" : "float32", blas_config().c_str(), xgrad::get_num_threads(), kFlopFormula);
    if (o.bf16)
      std::printf("bf16: forward and loss under xgrad::AutocastGuard; bf16 gemm path: %s\n",
                  xgrad::autocast_gemm_path());
  }
  int failures = 0;
  if (!o.no_gemm) {
    std::vector<std::string> args = base;
    args.push_back("--gemm");
    failures += run_child(args) != 0;
  }
  if (!o.json)
    std::printf("\n%-7s %3s %4s %4s %3s %5s %2s %7s %11s  [%9s, %9s]  %9s .. %9s %8s %9s\n", "config", "B", "N", "d",
                "h", "ff", "L", "reps", "median ms", "p25", "p75", "min", "max", "GFLOP/s", "peak MiB");
  for (const auto& name : o.configs) {
    std::vector<std::string> args = base;
    args.push_back("--config");
    args.push_back(name);
    if (!o.profile.empty()) {
      args.push_back("--profile");
      args.push_back(o.configs.size() == 1 ? o.profile : o.profile + "." + name + ".json");
    }
    failures += run_child(args) != 0;
  }
  return failures == 0 ? 0 : 1;
}
