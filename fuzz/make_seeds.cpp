// Writes the fuzzers' seed corpora: small valid files, one folder per format.
//   fuzz_seeds OUT_DIR   ->   OUT_DIR/safetensors/*.safetensors, OUT_DIR/checkpoint/*
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <string>

#include <xgrad/nn/linear.hpp>
#include <xgrad/optim/adam.hpp>
#include <xgrad/optim/lr_scheduler.hpp>
#include <xgrad/optim/sgd.hpp>
#include <xgrad/serialize/checkpoint.hpp>
#include <xgrad/serialize/safetensors.hpp>

namespace {

void write(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A file written by hand: dtypes and layouts xgrad does not write itself.
std::string raw_file(const std::string& header, const std::string& data) {
  std::string length(8, '\0');
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return length + header + data;
}

void safetensors_seeds(const std::filesystem::path& dir) {
  using xgrad::Array;
  std::filesystem::create_directories(dir);
  xgrad::NamedArrays<float> f;
  f.emplace_back("weight", Array<float>{{1.0f, -2.0f, 0.5f}, {3.0f, 0.0f, -0.25f}});
  f.emplace_back("bias", Array<float>{0.1f, 0.2f});
  f.emplace_back("scalar", Array<float>(7.0f));
  f.emplace_back("empty", Array<float>::from_shape({0, 4}));
  write(dir / "float.safetensors", xgrad::safetensors_bytes(f, {{"format", "pt"}}));
  xgrad::NamedArrays<double> d;
  d.emplace_back("layers.0.norm1.weight", Array<double>{1.0, 1.0, 1.0, 1.0});
  d.emplace_back("x", Array<double>{{{1e300, -0.0}}});
  write(dir / "double.safetensors", xgrad::safetensors_bytes(d));
  write(dir / "empty.safetensors", xgrad::safetensors_bytes(xgrad::NamedArrays<float>{}));
  write(dir / "half.safetensors",
        raw_file(R"({"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},)"
                 R"("b":{"dtype":"BF16","shape":[1,2],"data_offsets":[4,8]},"__metadata__":{"k":"v"}})",
                 std::string("\x00\x3C\x00\xC0\x80\x3F\x49\x40", 8)));
}

// cereal archives in both formats: checkpoints of the objects fuzz_checkpoint restores into
// (Linear(3, 2), Adam with a group per parameter, LinearLR), one without a schedule, state dicts.
void checkpoint_seeds(const std::filesystem::path& dir) {
  using namespace xgrad;
  std::filesystem::create_directories(dir);
  auto both = [&](const std::string& name, auto&& bytes_in) {
    write(dir / (name + ".xgrad"), bytes_in(ArchiveFormat::binary));
    write(dir / (name + ".json"), bytes_in(ArchiveFormat::json));
  };
  manual_seed(1);
  nn::Linear<float> model(3, 2);
  optim::Adam<float> adam(std::vector<optim::ParamGroup<float>>{
      optim::ParamGroup<float>({model.weight}),
      optim::ParamGroup<float>({model.bias}, optim::AdamOptions(0.02).amsgrad(true))});
  optim::LinearLR<float> schedule(adam);
  for (int i = 0; i < 2; ++i) {
    adam.zero_grad();
    sum(model.forward(ones<float>({2, 3}))).backward();
    adam.step();
    schedule.step();
  }
  const auto c = Checkpoint<float>::capture(model, adam, &schedule, default_generator(), 2, {{"k", "v"}});
  both("checkpoint", [&](ArchiveFormat f) { return checkpoint_bytes(c, f); });
  optim::SGD<float> sgd(model.parameters(), optim::SGDOptions(0.1).momentum(0.9));
  const auto no_schedule = Checkpoint<float>::capture(model, sgd, nullptr, Generator(3), 0);
  both("sgd_checkpoint", [&](ArchiveFormat f) { return checkpoint_bytes(no_schedule, f); });
  nn::StateDict<float> special;
  special.insert("x", Array<float>{std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                                   -0.0f, 1e-45f});
  special.insert("empty", Array<float>::from_shape({0, 2}));
  special.insert("scalar", Array<float>(3.0f));
  both("state_dict", [&](ArchiveFormat f) { return state_dict_bytes(special, f); });
  nn::StateDict<double> d;
  d.insert("w", Array<double>{{1e300, -2.5}});
  both("state_dict_double", [&](ArchiveFormat f) { return state_dict_bytes(d, f); });
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " OUT_DIR\n";
    return 2;
  }
  const std::filesystem::path out(argv[1]);
  safetensors_seeds(out / "safetensors");
  checkpoint_seeds(out / "checkpoint");
  return 0;
}
