// Writes the fuzzers' seed corpora: small valid files, one folder per format, and hostile files,
// one for each loader fix (a safetensors shape of 65 dims, shapes whose element count
// overflows or exceeds the file, truncated archives, lengths claiming 2^60 items). Each hostile
// file must be refused with xgrad::FormatError before it becomes a seed: fuzz_seeds exits 1 naming
// the file when one loads (or throws anything else), so fuzz/run.sh fails when a fix regresses.
// The profiler's hostile scripts (names that are not UTF-8, closes out of order or on another
// thread) must instead give a profile that holds its invariants, checked as fuzz_profiler_trace does.
//   fuzz_seeds OUT_DIR   ->   OUT_DIR/safetensors/*.safetensors, OUT_DIR/checkpoint/*, OUT_DIR/hf_gpt2/*,
//                             OUT_DIR/tokenizer/*, OUT_DIR/token_file/*, OUT_DIR/trainer_metadata/*,
//                             OUT_DIR/profiler_trace/*
#include <cstdint>
#include <exception>
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
#include <xgrad/serialize/serialize.hpp>
#include <xgrad/data/token_file.hpp>
#include <xgrad/text/bpe_trainer.hpp>
#include <xgrad/train/trainer.hpp>

#include "hf_gpt2_folder.hpp"
#include "profiler_script.hpp"
#include "trainer_metadata.hpp"

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

std::string le64(std::uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return s;
}

// `bytes` with the first occurrence of `pattern` replaced (which must be there).
std::string forge(const std::string& bytes, const std::string& pattern, const std::string& replacement) {
  const std::size_t at = bytes.find(pattern);
  if (at == std::string::npos) throw std::logic_error("fuzz_seeds: pattern not found");
  std::string forged = bytes;
  forged.replace(at, pattern.size(), replacement);
  return forged;
}

int failures = 0;

// Writes a hostile seed after checking that `load` refuses it with FormatError.
template <class Load>
void hostile(const std::filesystem::path& path, const std::string& bytes, Load&& load) {
  try {
    load(bytes);
    std::cerr << "fuzz_seeds: " << path.string() << " loaded; it must be refused with FormatError\n";
    ++failures;
  } catch (const xgrad::FormatError&) {
  } catch (const std::exception& e) {
    std::cerr << "fuzz_seeds: " << path.string() << ": not a FormatError: " << e.what() << "\n";
    ++failures;
  }
  write(path, bytes);
}

void hostile_safetensors(const std::filesystem::path& dir) {
  const auto load = [](const std::string& b) {
    xgrad::load_safetensors_from_memory<float>(b.data(), b.size());
    xgrad::load_safetensors_from_memory<double>(b.data(), b.size());
  };
  const auto shape_of = [](int dims) {
    std::string s = "[";
    for (int i = 0; i < dims; ++i) s += i ? ",1" : "1";
    return s + "]";
  };
  const auto one_tensor = [](const std::string& shape, const std::string& data) {
    return raw_file(R"({"t":{"dtype":"F32","shape":)" + shape + R"(,"data_offsets":[0,)" +
                        std::to_string(data.size()) + "]}}",
                    data);
  };
  const std::string four(4, '\0');
  // At most 64 dims, as PyTorch (a header with 10^7 dims used to load); 64 still loads.
  write(dir / "dims_64.safetensors", one_tensor(shape_of(64), four));
  hostile(dir / "hostile_dims_65.safetensors", one_tensor(shape_of(65), four), load);
  // Element counts: 2^32 * 2^32 wraps to 0 in 64 bits; 2^62 * 4 elements exceed the file.
  hostile(dir / "hostile_count_overflow.safetensors", one_tensor("[4294967296,4294967296]", ""), load);
  hostile(dir / "hostile_count_huge.safetensors", one_tensor("[4611686018427387904,4]", four), load);
  hostile(dir / "hostile_count_wraps_to_size.safetensors",
          one_tensor("[4611686018427387905,4]", four), load);  // 4 * (2^62 + 1) = 4 mod 2^64
}

