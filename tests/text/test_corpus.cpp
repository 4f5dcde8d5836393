// The corpus: a file's lines read strictly as UTF-8 in chunks (errors name the file, the byte
// offset and the line), the seeded held-out split, tokenizers trained on the training lines only,
// and both parts tokenized once into token files that decode back to the text.
#include <gtest/gtest.h>

#include <xgrad/data/token_file.hpp>
#include <xgrad/text/corpus.hpp>
#include <xgrad/text/utf8.hpp>

#include "text_util.hpp"

namespace {

using xgrad::testing::TempFolder;
using xgrad::testing::thrown;
using xgrad::testing::write_file;
namespace text = xgrad::text;

std::vector<std::string> collect(const text::LineSource& lines) {
  std::vector<std::string> out;
  lines([&](std::string_view line) { out.emplace_back(line); });
  return out;
}

TEST(Corpus, ReadsTheLinesOfAFile) {
  TempFolder dir;
  write_file(dir / "a.txt", "one\r\ntwo\n\nthrée");
  EXPECT_EQ(collect(text::utf8_file_lines(dir / "a.txt")), (std::vector<std::string>{"one", "two", "", "thrée"}));
  write_file(dir / "b.txt", "one\n");
  EXPECT_EQ(collect(text::utf8_file_lines(dir / "b.txt")), (std::vector<std::string>{"one"}));
  write_file(dir / "empty.txt", "");
  EXPECT_TRUE(collect(text::utf8_file_lines(dir / "empty.txt")).empty());
  // Lines longer than the 1 MiB chunk, and lines across chunk boundaries.
  std::string big(3u << 20, 'x');
  big[1u << 20] = '\n';
  big[(1u << 20) + 5] = '\n';
  write_file(dir / "big.txt", big);
  const auto lines = collect(text::utf8_file_lines(dir / "big.txt"));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].size(), 1u << 20);
  EXPECT_EQ(lines[1], "xxxx");
  EXPECT_EQ(lines[2].size(), (3u << 20) - (1u << 20) - 6);
}

TEST(Corpus, RefusesTextThatIsNotUtf8NamingTheFileOffsetAndLine) {
  TempFolder dir;
  std::string bytes;
  for (int i = 0; i < 50000; ++i) bytes += "line " + std::to_string(i) + "\n";  // past the first chunk
  const std::size_t at = bytes.size() + 3;
  bytes += "caf\xE9 au lait\n";
  write_file(dir / "latin1.txt", bytes);
  EXPECT_EQ(thrown<text::Utf8Error>([&] { collect(text::utf8_file_lines(dir / "latin1.txt")); }),
            dir / "latin1.txt" + " is not UTF-8: at byte offset " + std::to_string(at) +
                " (line 50001), the byte 0xE9 starts a 3-byte character but is followed by 0x20");
  EXPECT_NE(thrown<text::Utf8Error>([] {
              collect(text::utf8_lines({"ok", "b\xED\xA0\x80"}, "verses"));
            }).find("verses is not UTF-8: at byte offset 1 (line 2), the surrogate U+D800"),
            std::string::npos);
  EXPECT_NE(thrown<std::runtime_error>([&] { collect(text::utf8_file_lines(dir / "none.txt")); }).find("none.txt"),
            std::string::npos);
  EXPECT_NE(thrown<std::runtime_error>([] { collect(text::utf8_file_lines("/dev/zero")); }).find("character device"),
            std::string::npos);
}

TEST(Corpus, HoldsOutATenthOfTheLinesBySeed) {
  int held = 0, differ = 0;
  for (std::uint64_t i = 0; i < 10000; ++i) {
    held += text::is_held_out(i, 1337);
    differ += text::is_held_out(i, 1337) != text::is_held_out(i, 1338);
  }
  EXPECT_NEAR(held, 1000, 100);
  EXPECT_GT(differ, 1000);
  std::vector<std::string> lines;
  for (int i = 0; i < 100; ++i) lines.push_back("line " + std::to_string(i));
  const auto train = collect(text::training_lines(text::utf8_lines(lines, "lines"), 7));
  std::vector<std::string> expected;
  for (std::uint64_t i = 0; i < 100; ++i)
    if (!text::is_held_out(i, 7)) expected.push_back(lines[i]);
  EXPECT_EQ(train, expected);
}

// The two token files decode to the training and the held-out lines; a tokenizer learns from the
// training lines only.
TEST(Corpus, TokenizesBothPartsIntoTokenFiles) {
  TempFolder dir;
  std::vector<std::string> lines;
  for (int i = 0; i < 200; ++i) lines.push_back("in thé beginning " + std::to_string(i) + (i % 2 ? " ünï" : ""));
  const text::LineSource source = text::utf8_lines(lines, "lines");
  std::string train_text, held_text;
  for (std::uint64_t i = 0; i < lines.size(); ++i)
    (text::is_held_out(i, 5) ? held_text : train_text) += lines[i] + "\n";
  for (const char* kind : {"char", "bpe"}) {
    SCOPED_TRACE(kind);
    const text::Tokenizer tok = text::train_tokenizer(kind, 300, text::training_lines(source, 5));
    const auto corpus = text::tokenize_corpus(source, 5, tok, dir / "train.tok", dir / "held.tok");
    const xgrad::data::TokenFile train(dir / "train.tok"), held(dir / "held.tok");
    EXPECT_EQ(train.vocab_size(), tok.vocab_size());
    EXPECT_EQ(tok.decode(train.read(0, train.size())), train_text);
    EXPECT_EQ(tok.decode(held.read(0, held.size())), held_text);
    EXPECT_EQ(corpus.train.tokens, train.size());
    EXPECT_EQ(corpus.held.tokens, held.size());
    EXPECT_EQ(corpus.train.lines + corpus.held.lines, 200u);
    EXPECT_EQ(corpus.held.characters, xgrad::text::decode_utf8(held_text).size());
    EXPECT_EQ(corpus.held.skipped, 0u);
    if (std::string(kind) == "bpe")
      EXPECT_LT(corpus.train.tokens, corpus.train.characters);
    else
      EXPECT_EQ(corpus.train.tokens, corpus.train.characters);
  }
  // A held-out character the training lines never had: skipped by a character tokenizer, counted.
  const std::uint64_t held_index = [] {
    for (std::uint64_t i = 0;; ++i)
      if (text::is_held_out(i, 5)) return i;
  }();
  lines[held_index] = "QQ in";
  const text::LineSource changed = text::utf8_lines(lines, "lines");
  const text::Tokenizer tok = text::train_tokenizer("char", 0, text::training_lines(changed, 5));
  EXPECT_EQ(tok.as_char()->id(U'Q'), -1);
  EXPECT_EQ(text::tokenize_corpus(changed, 5, tok, dir / "t.tok", dir / "h.tok").held.skipped, 2u);
  // Text that is not UTF-8 keeps its own error (not wrapped), and no token file is written.
  EXPECT_NE(thrown<text::Utf8Error>([&] {
              text::tokenize_corpus(text::utf8_lines({"a", "b\xFF"}, "bad"), 5, tok, dir / "x.tok", dir / "y.tok");
            }).find("bad is not UTF-8: at byte offset 1 (line 2)"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir / "x.tok"));
  EXPECT_FALSE(std::filesystem::exists(dir / "y.tok"));
}

}  // namespace
