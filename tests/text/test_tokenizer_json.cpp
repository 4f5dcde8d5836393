// HFTokenizer (tokenizer_json.hpp) against Hugging Face's tokenizers library: the 214 strings of
// tests/fixtures/tokenizers/{bytelevel-llama3,spm-llama2}/cases.json, whose ids, tokens and
// decodings the library itself wrote (tests/fixtures/tokenizers/README.md); the Unicode
// normalizers; and files that must be refused by name.
#include <gtest/gtest.h>

#include <thread>

#include <nlohmann/json.hpp>

#include <xgrad/serialize/format_error.hpp>
#include <xgrad/text/tokenizer.hpp>
#include <xgrad/text/tokenizer_json.hpp>
#include <xgrad/text/utf8.hpp>

#include "text_util.hpp"

namespace {

using xgrad::FormatError;
using xgrad::testing::thrown;
using xgrad::text::HFTokenizer;
using xgrad::text::Tokenizer;
using json = nlohmann::json;

std::string fixture(const std::string& name) { return std::string(XGRAD_FIXTURES_DIR) + "/tokenizers/" + name; }

std::vector<std::int64_t> ids_of(const json& list) { return list.get<std::vector<std::int64_t>>(); }

// Every case of one fixture folder (`count` of them), each field checked.
void check_fixture(const std::string& folder, std::size_t count = 214) {
  const HFTokenizer tok = HFTokenizer::from_file(fixture(folder + "/tokenizer.json"));
  const json cases = json::parse(xgrad::testing::read_file(fixture(folder + "/cases.json")));
  EXPECT_EQ(tok.vocab_size(), cases["vocab_size_with_added"].get<std::size_t>());
  ASSERT_EQ(cases["cases"].size(), count);
  for (const json& c : cases["cases"]) {
    const std::string text = c["text"];
    SCOPED_TRACE(folder + ": " + c["text"].dump());
    const auto ids = ids_of(c["ids"]), with_special = ids_of(c["ids_with_special"]);
    ASSERT_EQ(tok.encode(text, false), ids);
    EXPECT_EQ(tok.encode(text, true), with_special);
    EXPECT_EQ(tok.tokenize(text), c["tokens"].get<std::vector<std::string>>());
    EXPECT_EQ(tok.decode(ids), c["decoded"].get<std::string>());
    EXPECT_EQ(tok.decode(with_special, false), c["decoded_with_special"].get<std::string>());
    EXPECT_EQ(tok.decode(with_special, true), c["decoded_with_special_skip"].get<std::string>());
  }
}

TEST(HFTokenizer, ByteLevelLlama3MatchesHuggingFace) { check_fixture("bytelevel-llama3"); }

TEST(HFTokenizer, SentencePieceLlama2MatchesHuggingFace) { check_fixture("spm-llama2"); }

// Added tokens with lstrip, rstrip, single_word and normalized (make_added_options.js): 65 strings
// where each matters, over both schemas (in the SentencePiece one, normalized tokens are matched
// after Prepend and Replace, so "▁Hello" is the token and spaces are "▁", not white space).
TEST(HFTokenizer, AddedTokenOptionsByteLevelMatchHuggingFace) { check_fixture("added-options-bytelevel", 65); }

TEST(HFTokenizer, AddedTokenOptionsSentencePieceMatchHuggingFace) { check_fixture("added-options-spm", 65); }

// Byte-level BPE is lossless for any UTF-8; the SentencePiece-style one is where the library's
// decoding is (its Strip removes the one space the normalizer prepends, so text that starts with
// a space, or holds special-token text, comes back changed).
TEST(HFTokenizer, DecodeOfEncodeIsTheText) {
  const HFTokenizer llama3 = HFTokenizer::from_file(fixture("bytelevel-llama3/tokenizer.json"));
  const HFTokenizer llama2 = HFTokenizer::from_file(fixture("spm-llama2/tokenizer.json"));
  const json cases = json::parse(xgrad::testing::read_file(fixture("spm-llama2/cases.json")));
  std::size_t lossless_spm = 0;
  for (const json& c : cases["cases"]) {
    const std::string text = c["text"];
    EXPECT_EQ(llama3.decode(llama3.encode(text, false)), text) << c["text"].dump();
    if (c["decoded"] == c["text"]) {
      EXPECT_EQ(llama2.decode(llama2.encode(text, false)), text) << c["text"].dump();
      ++lossless_spm;
    }
  }
  EXPECT_GT(lossless_spm, 150u);
  const std::string odd = "\x01\x7f e\xCC\x81 \xF4\x8F\xBF\xBF \xE2\x96\x81";
  EXPECT_EQ(llama3.decode(llama3.encode(odd, true), true), odd);
  const std::string spm_odd = odd.substr(0, odd.size() - 3);  // a literal "▁" comes back as a space
  EXPECT_EQ(llama2.decode(llama2.encode("x" + spm_odd, true), true), "x" + spm_odd);
}

TEST(HFTokenizer, NamesAndSpecialTokens) {
  const HFTokenizer tok = HFTokenizer::from_file(fixture("bytelevel-llama3/tokenizer.json"));
  EXPECT_EQ(tok.bos_token_id(), 776);
  EXPECT_EQ(tok.eos_token_id(), -1);
  EXPECT_EQ(tok.token_to_id("<|eot_id|>"), 781);
  EXPECT_EQ(tok.token_to_id("\xC4\xA0"), 220);  // "Ġ"
  EXPECT_EQ(tok.token_to_id("no such token"), -1);
  EXPECT_EQ(tok.id_to_token(781), "<|eot_id|>");
  EXPECT_TRUE(tok.is_special(776));
  EXPECT_FALSE(tok.is_special(220));
  const HFTokenizer spm = HFTokenizer::from_file(fixture("spm-llama2/tokenizer.json"));
  EXPECT_EQ(spm.bos_token_id(), 1);
  // "▁" then the emoji's four bytes (byte_fallback), each its <0xNN> token.
  const std::vector<std::int64_t> emoji{spm.token_to_id("\xE2\x96\x81"), spm.token_to_id("<0xF0>"),
                                        spm.token_to_id("<0x9F>"), spm.token_to_id("<0x98>"),
                                        spm.token_to_id("<0x80>")};
  EXPECT_EQ(spm.encode("\xF0\x9F\x98\x80", false), emoji);
  EXPECT_EQ(spm.decode(emoji), "\xF0\x9F\x98\x80");
}

TEST(HFTokenizer, RefusesIdsWithoutTokenAndTextThatIsNotUtf8) {
  const HFTokenizer tok = HFTokenizer::from_file(fixture("bytelevel-llama3/tokenizer.json"));
  EXPECT_NE(thrown<std::invalid_argument>([&] {
              tok.decode({220, 782});
            }).find("the id 782 at position 1"),
            std::string::npos);
  EXPECT_NE(thrown<std::invalid_argument>([&] { tok.decode({-1}); }).find("the id -1 at position 0"),
            std::string::npos);
  EXPECT_THROW(tok.id_to_token(100000), std::invalid_argument);
  EXPECT_NE(thrown<xgrad::text::Utf8Error>([&] { tok.encode("ok \xff"); }).find("byte offset 3"), std::string::npos);
}

// One tokenizer (one cache) on four threads gives each thread the ids one thread alone gets.
TEST(HFTokenizer, EncodesOnSeveralThreadsAtOnce) {
  const HFTokenizer tok = HFTokenizer::from_file(fixture("bytelevel-llama3/tokenizer.json"));
  const json cases = json::parse(xgrad::testing::read_file(fixture("bytelevel-llama3/cases.json")));
  std::vector<std::string> texts;
  for (const json& c : cases["cases"]) texts.push_back(c["text"]);
  std::vector<std::vector<std::int64_t>> results(4);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < results.size(); ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round)
        for (std::size_t i = 0; i < texts.size(); ++i) {
          const auto ids = tok.encode(texts[(i + 37 * t) % texts.size()], false);
          if (round == 0) results[t].insert(results[t].end(), ids.begin(), ids.end());
        }
    });
  for (auto& thread : threads) thread.join();
  for (std::size_t t = 0; t < results.size(); ++t) {
    std::vector<std::int64_t> expected;
    for (std::size_t i = 0; i < texts.size(); ++i) {
      const auto ids = ids_of(cases["cases"][(i + 37 * t) % texts.size()]["ids"]);
      expected.insert(expected.end(), ids.begin(), ids.end());
    }
    EXPECT_EQ(results[t], expected) << "thread " << t;
  }
}

