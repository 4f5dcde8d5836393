// The tokenizer files against hostile input (the input layer, docs/reliability.md "Input rule"):
// deep JSON, a file larger than any tokenizer, a normalizer of the wrong type -- each a clear
// error naming the file and the key, never a crash or a bare library exception.
#include <gtest/gtest.h>
#include <unistd.h>

#include <xgrad/serialize/format_error.hpp>
#include <xgrad/text/bpe.hpp>
#include <xgrad/text/tokenizer.hpp>

#include "hostile_input.hpp"
#include "text_util.hpp"

namespace {

using xgrad::testing::deep_json;
using xgrad::testing::TempFolder;
using xgrad::testing::write_file;
using xgrad::text::BPETokenizer;
using xgrad::text::Tokenizer;

// A valid tokenizer.json of the 256 byte tokens, with `change` applied.
std::string tokenizer_json(const std::function<void(nlohmann::json&)>& change = {}) {
  nlohmann::json j = nlohmann::json::parse(BPETokenizer(xgrad::text::bytes_to_unicode(), {}, {}).tokenizer_json());
  if (change) change(j);
  return j.dump();
}

// The same with `key` set to a 100,000-level array (closed), spliced in as text: nlohmann's
// own dump() of such a value would overflow the stack here.
std::string tokenizer_json_with_deep(const std::string& key) {
  const std::string base = tokenizer_json([&](nlohmann::json& j) { j[key] = "DEEP"; });
  const std::string marker = "\"" + key + "\":\"DEEP\"";
  const std::size_t at = base.find(marker);
  EXPECT_NE(at, std::string::npos);
  return base.substr(0, at) + "\"" + key + "\":" + deep_json(100000, true) + base.substr(at + marker.size());
}

TEST(TokenizerHostile, DeepEncoderJsonIsAnErrorNotACrash) {
  TempFolder dir;
  write_file(dir / "vocab.bpe", "#version: 0.2\n");
  for (const std::string& json : {deep_json(), "{\"a\": " + deep_json(100000, true) + "}"}) {
    write_file(dir / "encoder.json", json);
    EXPECT_REFUSED([&] { BPETokenizer::from_files(dir / "encoder.json", dir / "vocab.bpe"); },
                   dir / "encoder.json" + ": the JSON nests deeper than 64 levels");
    EXPECT_REFUSED([&] { BPETokenizer::load(dir.str()); }, "encoder.json: the JSON nests deeper than 64 levels");
  }
}

TEST(TokenizerHostile, DeepTokenizerJsonIsAnErrorNotACrash) {
  TempFolder dir;
  for (const char* key : {"pre_tokenizer", "normalizer", "added_tokens", "post_processor"}) {
    write_file(dir / "tokenizer.json", tokenizer_json_with_deep(key));
    EXPECT_REFUSED([&] { BPETokenizer::load(dir.str()); }, "tokenizer.json: the JSON nests deeper than 64 levels");
    EXPECT_REFUSED([&] { Tokenizer::load(dir / "tokenizer.json"); }, "the JSON nests deeper than 64 levels");
  }
  write_file(dir / "tokenizer.json", deep_json());
  EXPECT_REFUSED([&] { Tokenizer::load(dir / "tokenizer.json"); },
                 "tokenizer.json: the JSON nests deeper than 64 levels");
}

TEST(TokenizerHostile, AHugeTokenizerFileIsRefusedBeforeReading) {
  TempFolder dir;
  write_file(dir / "tokenizer.json", "");
  ASSERT_EQ(::truncate((dir / "tokenizer.json").c_str(), std::int64_t(1) << 40), 0);  // sparse: 1 TiB of nothing
  const std::string bound =
      "is 1099511627776 bytes (1048576 MiB), more than the 268435456 bytes (256 MiB) a tokenizer "
      "file may be";
  EXPECT_REFUSED([&] { BPETokenizer::load(dir.str()); }, bound);
  EXPECT_REFUSED([&] { Tokenizer::load(dir / "tokenizer.json"); }, bound);
  ASSERT_EQ(::unlink((dir / "tokenizer.json").c_str()), 0);
  write_file(dir / "encoder.json", "");
  write_file(dir / "vocab.bpe", "");
  ASSERT_EQ(::truncate((dir / "vocab.bpe").c_str(), std::int64_t(1) << 40), 0);
  EXPECT_REFUSED([&] { BPETokenizer::load(dir.str()); }, "vocab.bpe' " + bound);
}

TEST(TokenizerHostile, ANormalizerOfTheWrongTypeNamesTheKey) {
  TempFolder dir;
  for (const auto& [value, got] : std::vector<std::pair<nlohmann::json, std::string>>{
           {nlohmann::json::array({1, 2, 3}), "an array of 3 elements"}, {"NFC", "\"NFC\""}, {7, "7"}}) {
    write_file(dir / "tokenizer.json", tokenizer_json([&](nlohmann::json& j) { j["normalizer"] = value; }));
    EXPECT_REFUSED([&] { BPETokenizer::load(dir.str()); },
                   "tokenizer.json: normalizer: expected an object or null, got " + got);
  }
  // An object is a normalizer, refused by its type (a missing or odd type too).
  write_file(dir / "tokenizer.json", tokenizer_json([](nlohmann::json& j) { j["normalizer"] = {{"type", 5}}; }));
  EXPECT_REFUSED([&] { BPETokenizer::load(dir.str()); }, "tokenizer.json: normalizer is set (5)");
  write_file(dir / "tokenizer.json", tokenizer_json([](nlohmann::json& j) { j["normalizer"] = nullptr; }));
  EXPECT_EQ(BPETokenizer::load(dir.str()).vocab_size(), 256u);
}

TEST(TokenizerHostile, NoLibraryExceptionEscapesTheTokenizerLoaders) {
  TempFolder dir;
  const std::string valid = tokenizer_json();
  std::vector<std::string> inputs = {"",
                                     std::string(64, '\0'),
                                     "{",
                                     "[]",
                                     "null",
                                     "1e999999",
                                     "\"\xff\xfe\"",
                                     tokenizer_json([](nlohmann::json& j) {
                                       j["model"] = {1, 2};
                                     }),
                                     tokenizer_json([](nlohmann::json& j) { j["model"]["vocab"]["a"] = 1e99; }),
                                     tokenizer_json([](nlohmann::json& j) { j["model"]["vocab"]["a"] = -1; }),
                                     tokenizer_json([](nlohmann::json& j) {
                                       j["model"]["merges"] = {{1, 2}};
                                     }),
                                     tokenizer_json([](nlohmann::json& j) {
                                       j["added_tokens"] = {{{"id", 1e99}}};
                                     }),
                                     tokenizer_json([](nlohmann::json& j) { j["pre_tokenizer"] = {1}; })};
  for (std::size_t cut = 1; cut < valid.size(); cut += valid.size() / 7) inputs.push_back(valid.substr(0, cut));
  for (const std::string& input : inputs) {
    write_file(dir / "tokenizer.json", input);
    EXPECT_REFUSED([&] { BPETokenizer::load(dir.str()); }, dir / "tokenizer.json");
    EXPECT_REFUSED([&] { Tokenizer::load(dir / "tokenizer.json"); }, dir / "tokenizer.json");
  }
}

}  // namespace
