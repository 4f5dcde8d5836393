// One training step of a 3-layer transformer encoder, as in PyTorch:
//
//   layer = nn.TransformerEncoderLayer(4, 2, dim_feedforward=64, dropout=0.2, activation="gelu",
//                                      layer_norm_eps=1e-5, batch_first=True, norm_first=True, bias=True)
//   enc = nn.TransformerEncoder(layer, 3)
//   torch.manual_seed(0);  x = torch.randn(2, 3, 4)
//   enc.eval();  enc(x)                                   # eval forward
//   torch.manual_seed(24); enc.train(); y = enc(x)        # training forward, seeded dropout
//   loss = mse_loss(y, x); loss.backward(); adam.step()   # the loss before and after the step
//
// then checks the gradient of that whole training step against central finite differences, in
// double precision with dropout active (the generator re-seeded before every evaluation so
// every evaluation draws the same masks), for every parameter. Writes graph.dot (the backward
// graph) and graph.png when Graphviz's `dot` is installed. Exits with 1 when the check fails.
//
// xgrad's random stream is not PyTorch's, so the numbers differ from a PyTorch run with the same
// seeds; the golden tests compare xgrad with PyTorch on identical weights.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <xgrad/core/graphviz.hpp>
#include <xgrad/xgrad.hpp>

namespace {

using xgrad::Tensor;

constexpr std::uint64_t kInputSeed = 0;
constexpr std::uint64_t kInitSeed = 42;   // weights
constexpr std::uint64_t kTrainSeed = 24;  // dropout masks

void heading(const char* title) { std::printf("\n== %s\n", title); }

// A (B, N, D) tensor, one row of D numbers per line, as PyTorch prints it.
template <class T>
void print_3d(const Tensor<T>& t) {
  const auto& v = t.value();
  for (std::size_t b = 0; b < v.shape(0); ++b) {
    for (std::size_t n = 0; n < v.shape(1); ++n) {
      std::printf("  %s", n == 0 ? "[[" : " [");
      for (std::size_t d = 0; d < v.shape(2); ++d)
        std::printf("%8.4f%s", static_cast<double>(v(b, n, d)), d + 1 < v.shape(2) ? "," : "");
      std::printf("]%s\n", n + 1 < v.shape(1) ? "" : "]");
    }
  }
}

template <class T>
std::shared_ptr<xgrad::nn::TransformerEncoder<T>> make_encoder() {
  const auto options = xgrad::nn::TransformerEncoderLayerOptions(/*d_model=*/4, /*nhead=*/2)
                           .dim_feedforward(64)
                           .dropout(0.2)
                           .activation("gelu")
                           .layer_norm_eps(1e-5)
                           .batch_first(true)
                           .norm_first(true)
                           .bias(true);
  auto layer = std::make_shared<xgrad::nn::TransformerEncoderLayer<T>>(options);
  return std::make_shared<xgrad::nn::TransformerEncoder<T>>(layer, /*num_layers=*/3);
}

// Writes graph.dot and, when Graphviz is installed, renders graph.png.
void write_graph(const Tensor<float>& loss, const xgrad::nn::Module<float>& model) {
  heading("backward graph");
  const std::string dot = xgrad::to_dot(loss, model.named_parameters());
  xgrad::write_file_atomically("graph.dot", [&](std::ostream& out) { out << dot; });
  std::printf("wrote graph.dot\n");
  std::fflush(stdout);  // before the output of the commands below
  if (std::system("command -v dot >/dev/null 2>&1") == 0) {
    if (std::system("dot -Tpng graph.dot -o graph.png") == 0) {
      std::printf("wrote graph.png\n");
    } else {
      std::printf("dot failed to render graph.png\n");
    }
  } else {
    std::printf(
        "graph.png not rendered: Graphviz is not installed (apt-get install graphviz),\n"
        "then: dot -Tpng graph.dot -o graph.png\n");
  }
}

}  // namespace