// ---------------------------------------------------------------------------------------------
// Small files written here

// A byte-free character-level BPE over `chars` with merges "a b" -> "ab", and the given steps.
std::string small_json(const std::string& normalizer, const std::string& pre_tokenizer = "null",
                       const std::string& model_extra = "", const std::string& decoder = "null") {
  return R"({"added_tokens": [], "normalizer": )" + normalizer + R"(, "pre_tokenizer": )" + pre_tokenizer +
         R"(, "post_processor": null, "decoder": )" + decoder + R"(, "model": {"type": "BPE", )" + model_extra +
         R"("unk_token": "?", "vocab": {"?": 0, "a": 1, "b": 2, "ab": 3, "é": 4, " ": 5, "fi": 6, "e": 7, "\u0301": 8,)"
         R"( "A": 9, "x": 10, "f": 11, "i": 12}, "merges": ["a b", "f i"]}})";
}

TEST(HFTokenizer, UnicodeNormalizersComeFromUtf8proc) {
  const std::string precomposed = "\xC3\xA9", decomposed = "e\xCC\x81", ligature = "\xEF\xAC\x81";  // é, e+◌́, ﬁ
  const HFTokenizer nfc = HFTokenizer::from_json(small_json(R"({"type": "NFC"})"));
  EXPECT_EQ(nfc.encode(decomposed, false), (std::vector<std::int64_t>{4}));
  EXPECT_EQ(nfc.encode(precomposed, false), nfc.encode(decomposed, false));
  EXPECT_EQ(nfc.encode(ligature, false), (std::vector<std::int64_t>{0}));  // NFC keeps ﬁ: unknown
  const HFTokenizer nfkc = HFTokenizer::from_json(small_json(R"({"type": "NFKC"})"));
  EXPECT_EQ(nfkc.encode(ligature, false), (std::vector<std::int64_t>{6}));        // NFKC: "fi"
  EXPECT_EQ(nfkc.encode("\xEF\xBC\xA1", false), (std::vector<std::int64_t>{9}));  // fullwidth Ａ -> A
  const HFTokenizer nfd = HFTokenizer::from_json(small_json(R"({"type": "NFD"})"));
  EXPECT_EQ(nfd.encode(precomposed, false), (std::vector<std::int64_t>{7, 8}));
  const HFTokenizer none = HFTokenizer::from_json(small_json("null"));
  EXPECT_EQ(none.encode(decomposed, false), (std::vector<std::int64_t>{7, 8}));
  EXPECT_EQ(xgrad::text::normalize_unicode(std::string("a\0b", 3), xgrad::text::NormalizationForm::NFC),
            std::string("a\0b", 3));
}

