// The tokenizer's files: encoder.json + vocab.bpe (GPT-2's, and what save() writes), vocab.json +
// merges.txt, tokenizer.json; the folder loader; bad files refused with FormatError naming the file
// and the key or line.
#include <gtest/gtest.h>

#include <xgrad/serialize/format_error.hpp>
#include <xgrad/text/bpe.hpp>

#include "text_util.hpp"

namespace {

using xgrad::FormatError;
using xgrad::testing::corpus;
using xgrad::testing::gpt2;
using xgrad::testing::read_file;
using xgrad::testing::TempFolder;
using xgrad::testing::thrown;
using xgrad::testing::tokenizer_fixture;
using xgrad::testing::write_file;
using xgrad::text::BPETokenizer;
using Ids = std::vector<std::int64_t>;

// GPT-2's tokenizer.json as transformers writes it, from the fixture's two files.
nlohmann::json gpt2_tokenizer_json(bool merges_as_pairs) {  // pairs: tokenizers 0.20 and later
  nlohmann::json merges = nlohmann::json::array();
  for (const auto& [a, b] : gpt2().merges())
    merges.push_back(merges_as_pairs ? nlohmann::json{a, b} : nlohmann::json(a + " " + b));
  nlohmann::json vocab = nlohmann::json::object();
  for (std::size_t id = 0; id < gpt2().vocab_size(); ++id) vocab[gpt2().tokens()[id]] = id;
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens",
           {{{"id", 50256},
             {"content", "<|endoftext|>"},
             {"single_word", false},
             {"lstrip", false},
             {"rstrip", false},
             {"normalized", true},
             {"special", true}}}},
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
          {"post_processor",
           {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", ""},
            {"end_of_word_suffix", ""},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"vocab", vocab},
            {"merges", merges}}}};
}

void expect_same(const BPETokenizer& a, const BPETokenizer& b) {
  EXPECT_EQ(a.tokens(), b.tokens());
  EXPECT_EQ(a.merges(), b.merges());
  EXPECT_EQ(a.special_tokens(), b.special_tokens());
  for (std::size_t i = 0; i < corpus().size(); i += 7)
    EXPECT_EQ(a.encode(corpus()[i].second), b.encode(corpus()[i].second)) << corpus()[i].first;
}

TEST(BPEFiles, SaveWritesGPT2sFilesByteForByte) {
  EXPECT_TRUE(gpt2().encoder_json() == read_file(tokenizer_fixture("encoder.json")));  // not printed: 1 MB
  EXPECT_TRUE(gpt2().vocab_bpe() == read_file(tokenizer_fixture("vocab.bpe")));
  TempFolder dir;
  gpt2().save(dir.str());
  expect_same(BPETokenizer::load(dir.str()), gpt2());
}

TEST(BPEFiles, TokenizerJsonGivesTheSameTokenizer) {
  TempFolder dir;
  write_file(dir / "tokenizer.json", gpt2_tokenizer_json(false).dump());  // merges as "a b" (pairs: below)
  const auto tok = BPETokenizer::from_tokenizer_json(dir / "tokenizer.json");
  expect_same(tok, gpt2());
  EXPECT_EQ(tok.encode("a<|endoftext|>", xgrad::text::Special::all), (Ids{64, 50256}));
}

TEST(BPEFiles, FolderLoaderFindsEachLayout) {
  TempFolder dir;
  EXPECT_NE(thrown<std::runtime_error>([&] { BPETokenizer::load(dir.str()); }).find(dir.str() + " has neither"),
            std::string::npos);
  const BPETokenizer small(xgrad::text::bytes_to_unicode(), {}, {});
  small.save(dir.str());  // encoder.json + vocab.bpe
  EXPECT_EQ(BPETokenizer::load(dir.str()).tokens(), small.tokens());
  write_file(dir / "vocab.json", gpt2().encoder_json());  // Hugging Face's names come first
  write_file(dir / "merges.txt", gpt2().vocab_bpe());
  EXPECT_EQ(BPETokenizer::load(dir.str()).vocab_size(), gpt2().vocab_size());
  // tokenizer.json comes first: a broken one is reported, not skipped.
  write_file(dir / "tokenizer.json", "{}");
  EXPECT_NE(
      thrown<FormatError>([&] { BPETokenizer::load(dir.str()); }).find("tokenizer.json: no object at the key 'model'"),
      std::string::npos);
}