int main() {
  xgrad::allocator_tuning_from_env();  // keep freed tensor memory for the next step
  xgrad::manual_seed(kInputSeed);
  const Tensor<float> x = xgrad::randn<float>({2, 3, 4});
  xgrad::manual_seed(kInitSeed);
  auto enc = make_encoder<float>();
  std::size_t count = 0;
  for (const auto& p : enc->parameters()) count += p.numel();
  std::printf(
      "TransformerEncoder: 3 layers, d_model 4, nhead 2, dim_feedforward 64, dropout 0.2, gelu,\n"
      "pre-norm, batch_first; %zu parameters in %zu tensors\n",
      count, enc->parameters().size());
  heading("input x (seed 0)");
  print_3d(x);

  heading("eval forward: enc(x), dropout off");
  enc->eval();
  {
    xgrad::NoGradGuard no_grad;
    print_3d(enc->forward(x));
  }

  heading("training forward: enc(x), dropout on (seed 24)");
  enc->train();
  xgrad::manual_seed(kTrainSeed);
  const Tensor<float> y = enc->forward(x);
  print_3d(y);
  const Tensor<float> loss = xgrad::mse_loss(y, x);
  write_graph(loss, *enc);
  // The weights of this step, for the double-precision check below.
  const xgrad::nn::StateDict<float> before_step = enc->state_dict();

  heading("training step: mse_loss(enc(x), x), backward, Adam(lr=1e-3) step");
  xgrad::optim::Adam<float> adam(enc->parameters(), xgrad::optim::AdamOptions(1e-3));
  adam.zero_grad();
  loss.backward();
  adam.step();
  float loss_after = 0;
  {
    xgrad::NoGradGuard no_grad;
    xgrad::manual_seed(kTrainSeed);  // the same dropout masks as the step
    loss_after = xgrad::mse_loss(enc->forward(x), x).item();
  }
  std::printf("loss before %.7f\nloss after  %.7f  (%+.7f)\n", loss.item(), loss_after, loss_after - loss.item());

  // The same step in double from the same weights, with every evaluation re-seeded.
  heading("gradcheck of the training step (double, dropout on, central differences)");
  auto enc64 = make_encoder<double>();
  xgrad::nn::StateDict<double> weights;
  for (const auto& [name, value] : before_step) weights.insert(name, xgrad::Array<double>(xt::cast<double>(value)));
  enc64->load_state_dict(weights);
  enc64->train();
  const Tensor<double> x64(xt::cast<double>(x.value()));
  const auto step_loss = [&] {
    xgrad::manual_seed(kTrainSeed);
    return xgrad::mse_loss(enc64->forward(x64), x64);
  };
  const xgrad::GradcheckOptions options;
  const xgrad::GradcheckResult result = xgrad::gradcheck_parameters(step_loss, enc64->named_parameters(), options);
  std::printf("eps %g, pass when |analytic - numeric| <= %g + %g |numeric| for every element\n\n", options.eps,
              options.atol, options.rtol);
  std::printf("%-34s %-8s %12s %12s\n", "parameter", "shape", "max abs err", "max rel err");
  double worst_abs = 0, worst_rel = 0;
  for (const auto& r : result.inputs) {
    std::printf("%-34s %-8s %12.3e %12.3e  %s\n", r.name.c_str(), xgrad::shape_str(r.shape).c_str(), r.max_abs_error,
                r.max_rel_error, r.passed ? "PASS" : "FAIL");
    worst_abs = std::max(worst_abs, r.max_abs_error);
    worst_rel = std::max(worst_rel, r.max_rel_error);
  }
  std::printf("\n%zu parameters checked, largest abs error %.3e, largest rel error %.3e\ngradcheck: %s\n",
              result.inputs.size(), worst_abs, worst_rel, result.passed ? "PASS" : "FAIL");
  if (!(loss_after < loss.item())) std::printf("the Adam step did not lower the loss\n");
  return result.passed && loss_after < loss.item() ? 0 : 1;
}