// An added token with normalized: true is found in the normalized text (its own content normalized
// too); with normalized: false, in the raw text only.
TEST(HFTokenizer, NormalizedAddedTokensMatchAfterTheNormalizer) {
  auto with_added = [](bool normalized) {
    std::string text = small_json(R"({"type": "NFC"})");
    const std::string added = R"("added_tokens": [{"id": 13, "content": "xe\u0301", "special": false, "normalized": )" +
                              std::string(normalized ? "true" : "false") + "}]";
    return HFTokenizer::from_json(text.replace(text.find(R"("added_tokens": [])"), 18, added));
  };
  const std::string decomposed =
      "axe\xCC\x81"
      "b";  // a x e+◌́ b
  // normalized: the content "xe◌́" becomes "xé" and is found in the NFC text.
  EXPECT_EQ(with_added(true).encode(decomposed, false), (std::vector<std::int64_t>{1, 13, 2}));
  EXPECT_EQ(with_added(true).encode("ax\xC3\xA9"
                                    "b",
                                    false),
            (std::vector<std::int64_t>{1, 13, 2}));
  // not normalized: only the raw "xe◌́" matches, never the precomposed "xé".
  EXPECT_EQ(with_added(false).encode(decomposed, false), (std::vector<std::int64_t>{1, 13, 2}));
  EXPECT_EQ(with_added(false).encode("ax\xC3\xA9"
                                     "b",
                                     false),
            (std::vector<std::int64_t>{1, 10, 4, 2}));
  EXPECT_EQ(with_added(true).token_to_id("xe\xCC\x81"), 13);
  // Decoded in its normalized form, as the library's simple_id_to_token (its normalized_cache).
  EXPECT_EQ(with_added(true).id_to_token(13), "x\xC3\xA9");
  EXPECT_EQ(with_added(false).id_to_token(13), "xe\xCC\x81");
  EXPECT_FALSE(with_added(true).is_special(13));
}

