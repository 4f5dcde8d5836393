// GPT-2's tokenizer against OpenAI's encoder.py and the npm package gpt-3-encoder on the corpus of
// tests/fixtures/tokenizer (README.md there), decode round trips, special tokens, the
// pre-tokenizer's pieces, and the merge loop against encoder.py's loop written literally.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <set>

#include <xgrad/text/bpe.hpp>
#include <xgrad/text/pretokenizer.hpp>

#include "text_util.hpp"

namespace {

using xgrad::testing::corpus;
using xgrad::testing::gpt2;
using xgrad::testing::read_file;
using xgrad::testing::thrown;
using xgrad::testing::tokenizer_fixture;
using Ids = std::vector<std::int64_t>;

std::map<std::string, Ids> reference_ids(const std::string& file) {
  std::map<std::string, Ids> out;
  const auto json = nlohmann::json::parse(read_file(tokenizer_fixture(file)));
  for (auto it = json.begin(); it != json.end(); ++it) out[it.key()] = it.value().get<Ids>();
  return out;
}

// The cases where gpt-3-encoder is not GPT-2: JavaScript's \s has U+FEFF and lacks U+0085.
const std::set<std::string> kNpmDiverges = {"nel_u0085", "bom_ufeff"};

TEST(GPT2Tokenizer, KnownIds) {
  EXPECT_EQ(gpt2().encode("Hello world"), (Ids{15496, 995}));
  EXPECT_EQ(gpt2().vocab_size(), 50257u);
  EXPECT_EQ(gpt2().merges().size(), 50000u);
  EXPECT_EQ(gpt2().special_tokens(), (std::map<std::string, std::int64_t>{{"<|endoftext|>", 50256}}));
  EXPECT_TRUE(gpt2().encode("").empty());
}

TEST(GPT2Tokenizer, MatchesEncoderPyOnTheCorpus) {
  const auto expected = reference_ids("gpt2_ids.json");
  ASSERT_EQ(expected.size(), corpus().size());
  for (const auto& [name, bytes] : corpus()) {
    ASSERT_TRUE(expected.count(name)) << name;
    EXPECT_EQ(gpt2().encode(bytes), expected.at(name)) << name;
  }
}

TEST(GPT2Tokenizer, MatchesGpt3EncoderOnTheValidUtf8Corpus) {
  const auto npm = reference_ids("npm_ids.json");
  const auto python = reference_ids("gpt2_ids.json");
  std::size_t compared = 0;
  for (const auto& [name, bytes] : corpus()) {
    if (!xgrad::text::is_valid_utf8(bytes)) {
      EXPECT_FALSE(npm.count(name)) << name;  // JavaScript strings cannot hold these bytes
      continue;
    }
    ASSERT_TRUE(npm.count(name)) << name;
    if (kNpmDiverges.count(name)) {
      EXPECT_NE(npm.at(name), python.at(name)) << name << ": the documented divergence is gone";
      continue;
    }
    EXPECT_EQ(gpt2().encode(bytes), npm.at(name)) << name;
    ++compared;
  }
  EXPECT_GE(compared, 180u);
}

TEST(GPT2Tokenizer, DecodeRoundTripsTheCorpus) {
  for (const auto& [name, bytes] : corpus()) EXPECT_EQ(gpt2().decode(gpt2().encode(bytes)), bytes) << name;
}

// Any bytes: random strings over alphabets that mix ASCII, UTF-8 sequences, their fragments and
// bytes that never occur in UTF-8.
TEST(GPT2Tokenizer, RoundTripsRandomBytes) {
  std::mt19937 rng(30);
  const std::vector<std::string> atoms = {"a",
                                          "Z",
                                          "0",
                                          "7",
                                          " ",
                                          "  ",
                                          "\n",
                                          "\t",
                                          "'",
                                          "'s",
                                          "!",
                                          ".",
                                          ",",
                                          "\xc3\xa9",
                                          "\xe6\x97\xa5",
                                          "\xf0\x9f\x98\x80",
                                          "\xc3",
                                          "\xe6\x97",
                                          "\xf0\x9f",
                                          "\x80",
                                          "\xff",
                                          "\xfe",
                                          "\xc0\x80",
                                          "\xed\xa0\x80",
                                          "\xc2\x85",
                                          "\xef\xbb\xbf",
                                          std::string(1, '\0'),
                                          "<|endoftext|>"};
  for (int i = 0; i < 300; ++i) {
    std::string s;
    const int n = static_cast<int>(rng() % 40);
    for (int j = 0; j < n; ++j) {
      if (rng() % 4 == 0)
        s.push_back(static_cast<char>(rng() % 256));
      else
        s += atoms[rng() % atoms.size()];
    }
    const Ids ids = gpt2().encode(s);
    ASSERT_EQ(gpt2().decode(ids), s) << "case " << i;
    for (const auto id : ids) ASSERT_LT(id, 50256) << "ordinary encoding made a special token, case " << i;
    ASSERT_EQ(gpt2().decode(gpt2().encode(s, xgrad::text::Special::all)), s) << "case " << i;
  }
}

TEST(GPT2Tokenizer, SpecialTokens) {
  using xgrad::text::Special;
  const std::string text = "a<|endoftext|>b";
  // Ordinary text by default, as encoder.py, gpt-3-encoder and tiktoken's encode_ordinary.
  EXPECT_EQ(gpt2().encode(text), (Ids{64, 27, 91, 437, 1659, 5239, 91, 29, 65}));
  EXPECT_EQ(gpt2().encode(text, Special::all), (Ids{64, 50256, 65}));
  EXPECT_EQ(gpt2().encode(text, std::vector<std::string>{"<|endoftext|>"}), (Ids{64, 50256, 65}));
  EXPECT_EQ(gpt2().encode(text, std::vector<std::string>{}), gpt2().encode(text));
  EXPECT_EQ(gpt2().encode("<|endoftext|><|endoftext|>", Special::all), (Ids{50256, 50256}));
  EXPECT_EQ(gpt2().encode(" <|endoftext|> x", Special::all), (Ids{220, 50256, 2124}));
  EXPECT_EQ(gpt2().decode({64, 50256, 65}), text);
  EXPECT_NE(thrown([] {
              gpt2().encode("x", std::vector<std::string>{"<pad>"});
            }).find("BPETokenizer::encode: '<pad>' is not a special token"),
            std::string::npos);
}

TEST(GPT2Tokenizer, DecodeRefusesIdsOutsideTheVocabulary) {
  EXPECT_EQ(thrown<std::invalid_argument>([] {
              gpt2().decode({1, 50257});
            }),
            "BPETokenizer::decode: the id 50257 at position 1 is outside the vocabulary [0, 50257)");
  EXPECT_NE(thrown<std::invalid_argument>([] { gpt2().decode({-1}); }).find("the id -1 at position 0"),
            std::string::npos);
  EXPECT_EQ(gpt2().token(995), "\xc4\xa0world");  // "Ġworld"
  EXPECT_EQ(gpt2().token_bytes(995), " world");
  EXPECT_EQ(gpt2().id("\xc4\xa0world"), 995);
  EXPECT_EQ(gpt2().id("no such token"), -1);
  EXPECT_THROW(gpt2().token(50257), std::invalid_argument);
}

TEST(ByteAlphabet, IsGPT2s) {
  const auto& chars = xgrad::text::bytes_to_unicode();
  ASSERT_EQ(chars.size(), 256u);
  EXPECT_EQ(std::set<std::string>(chars.begin(), chars.end()).size(), 256u);
  EXPECT_EQ(chars[' '], "\xc4\xa0");   // Ġ U+0120
  EXPECT_EQ(chars['\n'], "\xc4\x8a");  // Ċ U+010A
  EXPECT_EQ(chars['!'], "!");
  EXPECT_EQ(chars[0xAD], "\xc5\x83");  // the soft hyphen is the last byte moved: U+0143
  EXPECT_EQ(chars[0xFF], "\xc3\xbf");  // ÿ
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(xgrad::text::bytes_from_unicode(xgrad::text::unicode_from_bytes(all)), all);
  EXPECT_THROW(xgrad::text::bytes_from_unicode("\xe4\xb8\xad"), std::invalid_argument);  // 中
  EXPECT_THROW(xgrad::text::bytes_from_unicode(" "), std::invalid_argument);             // space is Ġ
  EXPECT_THROW(xgrad::text::bytes_from_unicode("\xc4"), std::invalid_argument);          // truncated
}

std::vector<std::string> split(const std::string& text) {
  static const xgrad::text::Pretokenizer p;
  std::vector<std::string> out;
  for (const auto piece : p.split(text)) out.emplace_back(piece);
  return out;
}

using Pieces = std::vector<std::string>;

TEST(Pretokenizer, SplitsAsGPT2) {
  EXPECT_EQ(split("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(split("I'm here, they'll go"), (Pieces{"I", "'m", " here", ",", " they", "'ll", " go"}));
  EXPECT_EQ(split("I'M"), (Pieces{"I", "'", "M"}));      // case-sensitive contractions
  EXPECT_EQ(split("a   b"), (Pieces{"a", "  ", " b"}));  // \s+(?!\S): the last space joins the word
  EXPECT_EQ(split("a   "), (Pieces{"a", "   "}));
  EXPECT_EQ(split("x\n\n y"), (Pieces{"x", "\n\n", " y"}));
  EXPECT_EQ(split("abc123 4.5"), (Pieces{"abc", "123", " 4", ".", "5"}));
  EXPECT_EQ(split("?! ...hi"), (Pieces{"?!", " ...", "hi"}));
  EXPECT_EQ(split("caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac"), (Pieces{"caf\xc3\xa9", " \xe6\x97\xa5\xe6\x9c\xac"}));
  EXPECT_EQ(split("e\xcc\x81"), (Pieces{"e", "\xcc\x81"}));  // a combining mark is not a letter
  // U+0085 is White_Space (Python's regex, Hugging Face), unlike PCRE2's own \s under UCP.
  EXPECT_EQ(split("a \xc2\x85!"), (Pieces{"a", " ", "\xc2\x85", "!"}));
  EXPECT_EQ(split(""), Pieces{});
}

TEST(Pretokenizer, InvalidBytesAreOtherCharacters) {
  // As Python's surrogate escapes: an invalid byte is neither letter, number nor space.
  EXPECT_EQ(split(" \xff! x"), (Pieces{" \xff!", " x"}));
  EXPECT_EQ(split("ab\xff"
                  "cd"),
            (Pieces{"ab", "\xff", "cd"}));
  EXPECT_EQ(split("caf\xc3"), (Pieces{"caf", "\xc3"}));
  EXPECT_EQ(split("12\xe2\x82 x"), (Pieces{"12", "\xe2\x82", " x"}));
  EXPECT_EQ(split("\xed\xa0\x80"), (Pieces{"\xed\xa0\x80"}));          // an encoded surrogate: 3 invalid bytes
  EXPECT_EQ(split("\xee\x80\x80\xff"), (Pieces{"\xee\x80\x80\xff"}));  // U+E000 (private use) beside one
}

TEST(Pretokenizer, PiecesTileAnyInputAndStayFastOnLongRuns) {
  std::mt19937 rng(29);
  const xgrad::text::Pretokenizer p;
  for (int i = 0; i < 300; ++i) {
    std::string s(rng() % 64, '\0');
    for (auto& c : s) c = static_cast<char>(rng() % 4 == 0 ? ' ' : rng() % 256);
    std::string joined;
    for (const auto piece : p.split(s)) {
      ASSERT_FALSE(piece.empty());
      joined += piece;
    }
    ASSERT_EQ(joined, s);
  }
  // A megabyte in one piece: letters, spaces before a letter (the lookahead backtracks once),
  // digits, punctuation and invalid bytes; and 4 MB of alternating classes.
  const auto start = std::chrono::steady_clock::now();
  for (const std::string& s : {std::string(1 << 20, 'a'), std::string(1 << 20, ' ') + "x", std::string(1 << 20, '7'),
                               std::string(1 << 20, '!'), std::string(1 << 20, '\xff')}) {
    const auto pieces = p.split(s);
    std::size_t total = 0;
    for (const auto piece : pieces) total += piece.size();
    EXPECT_EQ(total, s.size());
    EXPECT_LE(pieces.size(), 2u);
  }
  std::string mixed;
  for (int i = 0; i < (1 << 20); ++i) mixed += "a 1!"[i % 4];
  EXPECT_EQ(p.split(mixed).size(), std::size_t{3} << 18);  // "a", " 1", "!" per period
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 20.0);
}

TEST(GPT2Tokenizer, EncodesLongPiecesInLinearithmicTime) {
  // One piece of 200,000 letters: encoder.py's loop is quadratic here; the heap is not.
  std::string s;
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) s.push_back(static_cast<char>('a' + rng() % 26));
  const auto start = std::chrono::steady_clock::now();
  const Ids ids = gpt2().encode(s);
  EXPECT_EQ(gpt2().decode(ids), s);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 20.0);
}