void hostile_archives(const std::filesystem::path& dir) {
  using namespace xgrad;
  const auto load = [](const std::string& b) {
    load_state_dict_from_memory<float>(b.data(), b.size(), ArchiveFormat::binary);
    load_checkpoint_from_memory<float>(b.data(), b.size(), ArchiveFormat::binary);
  };
  nn::StateDict<float> s;
  Array<float> w = Array<float>::from_shape({3, 5});
  for (std::size_t i = 0; i < w.size(); ++i) w.data()[i] = 0.25f * static_cast<float>(i);
  s.insert("weight", w);
  const std::string bytes = state_dict_bytes(s, ArchiveFormat::binary);
  const std::uint64_t huge = std::uint64_t{1} << 60;
  const std::string shape = le64(2) + le64(3) + le64(5);
  // Reads bounded by the bytes that remain: truncated files, lengths claiming 2^60 items.
  hostile(dir / "hostile_truncated.xgrad", bytes.substr(0, bytes.size() / 2), load);
  hostile(dir / "hostile_truncated_data.xgrad", bytes.substr(0, bytes.size() - 1), load);
  hostile(dir / "hostile_overlong_string.xgrad", forge(bytes, le64(6) + "weight", le64(huge) + "weight"), load);
  hostile(dir / "hostile_overlong_entries.xgrad",
          forge(bytes, le64(1) + le64(6) + "weight", le64(huge) + le64(6) + "weight"), load);
  hostile(dir / "hostile_overlong_data.xgrad", forge(bytes, shape, le64(2) + le64(huge) + le64(1)), load);
  hostile(dir / "hostile_trailing_bytes.xgrad", forge(bytes, shape, le64(2) + le64(1) + le64(5)), load);
  // Shapes: 2^31 * 2^31 elements exceed the file, 2^32 * 2^32 overflows 64 bits.
  hostile(dir / "hostile_shape_huge.xgrad", forge(bytes, shape, le64(2) + le64(1ull << 31) + le64(1ull << 31)),
          load);
  hostile(dir / "hostile_shape_overflow.xgrad",
          forge(bytes, shape, le64(2) + le64(1ull << 32) + le64(1ull << 32)), load);
}