// Each option on a small file: lstrip and rstrip take the white space (Unicode's, U+3000 too) on
// their side, never what an earlier token took; single_word passes over a match that a word
// character (letters, digits, _, combining marks) touches, and the search goes on after it.
TEST(HFTokenizer, AddedTokenOptionsStripAndSingleWord) {
  std::string text = small_json("null");
  const std::string added = R"("added_tokens": [{"id": 13, "content": "<m>", "lstrip": true, "special": true},)"
                            R"( {"id": 14, "content": "<r>", "rstrip": true, "special": true},)"
                            R"( {"id": 15, "content": "ba", "single_word": true, "special": true}])";
  const HFTokenizer tok = HFTokenizer::from_json(text.replace(text.find(R"("added_tokens": [])"), 18, added));
  using Ids = std::vector<std::int64_t>;
  EXPECT_EQ(tok.encode("a <m>", false), (Ids{1, 13}));  // " " goes with <m>
  EXPECT_EQ(tok.tokenize("a  <m>"), (std::vector<std::string>{"a", "  <m>"}));
  EXPECT_EQ(tok.encode("a\xE3\x80\x80<m>b", false), (Ids{1, 13, 2}));  // U+3000 is white space
  EXPECT_EQ(tok.encode("<m> b", false), (Ids{13, 5, 2}));              // not the space after
  EXPECT_EQ(tok.encode("a<r>  b", false), (Ids{1, 14, 2}));
  EXPECT_EQ(tok.encode("<r> a", false), (Ids{14, 1}));
  EXPECT_EQ(tok.tokenize("<r> <m>"), (std::vector<std::string>{"<r> ", "<m>"}));  // the space went to <r>
  EXPECT_EQ(tok.encode("ba", false), (Ids{15}));
  EXPECT_EQ(tok.encode("a ba b", false), (Ids{1, 5, 15, 5, 2}));
  EXPECT_EQ(tok.encode("a<ba>b", false), (Ids{1, 0, 15, 0, 2}));  // '<' '>' are not word characters
  EXPECT_EQ(tok.encode("aba", false), (Ids{3, 1}));               // "ba" touches 'a': the model's a b a
  EXPECT_EQ(tok.encode("ba_", false), (Ids{2, 1, 0}));
  EXPECT_EQ(tok.encode("a\xCC\x81"
                       "ba",
                       false),
            (Ids{1, 8, 2, 1}));                                    // a combining mark is a word character
  EXPECT_EQ(tok.encode("baba ba", false), (Ids{2, 3, 1, 5, 15}));  // the search goes on after a skipped match
}

