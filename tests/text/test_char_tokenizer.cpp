// Strict UTF-8 (every kind of bad sequence named with its byte offset and line), the character
// tokenizer (encode, decode, unknown characters), and Tokenizer: one file for a character or a BPE
// tokenizer, saved and loaded back, bad files refused naming the file and the key.
#include <gtest/gtest.h>

#include <xgrad/text/bpe_trainer.hpp>
#include <xgrad/text/char_tokenizer.hpp>
#include <xgrad/text/tokenizer.hpp>
#include <xgrad/text/utf8.hpp>

#include "text_util.hpp"

namespace {

using xgrad::testing::TempFolder;
using xgrad::testing::thrown;
using xgrad::testing::write_file;
using xgrad::text::CharTokenizer;
using xgrad::text::CharTrainer;
using xgrad::text::Tokenizer;
using xgrad::text::Utf8Error;
using Ids = std::vector<std::int64_t>;

TEST(Utf8, DecodesAndEncodesEveryLength) {
  const std::string s = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80";  // a é € 😀
  EXPECT_EQ(xgrad::text::decode_utf8(s), (std::u32string{U'a', U'\u00E9', U'\u20AC', U'\U0001F600'}));
  EXPECT_EQ(xgrad::text::encode_utf8(xgrad::text::decode_utf8(s)), s);
  EXPECT_EQ(xgrad::text::check_utf8(s, "s"), 4u);
  EXPECT_NE(thrown([] { xgrad::text::encode_utf8(char32_t(0xD800)); }).find("surrogate U+D800"), std::string::npos);
  EXPECT_NE(thrown([] { xgrad::text::encode_utf8(char32_t(0x110000)); }).find("U+110000"), std::string::npos);
}

TEST(Utf8, RefusesEachBadSequenceNamingOffsetAndLine) {
  const auto error = [](const std::string& bytes) {
    return thrown<Utf8Error>([&] { xgrad::text::check_utf8(bytes, "f.txt"); });
  };
  EXPECT_EQ(error("ab\ncaf\xE9 au"),
            "f.txt is not UTF-8: at byte offset 6 (line 2), the byte 0xE9 starts a 3-byte character but is followed "
            "by 0x20");
  EXPECT_EQ(error("ab\xC0\xAF"),
            "f.txt is not UTF-8: at byte offset 2 (line 1), an overlong encoding of U+002F (0xC0 0xAF)");
  EXPECT_EQ(error("a\nb\xED\xA0\x80"),
            "f.txt is not UTF-8: at byte offset 3 (line 2), the surrogate U+D800 (0xED 0xA0 0x80), which is not a "
            "character");
  EXPECT_EQ(error("\xF4\x90\x80\x80"),
            "f.txt is not UTF-8: at byte offset 0 (line 1), U+110000 (0xF4 0x90 0x80 0x80), beyond the last code point "
            "U+10FFFF");
  EXPECT_EQ(error("x\x80"),
            "f.txt is not UTF-8: at byte offset 1 (line 1), the byte 0x80, a continuation byte with no character to "
            "continue");
  EXPECT_EQ(error("\xFF"), "f.txt is not UTF-8: at byte offset 0 (line 1), the byte 0xFF, which UTF-8 never uses");
  EXPECT_EQ(error("\xE2\x82"),
            "f.txt is not UTF-8: at byte offset 0 (line 1), the byte 0xE2 starts a 3-byte character but the text "
            "ends after 2");
  // A piece of a larger text: its offset and line are added.
  try {
    xgrad::text::check_utf8("ok\n\xFF", "big.txt", 1000, 7);
    FAIL() << "no exception";
  } catch (const Utf8Error& e) {
    EXPECT_EQ(e.offset(), 1003u);
    EXPECT_EQ(e.line(), 8u);
    EXPECT_NE(std::string(e.what()).find("at byte offset 1003 (line 8)"), std::string::npos) << e.what();
  }
}

TEST(CharTokenizer, TrainsEncodesAndDecodes) {
  CharTrainer trainer;
  trainer.add("héllo\n");
  trainer.add("wörld 😀\n");
  const CharTokenizer tok = trainer.train();
  EXPECT_EQ(tok.chars(), U"\n dhlorw\u00E9\u00F6\U0001F600");  // sorted by code point
  const Ids ids = tok.encode("wörld 😀");
  EXPECT_EQ(ids.size(), 7u);
  EXPECT_EQ(ids[0], tok.id(U'w'));
  EXPECT_EQ(ids[6], 10);
  EXPECT_EQ(tok.decode(ids), "wörld 😀");
  EXPECT_EQ(tok.id(U'z'), -1);
  EXPECT_EQ(thrown([&] { tok.encode("hlz"); }),
            "CharTokenizer: the character 'z' (U+007A) at byte offset 2 is not in the vocabulary of 11 characters");
  std::size_t skipped = 0;
  EXPECT_EQ(tok.encode("hézz", &skipped), (Ids{tok.id(U'h'), tok.id(U'\u00E9')}));
  EXPECT_EQ(skipped, 2u);
  EXPECT_NE(thrown([&] {
              tok.decode({0, 11});
            }).find("id 11 at position 1 is outside the vocabulary [0, 11)"),
            std::string::npos);
  EXPECT_NE(thrown<Utf8Error>([&] { tok.encode("h\xE9"); }).find("at byte offset 1"), std::string::npos);
}

TEST(CharTokenizer, RefusesBadVocabulariesAndTextThatIsNotUtf8) {
  EXPECT_NE(thrown([] { CharTokenizer(U"aba"); }).find("U+0061 is token 0 and token 2"), std::string::npos);
  EXPECT_NE(thrown([] { CharTokenizer(U""); }).find("at least one character"), std::string::npos);
  EXPECT_NE(thrown([] { CharTokenizer(std::u32string(1, char32_t(0xDC00))); }).find("U+DC00"), std::string::npos);
  EXPECT_NE(thrown([] { CharTrainer().train(); }).find("no character"), std::string::npos);
  CharTrainer trainer;
  trainer.add("ab");
  EXPECT_NE(thrown<Utf8Error>([&] { trainer.add("c\xC0\xAF"); }).find("overlong"), std::string::npos);
  EXPECT_EQ(trainer.train().chars(), U"ab");  // the refused text added nothing
}

TEST(Tokenizer, CharAndBpeRoundTripThroughTheirFile) {
  TempFolder dir;
  CharTrainer chars;
  chars.add("In the beginning \"God\" créa\n\t\\");
  const Tokenizer c = chars.train();
  EXPECT_STREQ(c.kind(), "char");
  c.save(dir / "c.json");
  const Tokenizer c2 = Tokenizer::load(dir / "c.json");
  ASSERT_TRUE(c2.is_char());
  EXPECT_EQ(c2.as_char()->chars(), c.as_char()->chars());
  EXPECT_EQ(c2.encode("God créa\n"), c.encode("God créa\n"));

  const Tokenizer b =
      xgrad::text::train_bpe({"in the beginning the the the", "then the end"}, xgrad::text::BPETrainerOptions(270));
  EXPECT_STREQ(b.kind(), "bpe");
  b.save(dir / "b.json");
  const Tokenizer b2 = Tokenizer::load(dir / "b.json");
  ASSERT_NE(b2.as_bpe(), nullptr);
  EXPECT_EQ(b2.as_bpe()->tokens(), b.as_bpe()->tokens());
  EXPECT_EQ(b2.as_bpe()->merges(), b.as_bpe()->merges());
  EXPECT_EQ(b2.as_bpe()->special_tokens(), b.as_bpe()->special_tokens());
  EXPECT_EQ(b2.encode("then the beginning"), b.encode("then the beginning"));
  EXPECT_EQ(b2.vocab_size(), 270u);
  EXPECT_EQ(thrown<xgrad::FormatError>([&] { CharTokenizer::load(dir / "b.json"); }),
            dir / "b.json" + ": model.type is 'BPE'; expected 'Char'");
  std::size_t skipped = 0;
  EXPECT_EQ(b2.decode(b2.encode("caf\xE9 \xFF", &skipped)), "caf\xE9 \xFF");  // BPE: any bytes, nothing skipped
  EXPECT_EQ(skipped, 0u);
  // GPT-2's own tokenizer, through tokenizer.json and back.
  const Tokenizer g = Tokenizer::from_json(xgrad::testing::gpt2().tokenizer_json());
  EXPECT_EQ(g.encode("Hello world"), (Ids{15496, 995}));
}

TEST(Tokenizer, RefusesBadFilesNamingTheFileAndKey) {
  TempFolder dir;
  const auto error = [&](const std::string& json) {
    write_file(dir / "t.json", json);
    return thrown<xgrad::FormatError>([&] { Tokenizer::load(dir / "t.json"); });
  };
  const std::string file = dir / "t.json";
  EXPECT_EQ(error("{\"model\": {\"type\": \"WordPiece\"}}"),
            file + ": model.type is 'WordPiece'; expected 'Char' or 'BPE'");
  EXPECT_NE(error("[1, 2").find(file + ": not valid JSON"), std::string::npos);
  EXPECT_NE(error("{\"vocab\": []}").find(file + ": expected a tokenizer file"), std::string::npos);
  EXPECT_EQ(error("{\"model\": {\"type\": \"Char\", \"vocab\": [\"a\", \"bc\"]}}"),
            file + ": model.vocab[1] must be one character, got \"bc\"");
  EXPECT_EQ(error("{\"model\": {\"type\": \"Char\", \"vocab\": [\"a\", 3]}}"),
            file + ": model.vocab[1] must be a string, got 3");
  EXPECT_NE(error("{\"model\": {\"type\": \"Char\", \"vocab\": [\"a\", \"a\"]}}").find(file + ": model.vocab: "),
            std::string::npos);
  EXPECT_NE(error("{\"model\": {\"type\": \"Char\"}}").find("model.vocab must be a non-empty list"), std::string::npos);
  EXPECT_NE(error("{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}").find(file), std::string::npos);
  EXPECT_NE(thrown<std::runtime_error>([&] { Tokenizer::load(dir / "missing.json"); }).find("missing.json"),
            std::string::npos);
  EXPECT_NE(thrown([] { xgrad::text::train_tokenizer("word", 10, [](const auto&) {}); }).find("kind 'word'"),
            std::string::npos);
}

}  // namespace