// Hugging Face GPT-2 folders (fuzz_hf_gpt2's input: config.json, then after a NUL byte the
// index): the tiny model's config alone and with an index, and one hostile input per refusal.
void hf_gpt2_seeds(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  xgrad_fuzz::HFGPT2Folder folder;
  const std::string config = folder.tiny_config(), nul(1, '\0');
  // The index of the one shard, as save_pretrained writes it (the names are plain ASCII).
  std::string index = R"({"metadata": {"total_size": 0}, "weight_map": {)";
  const auto header = xgrad::read_safetensors_header((folder.dir() / "model-00001-of-00001.safetensors").string());
  for (std::size_t i = 0; i < header.tensors.size(); ++i)
    index += (i ? ", \"" : "\"") + header.tensors[i].name + "\": \"model-00001-of-00001.safetensors\"";
  index += "}}";
  write(dir / "config.json", config);
  write(dir / "config_and_index.json", config + nul + index);
  write(dir / "config_no_defaults.json", R"({"model_type": "gpt2", "vocab_size": 8, "n_positions": 4, "n_embd": 4, )"
                                         R"("n_layer": 1, "n_head": 2, "attn_pdrop": 0, "embd_pdrop": 0, "resid_pdrop": 0})");
  const auto load = [&](const std::string& bytes) {
    folder.write(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    xgrad::models::load_hf_gpt2<float>(folder.dir().string());
  };
  // The index leaves out a tensor of the shard: refused (each must be listed).
  hostile(dir / "hostile_index_partial.json", config + nul + forge(index, "\"transformer.wpe.weight\"", "\"wpe\""), load);
  hostile(dir / "hostile_model_type.json", forge(config, "\"gpt2\"", "\"bert\""), load);
  hostile(dir / "hostile_n_layer_huge.json", forge(config, "\"n_layer\": 1", "\"n_layer\": 2147483647"), load);
  hostile(dir / "hostile_n_embd_huge.json", forge(config, "\"n_embd\": 4", "\"n_embd\": 2147483646"), load);
  hostile(dir / "hostile_n_head.json", forge(config, "\"n_head\": 2", "\"n_head\": 3"), load);
  hostile(dir / "hostile_n_inner.json", forge(config, "\"n_inner\": null", "\"n_inner\": 4294967296"), load);
  hostile(dir / "hostile_activation.json", forge(config, "\"gelu_new\"", "\"gelu_fast\""), load);
  hostile(dir / "hostile_inverse_layer_idx.json",
          forge(config, "\"scale_attn_by_inverse_layer_idx\": false", "\"scale_attn_by_inverse_layer_idx\": true"), load);
  hostile(dir / "hostile_deep.json", std::string(1000, '[') + std::string(1000, ']'), load);
  hostile(dir / "hostile_not_utf8.json", forge(config, "\"gpt2\"", "\"gpt2\xff\""), load);
  hostile(dir / "hostile_index_outside.json",
          config + nul + R"({"weight_map": {"transformer.wte.weight": "../model.safetensors"}})", load);
  hostile(dir / "hostile_index_nul_name.json",
          config + nul + R"({"weight_map": {"transformer.wte.weight": "model\u0000.safetensors"}})", load);
}

// The tokenizer's files (a small trained tokenizer's encoder.json, vocab.bpe and tokenizer.json)
// and texts; fuzz_tokenizer reads every seed both as text and as each file.
void tokenizer_seeds(const std::filesystem::path& dir) {
  using xgrad::text::BPETokenizer;
  std::filesystem::create_directories(dir);
  const BPETokenizer tok =
      xgrad::text::train_bpe({"the heaven and the earth, and the deep", "I'm sure they'll say it's 12,345",
                              "caf\xc3\xa9 \xf0\x9f\x98\x80 \xff"},
                             xgrad::text::BPETrainerOptions(300));
  write(dir / "encoder.json", tok.encoder_json());
  write(dir / "vocab.bpe", tok.vocab_bpe());
  write(dir / "both", tok.encoder_json() + std::string(1, '\0') + tok.vocab_bpe());
  std::string merges = "[";
  for (const auto& [a, b] : tok.merges()) merges += (merges.size() > 1 ? ", \"" : "\"") + a + " " + b + "\"";
  const std::string tokenizer_json =
      R"({"added_tokens": [{"id": 299, "content": "<|endoftext|>", "special": true}], "normalizer": null, )"
      R"("pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}, )"
      R"("model": {"type": "BPE", "dropout": null, "vocab": )" +
      tok.encoder_json() + R"(, "merges": )" + merges + "]}}";
  BPETokenizer::from_tokenizer_json_bytes(tokenizer_json);  // a seed that loads
  write(dir / "tokenizer.json", tokenizer_json);
  write(dir / "text_mixed.txt", "Hello world! I'm here   \n\t12345 caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac <|endoftext|>");
  static const char kInvalid[] = "\xff\xfe \xc3 ab\xe2\x82 \xed\xa0\x80 \xc0\x80\0end";  // a NUL inside
  write(dir / "text_invalid.txt", std::string(kInvalid, sizeof kInvalid - 1));
  const auto load_tokenizer_json = [](const std::string& b) { BPETokenizer::from_tokenizer_json_bytes(b); };
  hostile(dir / "hostile_wordpiece.json", forge(tokenizer_json, R"("type": "BPE")", R"("type": "WordPiece")"),
          load_tokenizer_json);
  hostile(dir / "hostile_added_id.json", forge(tokenizer_json, R"("id": 299)", R"("id": 2999999999)"),
          load_tokenizer_json);
  const std::string json = tok.encoder_json(), bpe = tok.vocab_bpe();
  const auto load_encoder_json = [&](const std::string& b) { BPETokenizer::from_json_and_merges(b, bpe); };
  hostile(dir / "hostile_merge_line.bpe", bpe + "abc\n",
          [&](const std::string& b) { BPETokenizer::from_json_and_merges(json, b); });
  hostile(dir / "hostile_id_gap.json", forge(json, ": 0,", ": 100000,"), load_encoder_json);
  // The input layer: nesting past 64 levels (a recursive dump() of it overflowed the stack), a
  // normalizer that is not an object (an nlohmann type_error escaped), ids out of range.
  const std::string deep = std::string(1000, '[') + std::string(1000, ']');
  hostile(dir / "hostile_deep_encoder.json", forge(json, ": 0,", ": " + deep + ","), load_encoder_json);
  hostile(dir / "hostile_deep_unclosed.json", std::string(1000, '['), load_encoder_json);
  hostile(dir / "hostile_id_huge.json", forge(json, ": 0,", ": 1e99,"), load_encoder_json);
  hostile(dir / "hostile_id_negative.json", forge(json, ": 0,", ": -1,"), load_encoder_json);
  hostile(dir / "hostile_deep_pre_tokenizer.json",
          forge(tokenizer_json, R"("pre_tokenizer": {)", R"("pre_tokenizer": )" + deep + R"(, "x": {)"),
          load_tokenizer_json);
  hostile(dir / "hostile_normalizer_array.json",
          forge(tokenizer_json, R"("normalizer": null)", R"("normalizer": [1, 2, 3])"), load_tokenizer_json);
  hostile(dir / "hostile_added_id_float.json", forge(tokenizer_json, R"("id": 299)", R"("id": 1e99)"),
          load_tokenizer_json);
}

