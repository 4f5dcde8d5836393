// nn::LoraLayer and inject_lora (nn/lora.hpp): PEFT's forward and init, rsLoRA's scaling, targets by
// name suffix and all-linear, and frozen weights that cost nothing: no gradient, no optimizer state,
// values unchanged by a step. The PEFT fixture's numbers are checked in tests/models/test_peft.cpp,
// the finite differences in tests/gradcheck/nn_lora.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include <xgrad/core/grad_mode.hpp>
#include <xgrad/nn/lora.hpp>
#include <xgrad/optim/adam.hpp>

using namespace xgrad;

namespace {

// Two named linears, as a transformer block names its projections.
class Block : public nn::Module<float> {
 public:
  Block() : Module("Block") {
    q_proj = register_module("q_proj", std::make_shared<nn::Linear<float>>(6, 5));
    lm_head = register_module("lm_head", std::make_shared<nn::Linear<float>>(5, 3));
  }
  Tensor<float> forward(const Tensor<float>& x) override { return lm_head->forward(q_proj->forward(x)); }
  std::shared_ptr<nn::Linear<float>> q_proj, lm_head;
};

TEST(Lora, ANewAdapterLeavesTheOutputAndItsForwardIsPefts) {
  manual_seed(0);
  auto block = std::make_shared<Block>();
  const Tensor<float> x = randn<float>({2, 4, 6});
  const Array<float> before = block->forward(x).value();
  EXPECT_EQ(nn::inject_lora(*block, nn::LoraConfig().r(3).lora_alpha(6).target_modules({"q_proj"})),
            std::vector<std::string>{"q_proj"});
  EXPECT_EQ(block->forward(x).value(), before);  // B is zeros
  const auto lora = nn::lora_layers(*block)[0].second;
  const Array<float>& a = lora->lora_A->weight.value();
  EXPECT_EQ(shape_of(a), (Shape{3, 6}));
  EXPECT_LE(double(xt::amax(xt::abs(a))()), 1 / std::sqrt(6.0));  // kaiming_uniform(a = sqrt 5): U(+-1/sqrt(in))
  EXPECT_EQ(lora->scaling(), 2.0);
  lora->lora_B->weight.mutable_value() = xt::ones<float>({5, 3});
  // y = W x + b + B A x * alpha / r, by hand
  const Tensor<float> h = block->q_proj->forward(x);
  const Tensor<float> want = linear(x, block->q_proj->weight, block->q_proj->bias) +
                             linear(linear(x, lora->lora_A->weight), lora->lora_B->weight) * 2.0f;
  EXPECT_TRUE(xt::allclose(h.value(), want.value(), 1e-6, 1e-6));
  EXPECT_EQ(nn::LoraConfig().r(16).lora_alpha(8).use_rslora(true).scaling(), 2.0);  // alpha / sqrt(r)
}

TEST(Lora, FrozenWeightsGetNoGradientNoOptimizerStateAndDoNotMove) {
  manual_seed(1);
  auto block = std::make_shared<Block>();
  nn::inject_lora(*block, nn::LoraConfig().r(2).lora_dropout(0.1).target_modules({"all-linear"}));
  EXPECT_EQ(nn::lora_layers(*block).size(), 1u);  // all-linear: every Linear but lm_head
  EXPECT_EQ(nn::trainable_state_dict(*block).keys(),
            (std::vector<std::string>{"q_proj.lora_A.weight", "q_proj.lora_B.weight"}));
  const auto before = block->state_dict();
  optim::AdamW<float> opt(block->parameters(), optim::AdamWOptions(0.1));
  for (int step = 0; step < 2; ++step) {
    opt.zero_grad();
    sum(block->forward(randn<float>({4, 6}))).backward();
    opt.step();
  }
  for (const auto& [name, p] : block->named_parameters()) {
    const bool trainable = name.find(".lora_") != std::string::npos;
    EXPECT_EQ(p.requires_grad(), trainable) << name;
    EXPECT_EQ(p.has_grad(), trainable) << name;
    EXPECT_EQ(opt.state(p).empty(), !trainable) << name;
    EXPECT_EQ(p.value() == before.at(name), !trainable) << name;
  }
}

TEST(Lora, DropoutIsPeftsAndFollowsTrainAndEval) {
  manual_seed(2);
  auto block = std::make_shared<Block>();
  nn::inject_lora(*block, nn::LoraConfig().r(2).lora_dropout(0.5).target_modules({"q_proj"}));
  const auto lora = nn::lora_layers(*block)[0].second;
  ASSERT_NE(lora->lora_dropout, nullptr);
  lora->lora_B->weight.mutable_value() = xt::ones<float>({5, 2});
  const Tensor<float> x = randn<float>({8, 6});
  block->eval();
  NoGradGuard no_grad;
  const Array<float> a = block->q_proj->forward(x).value();
  EXPECT_EQ(block->q_proj->forward(x).value(), a);  // eval: no dropout
  block->train();
  EXPECT_NE(block->q_proj->forward(x).value(), a);
}

TEST(Lora, BadConfigsAndTargetsAreRefusedBeforeAnythingChanges) {
  auto block = std::make_shared<Block>();
  const auto refused = [&](const nn::LoraConfig& c) {
    EXPECT_THROW(nn::inject_lora(*block, c), std::invalid_argument);
    for (const auto& p : block->parameters()) EXPECT_TRUE(p.requires_grad());
    EXPECT_TRUE(nn::lora_layers(*block).empty());
  };
  refused(nn::LoraConfig().r(0).target_modules({"q_proj"}));
  refused(nn::LoraConfig().lora_dropout(1.0).target_modules({"q_proj"}));
  refused(nn::LoraConfig().target_modules({}));
  refused(nn::LoraConfig().target_modules({"q_proj", "k_proj"}));  // k_proj matches nothing
  refused(nn::LoraConfig().target_modules({"proj"}));              // a suffix is a whole name part
  nn::inject_lora(*block, nn::LoraConfig().target_modules({"q_proj"}));
  EXPECT_THROW(nn::inject_lora(*block, nn::LoraConfig().target_modules({"q_proj"})), std::invalid_argument);
}

}  // namespace