// encoder.py's bpe() written literally, over symbol ids.
std::vector<std::int32_t> literal_bpe(std::vector<std::int32_t> word,
                                      const std::map<std::pair<int, int>, std::pair<std::int64_t, int>>& ranks) {
  while (word.size() > 1) {
    std::int64_t best = -1;
    std::pair<int, int> bigram;
    for (std::size_t i = 0; i + 1 < word.size(); ++i) {
      const auto it = ranks.find({word[i], word[i + 1]});
      if (it != ranks.end() && (best < 0 || it->second.first < best)) {
        best = it->second.first;
        bigram = it->first;
      }
    }
    if (best < 0) break;
    std::vector<std::int32_t> next;
    for (std::size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == bigram.first && word[i + 1] == bigram.second) {
        next.push_back(ranks.at(bigram).second);
        i += 2;
      } else {
        next.push_back(word[i++]);
      }
    }
    word = next;
  }
  return word;
}

TEST(BpeMerge, MatchesEncoderPysLoopOnRandomMergeTables) {
  std::mt19937 rng(1);
  for (int table = 0; table < 40; ++table) {
    // Symbols 0-3 are "bytes"; each merge makes a new symbol; ranks are shuffled, so that a new
    // pair may outrank the one just merged (which GPT-2's own merges never do).
    std::map<std::pair<int, int>, std::pair<std::int64_t, int>> ranks;
    int symbols = 4;
    std::vector<std::int64_t> order(30);
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int64_t>(i);
    std::shuffle(order.begin(), order.end(), rng);
    for (std::size_t m = 0; m < order.size(); ++m) {
      const int a = static_cast<int>(rng() % symbols), b = static_cast<int>(rng() % symbols);
      if (ranks.emplace(std::make_pair(a, b), std::make_pair(order[m], symbols)).second) ++symbols;
    }
    const auto rank_of = [](const void* context, std::int32_t a, std::int32_t b) {
      const auto& r = *static_cast<const decltype(ranks)*>(context);
      const auto it = r.find({a, b});
      return it == r.end() ? xgrad::text::detail::MergeRule{-1, -1}
                           : xgrad::text::detail::MergeRule{it->second.first, it->second.second};
    };
    for (int w = 0; w < 50; ++w) {
      std::vector<std::int32_t> word(1 + rng() % 24);
      for (auto& s : word) s = static_cast<std::int32_t>(rng() % 4);
      ASSERT_EQ(xgrad::text::detail::bpe_merge(word, rank_of, &ranks), literal_bpe(word, ranks))
          << "table " << table << " word " << w;
    }
  }
}

}  // namespace