// Token files (fuzz_token_file's input): small valid ones, and the hostile headers.
void token_file_seeds(const std::filesystem::path& dir) {
  namespace data = xgrad::data;
  std::filesystem::create_directories(dir);
  data::write_token_file((dir / "uint16.tok").string(), {1, 2, 3, 50256}, data::TokenFileOptions().vocab_size(50257));
  data::write_token_file((dir / "uint32.tok").string(), {0, 70000, 5},
                         data::TokenFileOptions().dtype(data::TokenDtype::UInt32).vocab_size(70001));
  data::write_token_file((dir / "empty.tok").string(), std::vector<std::int64_t>{}, data::TokenFileOptions());
  write(dir / "headerless.bin", std::string("\x01\x00\x02\x00\xff\xff", 6));
  std::ifstream in(dir / "uint16.tok", std::ios::binary);
  const std::string valid((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto load = [&](const std::string& b) {
    const std::filesystem::path path = dir / ".checking.tok";
    write(path, b);
    data::TokenFile file(path.string());
    file.verify();
  };
  hostile(dir / "hostile_truncated.tok", valid.substr(0, valid.size() - 1), load);
  hostile(dir / "hostile_trailing.tok", valid + "x", load);
  hostile(dir / "hostile_header_ff.tok", std::string(64, '\xff') + valid.substr(64), load);
  hostile(dir / "hostile_header_only.tok", valid.substr(0, 40), load);
  std::string version = valid;
  version[8] = '\x7f';
  hostile(dir / "hostile_version.tok", version, load);
  std::filesystem::remove(dir / ".checking.tok");
}

// The Trainer's checkpoint metadata (fuzz_trainer_metadata's input): a checkpoint it resumes from,
// and the forged ones it must refuse with train::Refused naming the key.
void trainer_metadata_seeds(const std::filesystem::path& dir) {
  using xgrad_fuzz::good_trainer_metadata;
  using xgrad_fuzz::trainer_input;
  std::filesystem::create_directories(dir);
  const std::filesystem::path ckpt = dir / ".checking.ckpt";
  const auto resume = [&](const std::string& input) {
    write(ckpt, xgrad_fuzz::trainer_checkpoint(reinterpret_cast<const std::uint8_t*>(input.data()), input.size()));
    xgrad_fuzz::resume_trainer(ckpt.string());
  };
  const std::string good = trainer_input(4, good_trainer_metadata());
  resume(good);  // a seed that resumes
  write(dir / "good", good);
  const auto refused = [&](const std::string& name, const std::string& input) {
    try {
      resume(input);
      std::cerr << "fuzz_seeds: " << (dir / name).string() << " resumed; it must be refused\n";
      ++failures;
    } catch (const xgrad::train::Refused&) {
    } catch (const std::exception& e) {
      std::cerr << "fuzz_seeds: " << (dir / name).string() << ": not train::Refused: " << e.what() << "\n";
      ++failures;
    }
    write(dir / name, input);
  };
  const auto with = [&](const std::string& from, const std::string& to) {
    return trainer_input(4, forge(good_trainer_metadata(), from, to));
  };
  refused("hostile_step_2_40", trainer_input(std::int64_t{1} << 40, good_trainer_metadata()));
  refused("hostile_step_negative", trainer_input(-5, good_trainer_metadata()));
  refused("hostile_loss_count_1e99", with("loss_count=2", "loss_count=1e99"));
  refused("hostile_max_steps_text", with("max_steps=10", "max_steps=abc"));
  refused("hostile_max_steps_huge", with("max_steps=10", "max_steps=99999999999999999999"));
  refused("hostile_planned_steps", with("planned_steps=10", "planned_steps=-1"));
  refused("hostile_elapsed", with("elapsed=0x1p+0", "elapsed=0x1p+99999"));
  refused("hostile_no_setting", with("config.lr=0x1.999999999999ap-4\n", ""));
  refused("hostile_width_huge", with("config.width=8", "config.width=2147483648"));
  refused("hostile_seed_negative", with("config.seed=18446744073709551615", "config.seed=-1"));
  std::filesystem::remove(ckpt);
}

// Scripts for fuzz_profiler_trace (fuzz/profiler_script.hpp): a well-nested step, and one hostile
// script per profiler fix, each of which must run to a profile that holds the invariants.
void profiler_trace_seeds(const std::filesystem::path& dir) {
  using xgrad_fuzz::Script;
  std::filesystem::create_directories(dir);
  const auto seed = [&](const std::string& name, const Script& script) {
    const std::string& b = script.bytes();
    const std::string violation =
        xgrad_fuzz::run_profiler_script(reinterpret_cast<const std::uint8_t*>(b.data()), b.size());
    if (!violation.empty()) {
      std::cerr << "fuzz_seeds: " << (dir / name).string() << ": " << violation << "\n";
      ++failures;
    }
    write(dir / name, b);
  };
  seed("step", Script().open("train_step").open("forward").op().close().close().backward().close().close());
  seed("parallel", Script().open("step").op().parallel(12).close().parallel(3).close());
  // Names: every kind of malformed UTF-8, escapes, a NUL.
  seed("hostile_names", Script()
                            .open("a\xff")
                            .close()
                            .open("\x80 stray")
                            .close()
                            .open("\xc0\xaf overlong")
                            .close()
                            .open("\xe0\x80\xaf overlong")
                            .close()
                            .open("\xed\xa0\x80 surrogate")
                            .close()
                            .open("\xf4\x90\x80\x80 past U+10FFFF")
                            .close()
                            .open("\xf5\xfe\xff")
                            .close()
                            .open("cut \xe2\x82")
                            .close()
                            .open(std::string("\" \\ \x01\x1f\n\t\0 nul", 13))
                            .close());
  // Closed out of order: the outer range before the ones inside it (their self times went negative).
  seed("hostile_out_of_order",
       Script().open("outer").open("middle").op().open("inner").close(2).open("after").close(1).close(0).close(0));
  // Closed on another thread than the one that opened it (it overwrote that thread's event).
  seed("hostile_other_thread", Script()
                                   .open("main")
                                   .open_elsewhere("worker")
                                   .open("child")
                                   .close_elsewhere(1)
                                   .close_elsewhere(0)
                                   .open("last")
                                   .close()
                                   .close());
  // A stop midway, with ranges still open and closed after it.
  seed("hostile_stop_midway", Script().open("a").op().parallel(8).stop().close().open("after").close(1).close());
  Script nested;
  for (int i = 0; i < 200; ++i) nested.open("d");
  seed("hostile_deep", nested.close(199).open("after").close_elsewhere(0));
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
  hostile_safetensors(out / "safetensors");
  hostile_archives(out / "checkpoint");
  hf_gpt2_seeds(out / "hf_gpt2");
  tokenizer_seeds(out / "tokenizer");
  profiler_trace_seeds(out / "profiler_trace");
  token_file_seeds(out / "token_file");
  trainer_metadata_seeds(out / "trainer_metadata");
  return failures == 0 ? 0 : 1;
}