TEST(BPEFiles, MissingAndSpecialFilesAreRefused) {
  EXPECT_NE(thrown<std::runtime_error>([] {
              BPETokenizer::from_files("/nonexistent/encoder.json", "x");
            }).find("/nonexistent/encoder.json"),
            std::string::npos);
  EXPECT_THROW(BPETokenizer::from_files("/dev/zero", tokenizer_fixture("vocab.bpe")), std::runtime_error);
  EXPECT_THROW(BPETokenizer::from_tokenizer_json("/dev/null"), std::runtime_error);
}

// A small byte-level vocabulary: the 256 bytes, then `extra`.
std::string small_vocab(const std::vector<std::string>& extra = {}) {
  nlohmann::json v = nlohmann::json::object();
  for (std::size_t b = 0; b < 256; ++b) v[xgrad::text::bytes_to_unicode()[b]] = b;
  for (std::size_t i = 0; i < extra.size(); ++i) v[extra[i]] = 256 + i;
  return v.dump();
}

std::string load_error(const std::string& json, const std::string& merges) {
  const std::string message = thrown<FormatError>([&] { BPETokenizer::from_json_and_merges(json, merges); });
  std::cerr << "  refused: " << message << "\n";
  return message;
}

TEST(BPEFiles, BadEncoderJsonIsRefusedNamingTheFileAndKey) {
  const std::string ok_merges = "#version: 0.2\n";
  EXPECT_NE(load_error("{\"a\": ", ok_merges).find("encoder.json: not valid JSON"), std::string::npos);
  EXPECT_NE(load_error("[1, 2]", ok_merges).find("encoder.json: the vocabulary must be an object"), std::string::npos);
  EXPECT_NE(load_error(R"({"a": "x"})", ok_merges).find("encoder.json: 'a' must be an integer id, got \"x\""),
            std::string::npos);
  EXPECT_NE(load_error(R"({"a": 0, "b": 5})", ok_merges)
                .find("encoder.json: 'b' has the id 5; the ids of the 2 tokens must be 0 .. 1, each once"),
            std::string::npos);
  EXPECT_NE(load_error(R"({"a": 0, "b": 0})", ok_merges).find("both have the id 0"), std::string::npos);
  EXPECT_NE(load_error(R"({"a": -1})", ok_merges).find("'a' has the id -1"), std::string::npos);
  EXPECT_NE(load_error(R"({"a": 0})", ok_merges).find("encoder.json: the byte 0 has no token"), std::string::npos);
  EXPECT_NE(load_error("{}", ok_merges).find("encoder.json: the vocabulary is empty"), std::string::npos);
  EXPECT_EQ(BPETokenizer::from_json_and_merges(small_vocab(), ok_merges).vocab_size(), 256u);
}

TEST(BPEFiles, BadVocabBpeIsRefusedNamingTheFileAndLine) {
  const std::string vocab = small_vocab({"ab", "abc"});
  EXPECT_EQ(BPETokenizer::from_json_and_merges(vocab, "#version: 0.2\na b\nab c\n").encode("abc"), (Ids{257}));
  EXPECT_EQ(BPETokenizer::from_json_and_merges(vocab, "a b\r\n\r\nab c").encode("abcab"), (Ids{257, 256}));
  EXPECT_NE(load_error(vocab, "#version: 0.2\na b\nabc\n")
                .find("vocab.bpe: line 3: expected two tokens separated by one space, got 'abc'"),
            std::string::npos);
  EXPECT_NE(load_error(vocab, "a  b\n").find("vocab.bpe: line 1: expected two tokens"), std::string::npos);
  EXPECT_NE(load_error(vocab, "a b c\n").find("vocab.bpe: line 1"), std::string::npos);
  EXPECT_NE(
      load_error(vocab, "a b\nab x\n").find("vocab.bpe: merge 2 ('ab x'): its result 'abx' is not in the vocabulary"),
      std::string::npos);
  EXPECT_NE(
      load_error(vocab, "a zz\n").find("vocab.bpe: merge 1 ('a zz'): its right part 'zz' is not in the vocabulary"),
      std::string::npos);
  EXPECT_NE(load_error(vocab, "a b\na b\n").find("vocab.bpe: merge 2 ('a b') appears twice"), std::string::npos);
}