TEST(HFTokenizer, UnknownCharactersFuseAndMetaspaceFirst) {
  const HFTokenizer fused = HFTokenizer::from_json(small_json("null", "null", R"("fuse_unk": true, )"));
  EXPECT_EQ(fused.encode("a\xE2\x82\xAC\xE2\x82\xAC"
                         "b",
                         false),
            (std::vector<std::int64_t>{1, 0, 2}));  // a€€b
  const HFTokenizer separate = HFTokenizer::from_json(small_json("null"));
  EXPECT_EQ(separate.encode("a\xE2\x82\xAC\xE2\x82\xAC"
                            "b",
                            false),
            (std::vector<std::int64_t>{1, 0, 0, 2}));
  // Metaspace with prepend_scheme "first": only the text's first piece gets the replacement, and
  // a space before each piece splits it (MergedWithNext).
  const std::string meta = R"({"type": "Metaspace", "replacement": "a", "prepend_scheme": "first", "split": true})";
  const HFTokenizer first = HFTokenizer::from_json(small_json("null", meta));
  EXPECT_EQ(first.encode("b b", false), (std::vector<std::int64_t>{3, 3}));  // "ab" "ab"
  EXPECT_EQ(first.tokenize("bb"), (std::vector<std::string>{"ab", "b"}));
}

// Replace steps that make the text grow without end (an empty match, a long content, many steps)
// are stopped at 64x + 1 KiB instead of exhausting memory.
TEST(HFTokenizer, RefusesNormalizersAndDecodersThatBlowUpTheText) {
  const std::string grow =
      R"({"type": "Replace", "pattern": {"Regex": ""}, "content": ")" + std::string(200, 'x') + "\"}";
  std::string steps = grow;
  for (int i = 0; i < 9; ++i) steps += ", " + grow;
  const HFTokenizer normalizer =
      HFTokenizer::from_json(small_json(R"({"type": "Sequence", "normalizers": [)" + steps + "]}"));
  EXPECT_NE(thrown<std::invalid_argument>([&] {
              normalizer.encode("ab");
            }).find("normalizer makes a text longer than 1152 bytes"),
            std::string::npos);
  const HFTokenizer decoder =
      HFTokenizer::from_json(small_json("null", "null", "", R"({"type": "Sequence", "decoders": [)" + steps + "]}"));
  EXPECT_NE(thrown<std::invalid_argument>([&] {
              decoder.decode({1, 2});
            }).find("decoder makes a text longer than"),
            std::string::npos);
  const HFTokenizer once =
      HFTokenizer::from_json(small_json(R"({"type": "Replace", "pattern": {"String": "b"}, "content": "ab"})"));
  EXPECT_EQ(once.encode("bb", false), (std::vector<std::int64_t>{3, 3}));  // an ordinary Replace still works
}

