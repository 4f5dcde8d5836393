// The BPE trainer: the merges of a worked example by hand, those of a naive reference trainer
// (tests/fixtures/tokenizer/make_trainer_reference.py), determinism, round trips, saving and
// loading through GPT-2's file format, vocabulary sizes and bad options.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include <xgrad/text/bpe_trainer.hpp>

#include "text_util.hpp"

namespace {

using xgrad::testing::from_hex;
using xgrad::testing::read_file;
using xgrad::testing::TempFolder;
using xgrad::testing::thrown;
using xgrad::testing::tokenizer_fixture;
using xgrad::text::BPETokenizer;
using xgrad::text::BPETrainer;
using xgrad::text::BPETrainerOptions;
using xgrad::text::Merge;
using xgrad::text::train_bpe;
using Ids = std::vector<std::int64_t>;

// Wikipedia's example, one piece: "aaabdaaabac".
//   pairs: aa 4, ab 2, bd 1, da 1, ba 1, ac 1                  -> aa
//   aa a b d aa a b a c: (aa,a) 2, (a,b) 2, ...                 -> tie at 2: "a" < "aa", so (a, b)
//   aa ab d aa ab a c: (aa,ab) 2                                -> aaab
//   aaab d aaab a c: all 1; the smallest left token is "a"      -> (a, c)
TEST(BPETrainer, WorkedExampleByHand) {
  const auto tok = train_bpe({"aaabdaaabac"}, BPETrainerOptions(256 + 4 + 1));
  EXPECT_EQ(tok.merges(), (std::vector<Merge>{{"a", "a"}, {"a", "b"}, {"aa", "ab"}, {"a", "c"}}));
  EXPECT_EQ(tok.vocab_size(), 261u);
  EXPECT_EQ(tok.tokens()[256], "aa");
  EXPECT_EQ(tok.tokens()[258], "aaab");
  EXPECT_EQ(tok.tokens()[260], "<|endoftext|>");
  EXPECT_EQ(tok.encode("aaabdaaabac"), (Ids{258, tok.id("d"), 258, 259}));
  // min_frequency 3: only aa (4) is frequent enough.
  EXPECT_EQ(train_bpe({"aaabdaaabac"}, BPETrainerOptions(300).min_frequency(3)).merges(),
            (std::vector<Merge>{{"a", "a"}}));
}

TEST(BPETrainer, MatchesTheNaiveReference) {
  const auto cases = nlohmann::json::parse(read_file(tokenizer_fixture("trainer_reference.json")));
  ASSERT_EQ(cases.size(), 4u);
  for (const auto& c : cases) {
    std::vector<std::string> texts;
    for (const auto& hex : c["texts_hex"]) texts.push_back(from_hex(hex.get<std::string>()));
    const auto tok = train_bpe(texts, BPETrainerOptions(c["vocab_size"].get<std::size_t>())
                                          .min_frequency(c["min_frequency"].get<std::int64_t>())
                                          .special_tokens(c["special_tokens"].get<std::vector<std::string>>()));
    std::vector<Merge> merges;
    for (const auto& m : c["merges"]) merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    const std::string name = c["name"].get<std::string>();
    EXPECT_EQ(tok.merges(), merges) << name;
    EXPECT_EQ(tok.tokens(), c["tokens"].get<std::vector<std::string>>()) << name;
    for (const auto& text : texts) EXPECT_EQ(tok.decode(tok.encode(text)), text) << name;
  }
}

std::vector<std::string> kjv_like_lines() {
  std::vector<std::string> lines;
  const auto cases = nlohmann::json::parse(read_file(tokenizer_fixture("trainer_reference.json")));
  for (const auto& hex : cases[0]["texts_hex"]) lines.push_back(from_hex(hex.get<std::string>()));
  return lines;
}

TEST(BPETrainer, IsDeterministicWhateverTheOrderOfTheText) {
  auto lines = kjv_like_lines();
  const auto first = train_bpe(lines, BPETrainerOptions(700));
  std::mt19937 rng(3);
  for (int i = 0; i < 3; ++i) {
    std::shuffle(lines.begin(), lines.end(), rng);
    const auto again = train_bpe(lines, BPETrainerOptions(700));
    EXPECT_EQ(again.merges(), first.merges());
    EXPECT_EQ(again.tokens(), first.tokens());
  }
}

TEST(BPETrainer, TrainedTokenizerRoundTripsAndSavesAsGPT2Files) {
  const auto lines = kjv_like_lines();
  const auto tok = train_bpe(lines, BPETrainerOptions(512).special_tokens({"<|endoftext|>", "<|pad|>"}));
  ASSERT_EQ(tok.vocab_size(), 512u);
  std::string all;
  for (const auto& line : lines) all += line + "\n";
  const Ids ids = tok.encode(all);
  EXPECT_EQ(tok.decode(ids), all);
  EXPECT_LT(ids.size() * 2, all.size());  // subwords: well under one token a byte
  std::mt19937 rng(5);
  for (int i = 0; i < 200; ++i) {
    std::string s(rng() % 50, '\0');
    for (auto& c : s) c = static_cast<char>(rng() % 3 ? 'a' + rng() % 26 : rng() % 256);
    ASSERT_EQ(tok.decode(tok.encode(s)), s);
  }
  TempFolder dir;
  tok.save(dir.str());
  const auto loaded = BPETokenizer::load(dir.str());
  EXPECT_EQ(loaded.tokens(), tok.tokens());
  EXPECT_EQ(loaded.merges(), tok.merges());
  EXPECT_EQ(loaded.special_tokens(), tok.special_tokens());  // neither a byte nor a merge's result
  EXPECT_EQ(loaded.encode(all), ids);
  EXPECT_EQ(loaded.encode("x<|pad|>", xgrad::text::Special::all).back(), 511);
  EXPECT_EQ(read_file(dir / "vocab.bpe").substr(0, 14), "#version: 0.2\n");
}

TEST(BPETrainer, VocabularySizeLimits) {
  const auto lines = kjv_like_lines();
  // 256 bytes + 1 special: no merge at all.
  const auto bytes_only = train_bpe(lines, BPETrainerOptions(257));
  EXPECT_TRUE(bytes_only.merges().empty());
  EXPECT_EQ(bytes_only.encode("In the").size(), 6u);
  for (const std::size_t size : {258u, 300u, 1024u})
    EXPECT_EQ(train_bpe(lines, BPETrainerOptions(size)).vocab_size(), size);
  // More than the text can give: it stops when no pair is left.
  const auto small = train_bpe({"abcabc"}, BPETrainerOptions(100000).special_tokens({}));
  EXPECT_EQ(small.merges(), (std::vector<Merge>{{"a", "b"}, {"ab", "c"}, {"abc", "abc"}}));
  EXPECT_EQ(small.encode("abcabc"), (Ids{258}));
  // Nothing to learn from.
  EXPECT_EQ(train_bpe({}, BPETrainerOptions(1000)).vocab_size(), 257u);
  EXPECT_EQ(train_bpe({"", " ", "x"}, BPETrainerOptions(1000)).vocab_size(), 257u);
}

TEST(BPETrainer, BadOptionsAreRefused) {
  const auto message = [](BPETrainerOptions o) { return thrown<std::invalid_argument>([&] { BPETrainer t(o); }); };
  EXPECT_EQ(message(BPETrainerOptions(256)),
            "BPETrainer: vocab_size must be at least 257 (the 256 bytes and 1 special tokens) and at most 1073741824, "
            "got 256");
  EXPECT_NE(message(BPETrainerOptions(257).special_tokens({"<a>", "<b>"})).find("at least 258"), std::string::npos);
  EXPECT_NE(message(BPETrainerOptions(std::size_t{1} << 31)).find("at most"), std::string::npos);
  EXPECT_EQ(message(BPETrainerOptions(300).special_tokens({""})), "BPETrainer: a special token is empty");
  EXPECT_EQ(message(BPETrainerOptions(300).special_tokens({"<s>", "<s>"})),
            "BPETrainer: the special token '<s>' is given twice");
  EXPECT_EQ(message(BPETrainerOptions(300).special_tokens({"a"})),
            "BPETrainer: the special token 'a' is the token of a single byte");
  EXPECT_NE(message(BPETrainerOptions(300).special_tokens({"\xff"})).find("not valid UTF-8"), std::string::npos);
  EXPECT_EQ(message(BPETrainerOptions(300).special_tokens({"<s>"})), "(no exception)");
}

TEST(BPETrainer, NeverMergesIntoASpecialToken) {
  // "ab" is the most frequent pair but spells the special token "ab": it is skipped.
  const auto tok = train_bpe({"ab ab ab abc"}, BPETrainerOptions(300).special_tokens({"ab"}));
  for (const auto& [a, b] : tok.merges()) EXPECT_NE(a + b, "ab");
  EXPECT_EQ(tok.encode("ab"), (Ids{tok.id("a"), tok.id("b")}));
  EXPECT_EQ(tok.encode("ab", xgrad::text::Special::all), (Ids{tok.id("ab")}));
  EXPECT_EQ(tok.special_tokens().at("ab"), static_cast<std::int64_t>(tok.vocab_size()) - 1);
}

TEST(BPETrainer, AnyBytesTrain) {
  std::mt19937 rng(11);
  std::vector<std::string> texts;
  for (int i = 0; i < 50; ++i) {
    std::string s(rng() % 80, '\0');
    for (auto& c : s) c = static_cast<char>(rng() % 2 ? rng() % 256 : "ab \n\xff"[rng() % 5]);
    texts.push_back(s);
  }
  BPETrainer trainer(BPETrainerOptions(400));
  for (const auto& t : texts) trainer.add(t);
  EXPECT_FALSE(trainer.piece_counts().empty());
  const auto tok = trainer.train();
  for (const auto& t : texts) ASSERT_EQ(tok.decode(tok.encode(t)), t);
}

}  // namespace