TEST(BPEFiles, TokensNoMergeReachesAreSpecial) {
  // GPT-2's convention for encoder.json: <|endoftext|> is neither a byte nor a merge's result.
  const auto tok = BPETokenizer::from_json_and_merges(small_vocab({"ab", "<pad>", "\xe4\xb8\xad"}), "a b\n");
  EXPECT_EQ(tok.special_tokens(), (std::map<std::string, std::int64_t>{{"<pad>", 257}, {"\xe4\xb8\xad", 258}}));
  EXPECT_EQ(tok.encode("ab<pad>", xgrad::text::Special::all), (Ids{256, 257}));
  EXPECT_EQ(tok.decode({258, 256}),
            "\xe4\xb8\xad"
            "ab");
}

std::string tokenizer_json_error(const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = {
      {"model", {{"type", "BPE"}, {"vocab", nlohmann::json::parse(small_vocab({"ab"}))}, {"merges", {"a b"}}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}}};
  edit(j);
  return thrown<FormatError>([&] { BPETokenizer::from_tokenizer_json_bytes(j.dump()); });
}

TEST(BPEFiles, TokenizerJsonOfAnotherKindIsRefusedByName) {
  EXPECT_EQ(tokenizer_json_error([](nlohmann::json&) {}), "(no exception)");
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> cases = {
      {[](nlohmann::json& j) { j["model"]["type"] = "WordPiece"; },
       "tokenizer.json: model.type is 'WordPiece'; only 'BPE' is supported"},
      {[](nlohmann::json& j) { j.erase("model"); }, "tokenizer.json: no object at the key 'model'"},
      {[](nlohmann::json& j) { j["model"].erase("vocab"); }, "tokenizer.json: no key 'model.vocab'"},
      {[](nlohmann::json& j) { j["model"].erase("merges"); }, "tokenizer.json: no key 'model.merges'"},
      {[](nlohmann::json& j) { j["model"]["merges"] = 3; }, "tokenizer.json: model.merges must be a list"},
      {[](nlohmann::json& j) { j["model"]["merges"] = {"a b c"}; }, "tokenizer.json: model.merges[0]"},
      {[](nlohmann::json& j) {
         j["model"]["merges"] = nlohmann::json::array({nlohmann::json::array({"a", 1})});
       },
       "tokenizer.json: model.merges[0]: expected"},
      {[](nlohmann::json& j) { j["model"]["merges"] = {"a zz"}; },
       "tokenizer.json: model.merges: merge 1 ('a zz'): its right part 'zz' is not in the vocabulary"},
      {[](nlohmann::json& j) { j["model"]["vocab"]["a"] = 7; }, "both have the id 7"},
      {[](nlohmann::json& j) { j["model"]["dropout"] = 0.1; }, "tokenizer.json: model.dropout is 0.1"},
      {[](nlohmann::json& j) { j["model"]["byte_fallback"] = true; }, "tokenizer.json: model.byte_fallback is true"},
      {[](nlohmann::json& j) { j["model"]["continuing_subword_prefix"] = "##"; },
       "tokenizer.json: model.continuing_subword_prefix is \"##\""},
      {[](nlohmann::json& j) {
         j["normalizer"] = {{"type", "NFC"}};
       },
       "tokenizer.json: normalizer is set (NFC)"},
      {[](nlohmann::json& j) { j["pre_tokenizer"]["type"] = "Metaspace"; },
       "tokenizer.json: pre_tokenizer.type is 'Metaspace'"},
      {[](nlohmann::json& j) { j.erase("pre_tokenizer"); }, "tokenizer.json: no key 'pre_tokenizer'"},
      {[](nlohmann::json& j) { j["pre_tokenizer"]["add_prefix_space"] = true; },
       "tokenizer.json: pre_tokenizer.add_prefix_space is true"},
      {[](nlohmann::json& j) { j["pre_tokenizer"]["use_regex"] = false; }, "tokenizer.json: pre_tokenizer.use_regex"},
      {[](nlohmann::json& j) {
         j["post_processor"] = {{"type", "RobertaProcessing"}};
       },
       "tokenizer.json: post_processor.type is 'RobertaProcessing'"},
      {[](nlohmann::json& j) {
         j["added_tokens"] = {{{"id", 3}, {"content", "<s>"}}};
       },
       "tokenizer.json: added_tokens[0] ('<s>') and model.vocab["},
      {[](nlohmann::json& j) {
         j["added_tokens"] = {{{"id", 300}, {"content", "ab"}}};
       },
       "tokenizer.json: added_tokens[0] ('ab') has the id 300, but model.vocab gives it 256"},
      {[](nlohmann::json& j) {
         j["added_tokens"] = {{{"content", "x"}}};
       },
       "tokenizer.json: added_tokens[0] must be an object with an integer 'id'"},
      {[](nlohmann::json& j) { j = nlohmann::json::array(); }, "tokenizer.json: expected a JSON object at the top"},
  };
  for (const auto& [edit, expected] : cases) {
    const std::string message = tokenizer_json_error(edit);
    EXPECT_NE(message.find(expected), std::string::npos) << "expected: " << expected << "\n     got: " << message;
  }
  // An added token past the vocabulary takes the next id.
  nlohmann::json j = {{"model", {{"vocab", nlohmann::json::parse(small_vocab({"ab"}))}, {"merges", {"a b"}}}},
                      {"pre_tokenizer", {{"type", "ByteLevel"}}},
                      {"added_tokens", {{{"id", 257}, {"content", "<|endoftext|>"}, {"special", true}}}}};
  const auto tok = BPETokenizer::from_tokenizer_json_bytes(j.dump());
  EXPECT_EQ(tok.encode("ab<|endoftext|>", xgrad::text::Special::all), (Ids{256, 257}));
  // Merges as pairs (tokenizers 0.20 and later).
  j["model"]["merges"] = nlohmann::json::array({nlohmann::json::array({"a", "b"})});
  EXPECT_EQ(BPETokenizer::from_tokenizer_json_bytes(j.dump()).merges(), tok.merges());
}