// Each bad file is refused with the file's name, the key path and what was expected.
TEST(HFTokenizer, RefusesUnsupportedAndMalformedFilesByName) {
  const std::string good = small_json("null");
  auto refusal = [](const std::string& text) {
    return thrown<FormatError>([&] { HFTokenizer::from_json(text, "my/tokenizer.json"); });
  };
  auto expect_refused = [&](const std::string& text, const std::vector<std::string>& parts) {
    const std::string message = refusal(text);
    EXPECT_EQ(message.rfind("my/tokenizer.json: ", 0), 0u) << message;
    for (const std::string& part : parts)
      EXPECT_NE(message.find(part), std::string::npos) << message << "\n  lacks: " << part;
  };
  auto with = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const std::size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
  };
  expect_refused(small_json(R"({"type": "Lowercase"})"), {"normalizer.type", "'Lowercase'", "supported: null"});
  expect_refused(small_json(R"({"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Strip"}]})"),
                 {"normalizer.normalizers[1].type", "'Strip'"});
  expect_refused(small_json(R"(["NFC"])"), {"normalizer must be an object, got an array of 1 element"});
  expect_refused(small_json("null", R"({"type": "Whitespace"})"), {"pre_tokenizer.type", "'Whitespace'"});
  expect_refused(
      small_json("null", R"({"type": "Sequence", "pretokenizers": [{"type": "ByteLevel"}, {"type": "Digits"}]})"),
      {"pre_tokenizer.pretokenizers[1].type", "'Digits'", "supported: null, Sequence, Split"});
  expect_refused(small_json("null", R"({"type": "Split", "pattern": {"Regex": "("}, "behavior": "Isolated"})"),
                 {"pre_tokenizer.pattern.Regex", "PCRE2"});
  expect_refused(small_json("null", R"({"type": "Split", "pattern": {"String": "a"}, "behavior": "Apart"})"),
                 {"pre_tokenizer.behavior", "Isolated", "'Apart'"});
  expect_refused(small_json("null", "null", "", R"({"type": "CTC"})"), {"decoder.type", "'CTC'"});
  expect_refused(
      small_json("null", "null", "", R"({"type": "Sequence", "decoders": [{"type": "Fuse"}, {"type": "WordPiece"}]})"),
      {"decoder.decoders[1].type", "'WordPiece'", "supported: null, Sequence"});
  expect_refused(with(R"("type": "BPE")", R"("type": "WordPiece")"), {"model.type", "'WordPiece'", "only \"BPE\""});
  expect_refused(with(R"("type": "BPE")", R"("type": "Unigram")"), {"model.type", "'Unigram'"});
  expect_refused(with(R"("type": "BPE")", R"("type": "WordLevel")"), {"model.type", "'WordLevel'", "only \"BPE\""});
  expect_refused(with(R"("merges": ["a b")", R"("merges": ["a c")"), {"model.merges[0]", "'c'", "not in model.vocab"});
  expect_refused(with(R"("merges": ["a b")", R"("merges": ["b a")"), {"model.merges[0]", "the result 'ba'"});
  expect_refused(with(R"("merges": ["a b")", R"("merges": [["a", 1])"), {"model.merges[0] must be"});
  expect_refused(with(R"("merges": ["a b")", R"("merges": ["a  b")"), {"model.merges[0]", "one space"});
  expect_refused(with(R"("type": "BPE", )", R"("type": "BPE", "dropout": 0.1, )"), {"model.dropout", "not supported"});
  expect_refused(with(R"("type": "BPE", )", R"("type": "BPE", "continuing_subword_prefix": "##", )"),
                 {"model.continuing_subword_prefix", "\"##\""});
  expect_refused(with(R"("a": 1,)", R"("a": 5,)"), {"model.vocab", "the id 5"});
  expect_refused(with(R"("a": 1,)", R"("a": 1073741000,)"), {"model.vocab['a'] must be an integer in [0, "});
  expect_refused(with(R"("unk_token": "?")", R"("unk_token": "<unk>")"), {"model.unk_token", "'<unk>'"});
  expect_refused(with(R"("added_tokens": [])", R"("added_tokens": [{"id": 13, "content": "<s>", "lstrip": 1}])"),
                 {"added_tokens[0].lstrip must be true or false, got 1"});
  expect_refused(with(R"("added_tokens": [])", R"("added_tokens": [{"id": 3, "content": "<s>"}])"),
                 {"added_tokens[0].id", "'ab'"});
  expect_refused(with(R"("post_processor": null)", R"("post_processor": {"type": "BertProcessing"})"),
                 {"post_processor.type", "'BertProcessing'"});
  expect_refused(with(R"("post_processor": null)",
                      R"("post_processor": {"type": "Sequence", "processors": [{"type": "RobertaProcessing"}]})"),
                 {"post_processor.processors[0].type", "'RobertaProcessing'", "supported: null, Sequence"});
  expect_refused(with(R"("post_processor": null)",
                      R"("post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}},)"
                      R"( {"Sequence": {"id": "A"}}], "special_tokens": {}})"),
                 {"post_processor.special_tokens", "'<s>'", "single[0]"});
  expect_refused("[1, 2]", {"the top level must be an object, got an array of 2 elements"});
  expect_refused("{\"model\": ", {"not valid JSON"});
  expect_refused(std::string(100000, '[') + std::string(100000, ']'), {"nests deeper than 64"});
  expect_refused(R"({"model": {"type": "BPE", "vocab": [], "merges": []}})", {"model.vocab must be an object"});
  expect_refused(R"({"model": {"type": "BPE", "vocab": {}, "merges": []}})", {"model.vocab", "at least one token"});
  EXPECT_NE(thrown<std::runtime_error>([] {
              HFTokenizer::from_file(fixture("no/such/tokenizer.json"));
            }).find("no/such/tokenizer.json"),
            std::string::npos);
  HFTokenizer::from_json(good);  // the base file itself is fine
}

