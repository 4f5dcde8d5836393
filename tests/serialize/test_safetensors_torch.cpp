// Weights between PyTorch and xgrad through safetensors (scripts/safetensors_interchange.py):
// a TransformerEncoder state dict written by PyTorch loads into xgrad's encoder and reproduces
// PyTorch's output; the file xgrad saves loads back unchanged and, when Debian's python3-torch
// is installed, into torch.nn.TransformerEncoder with the same output.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "fixture.hpp"
#include <xgrad/serialize/safetensors.hpp>
#include "test_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

namespace {

const std::string kFixtures = XGRAD_FIXTURES_DIR;

std::shared_ptr<nn::TransformerEncoder<float>> torch_architecture() {
  auto layer = std::make_shared<nn::TransformerEncoderLayer<float>>(nn::TransformerEncoderLayerOptions(4, 2)
                                                                         .dim_feedforward(16)
                                                                         .dropout(0.0)
                                                                         .activation("gelu")
                                                                         .batch_first(true)
                                                                         .norm_first(true));
  return std::make_shared<nn::TransformerEncoder<float>>(layer, 2);
}

}  // namespace

TEST(SafetensorsTorch, PyTorchWeightsReproducePyTorchsOutput) {
  const Fixture f = load_fixture("torch_encoder_io");
  auto enc = torch_architecture();
  const auto state = load_safetensors_state_dict<float>(kFixtures + "/torch_encoder.safetensors");
  EXPECT_EQ(state.size(), 24u);
  enc->load_state_dict(state);  // strict: every key of PyTorch's state_dict, every shape
  const Array<float> y = enc->forward(f.tensor<float>("input")).value();
  EXPECT_LT(max_abs_diff(y, f.array<float>("output")), 1e-5);
}

TEST(SafetensorsTorch, XgradSavedWeightsLoadBackAndInPyTorch) {
  auto enc = torch_architecture();
  enc->load_state_dict(load_safetensors_state_dict<float>(kFixtures + "/torch_encoder.safetensors"));
  const std::string path = ::testing::TempDir() + "xgrad_encoder.safetensors";
  save_safetensors(*enc, path);
  const auto reloaded = load_safetensors_state_dict<float>(path);
  const auto original = enc->state_dict();
  ASSERT_EQ(reloaded.keys(), original.keys());
  for (const auto& [key, value] : original) EXPECT_EQ(reloaded.at(key), value) << key;

  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3-torch is not installed: the PyTorch side of the round trip was not run";
  const std::string script = std::string(XGRAD_SOURCE_DIR) + "/scripts/safetensors_interchange.py";
  EXPECT_EQ(std::system(("/usr/bin/python3 " + script + " check " + path).c_str()), 0);
}