TEST(BPEFiles, InMemoryConstructorChecksItsInput) {
  std::vector<std::string> bytes(xgrad::text::bytes_to_unicode());
  auto with = [&](std::vector<std::string> extra) {
    auto t = bytes;
    t.insert(t.end(), extra.begin(), extra.end());
    return t;
  };
  const auto message = [](const std::function<void()>& f) { return thrown<std::invalid_argument>(f); };
  EXPECT_NE(message([&] { BPETokenizer(with({"a"}), {}); }).find("BPETokenizer: the token 'a' appears twice"),
            std::string::npos);
  EXPECT_NE(message([&] { BPETokenizer(with({""}), {}); }).find("the token of id 256 is empty"), std::string::npos);
  EXPECT_NE(message([&] {
              BPETokenizer(with({"ab"}), {{"a", "c"}});
            }).find("merge 1 ('a c'): its result 'ac'"),
            std::string::npos);
  EXPECT_NE(message([&] { BPETokenizer(with({"x y"}), {}); }).find("outside GPT-2's byte alphabet"), std::string::npos);
  EXPECT_NE(message([&] { BPETokenizer(bytes, {}, {"<s>"}); }).find("the special token '<s>' is not in the vocabulary"),
            std::string::npos);
  EXPECT_NE(message([&] {
              BPETokenizer(with({"ab"}), {{"a", "b"}}, {"ab"});
            }).find("its result 'ab' is a special token"),
            std::string::npos);
  EXPECT_NE(
      message([&] { BPETokenizer(std::vector<std::string>(bytes.begin(), bytes.end() - 1), {}); }).find("has no token"),
      std::string::npos);
}

}  // namespace