// Tokenizer (tokenizer.hpp), which the programs take, reads any BPE tokenizer.json: GPT-2's
// byte-level form as BPETokenizer, the others as HFTokenizer (encode without BOS, as the library's
// add_special_tokens=false), and saves the latter back as the bytes it read.
TEST(HFTokenizer, TokenizerTakesAnyBpeTokenizerJson) {
  xgrad::testing::TempFolder dir;
  for (const std::string folder : {"bytelevel-llama3", "spm-llama2", "added-options-spm"}) {
    SCOPED_TRACE(folder);
    const std::string path = fixture(folder + "/tokenizer.json");
    const Tokenizer tok = Tokenizer::load(path);
    EXPECT_STREQ(tok.kind(), "hf");
    ASSERT_NE(tok.as_hf(), nullptr);
    EXPECT_EQ(tok.to_json(), xgrad::testing::read_file(path));
    tok.save(dir / "saved.json");
    const Tokenizer again = Tokenizer::load(dir / "saved.json");
    const json cases = json::parse(xgrad::testing::read_file(fixture(folder + "/cases.json")));
    EXPECT_EQ(tok.vocab_size(), cases["vocab_size_with_added"].get<std::size_t>());
    for (const json& c : cases["cases"]) {
      const std::string text = c["text"];
      std::size_t skipped = 0;
      ASSERT_EQ(again.encode(text, &skipped), ids_of(c["ids"])) << c["text"].dump();
      EXPECT_EQ(skipped, 0u);
      EXPECT_EQ(again.decode(ids_of(c["ids"])), c["decoded"].get<std::string>());
    }
  }
  // GPT-2's form stays a BPETokenizer; the same file with a template that adds BOS does not.
  json gpt2 = json::parse(xgrad::testing::gpt2().tokenizer_json());
  EXPECT_STREQ(Tokenizer::from_json(gpt2.dump()).kind(), "bpe");
  gpt2["post_processor"] = json::parse(R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "e"}},)"
                                       R"( {"Sequence": {"id": "A"}}], "special_tokens": {"e": {"ids": [50256]}}})");
  const Tokenizer templated = Tokenizer::from_json(gpt2.dump());
  EXPECT_STREQ(templated.kind(), "hf");
  EXPECT_EQ(templated.encode("Hello world"), (std::vector<std::int64_t>{15496, 995}));  // no BOS
  EXPECT_EQ(templated.as_hf()->encode("Hello world"), (std::vector<std::int64_t>{50256, 15496, 995}));
}

// What Tokenizer refuses names the file and the key path: another model type, and whatever
// HFTokenizer refuses.
TEST(HFTokenizer, TokenizerRefusesOtherModelsAndStepsByName) {
  auto refusal = [](const std::string& text) {
    return thrown<FormatError>([&] { Tokenizer::from_json(text, "my/tokenizer.json"); });
  };
  for (const char* type : {"WordPiece", "Unigram", "WordLevel"}) {
    std::string text = small_json("null");
    text.replace(text.find(R"("type": "BPE")"), 13, std::string(R"("type": ")") + type + '"');
    EXPECT_EQ(refusal(text), "my/tokenizer.json: model.type is '" + std::string(type) + "'; expected 'Char' or 'BPE'");
  }
  EXPECT_NE(refusal(small_json("null", R"({"type": "Sequence", "pretokenizers": [{"type": "Punctuation"}]})"))
                .find("my/tokenizer.json: pre_tokenizer.pretokenizers[0].type is 'Punctuation'"),
            std::string::npos);
  EXPECT_NE(refusal(small_json(R"({"type": "Lowercase"})")).find("my/tokenizer.json: normalizer.type is 'Lowercase'"),
            std::string::npos);
  EXPECT_NE(
      refusal(small_json("null", "null", "", R"({"type": "CTC"})")).find("my/tokenizer.json: decoder.type is 'CTC'"),
      std::string::npos);
}

}  // namespace
