// xgrad::data's token files: the streaming writer and the mapped reader (uint16 and uint32, with
// a header and headerless), every corrupt, truncated or forged file refused naming the file, files
// that are not regular files refused, and the window dataset: windows in range, reproducible per
// seed, resumed bit for bit from a DataLoader's state, and memory that does not grow with the
// corpus.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>

#include <xgrad/serialize/format_error.hpp>
#include <xgrad/xgrad.hpp>
#include "serialize_util.hpp"
#include "test_util.hpp"

namespace xgrad::data {
namespace {

using testing::error_of;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

// The message of the FormatError f throws (a test failure if it throws something else).
template <class F>
std::string format_error_of(F&& f) {
  try {
    f();
  } catch (const FormatError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a FormatError, got: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected a FormatError";
  return "(no exception)";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A header field rewritten, with the header's hash made to match again (a forged file).
std::string forge(std::string bytes, std::size_t offset, const void* value, std::size_t n) {
  std::memcpy(&bytes[offset], value, n);
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (std::size_t i = 0; i < 56; ++i) h = (h ^ static_cast<unsigned char>(bytes[i])) * 0x100000001b3ULL;
  std::memcpy(&bytes[56], &h, 8);
  return bytes;
}
template <class U>
std::string forge(const std::string& bytes, std::size_t offset, U value) {
  return forge(bytes, offset, &value, sizeof value);
}

std::vector<std::int64_t> pseudo_random_ids(std::size_t n, std::uint64_t vocab, std::uint64_t seed) {
  Generator g(seed);
  std::vector<std::int64_t> ids(n);
  for (auto& id : ids) id = static_cast<std::int64_t>(g.next_u64() % vocab);
  return ids;
}

TEST(TokenFile, RoundTripUInt16AndUInt32) {
  TempDir dir;
  for (const TokenDtype dtype : {TokenDtype::UInt16, TokenDtype::UInt32}) {
    const std::uint64_t max = dtype == TokenDtype::UInt16 ? 65535 : 4294967295ULL;
    // More ids than the writer's chunk, appended in pieces of every integer type, the extremes included.
    std::vector<std::int64_t> ids = pseudo_random_ids(100000, max + 1, 7);
    ids[0] = 0;
    ids[1] = static_cast<std::int64_t>(max);
    const std::string path = dir.file(std::string("ids.") + token_dtype_name(dtype));
    write_token_file(path, TokenFileOptions().dtype(dtype), [&](TokenFileWriter& out) {
      out.append(ids.data(), 3);
      std::vector<std::uint32_t> u32(ids.begin() + 3, ids.begin() + 40000);
      out.append(u32);
      EXPECT_EQ(out.count(), 40000u);
      for (std::size_t i = 40000; i < ids.size(); i += 9999)
        out.append(ids.data() + i, std::min<std::size_t>(9999, ids.size() - i));
    });
    EXPECT_EQ(read_bytes(path).size(), 64 + ids.size() * token_dtype_bytes(dtype));
    const TokenFile file(path);
    EXPECT_TRUE(file.has_header());
    EXPECT_EQ(file.dtype(), dtype);
    EXPECT_EQ(file.size(), ids.size());
    EXPECT_EQ(file.vocab_size(), 0u);
    EXPECT_EQ(file.read(0, ids.size()), ids);
    EXPECT_EQ(file.at(1), max);
    EXPECT_EQ(file.read(99990, 10), std::vector<std::int64_t>(ids.end() - 10, ids.end()));
    EXPECT_NO_THROW(file.verify());
    EXPECT_THROW(file.at(ids.size()), std::out_of_range);
    EXPECT_THROW(file.read(ids.size() - 5, 6), std::out_of_range);
    EXPECT_EQ(file.read(ids.size(), 0), std::vector<std::int64_t>{});
  }
  // The one-shot form, with a vocabulary recorded; no temporary file is left behind.
  const std::vector<std::int64_t> small{5, 0, 49999, 3};
  write_token_file(dir.file("small.tok"), small, TokenFileOptions().vocab_size(50000));
  const TokenFile file(dir.file("small.tok"));
  EXPECT_EQ(file.vocab_size(), 50000u);
  EXPECT_EQ(file.read(0, 4), small);
  EXPECT_EQ(dir.entries(), (std::set<std::string>{"ids.uint16", "ids.uint32", "small.tok"}));
  EXPECT_EQ(token_dtype_for(65536), TokenDtype::UInt16);
  EXPECT_EQ(token_dtype_for(65537), TokenDtype::UInt32);
}

TEST(TokenFile, EmptyFiles) {
  TempDir dir;
  write_token_file(dir.file("empty.tok"), std::vector<std::int64_t>{});
  const auto file = std::make_shared<const TokenFile>(dir.file("empty.tok"));
  EXPECT_EQ(file->size(), 0u);
  EXPECT_EQ(file->read(0, 0), std::vector<std::int64_t>{});
  EXPECT_THROW(file->at(0), std::out_of_range);
  EXPECT_NO_THROW(file->verify());
  EXPECT_TRUE(contains(error_of([&] { TokenWindowDataset(file, 4); }), "TokenWindowDataset: '" + dir.file("empty.tok") +
                                                                           "' has 0 ids; a window of block_size 4 "
                                                                           "needs block_size + 1 ids (more than 4)"));
  write_bytes(dir.file("empty.bin"), "");
  EXPECT_EQ(TokenFile(dir.file("empty.bin"), HeaderlessTokens{TokenDtype::UInt16}).size(), 0u);
  // Refused as a token file: an empty file has no header.
  EXPECT_EQ(format_error_of([&] { TokenFile f(dir.file("empty.bin")); }),
            "TokenFile: '" + dir.file("empty.bin") + "': truncated: the header needs 64 bytes, the file has 0");
}

// A range past the end is refused before anything is allocated or computed from it: read(0, n)
// with n beyond memory, and offset + n wrapping around, name the file, n and the offset.
TEST(TokenFile, AHugeOrWrappingRangeIsRefusedBeforeAnythingIsAllocated) {
  TempDir dir;
  write_token_file(dir.file("ids.tok"), std::vector<std::int64_t>{1, 2, 3, 4, 5});
  const TokenFile file(dir.file("ids.tok"));
  const auto out_of_range = [&](std::uint64_t offset, std::size_t n) {
    try {
      file.read(offset, n);
    } catch (const std::out_of_range& e) {
      return std::string(e.what());
    } catch (const std::exception& e) {
      return std::string("another error: ") + e.what();
    }
    return std::string("no error");
  };
  const std::string where = "TokenFile: '" + dir.file("ids.tok") + "': ";
  EXPECT_EQ(out_of_range(0, SIZE_MAX), where + "18446744073709551615 ids from id 0 are out of range for 5 ids");
  EXPECT_EQ(out_of_range(0, std::size_t(1) << 40), where + "1099511627776 ids from id 0 are out of range for 5 ids");
  EXPECT_EQ(out_of_range(3, SIZE_MAX - 1), where + "18446744073709551614 ids from id 3 are out of range for 5 ids");
  std::int64_t sink[1];
  EXPECT_EQ(error_of([&] { file.read(4, SIZE_MAX - 2, sink); }),
            where + "18446744073709551613 ids from id 4 are out of range for 5 ids");
  // A window as long as size_t allows: what it needs is said without overflowing.
  const auto shared = std::make_shared<const TokenFile>(dir.file("ids.tok"));
  EXPECT_EQ(error_of([&] { TokenWindowDataset(shared, SIZE_MAX); }),
            "TokenWindowDataset: '" + dir.file("ids.tok") +
                "' has 5 ids; a window of block_size 18446744073709551615 needs block_size + 1 ids (more than "
                "18446744073709551615)");
}

TEST(TokenFile, HeaderlessNanoGptBin) {
  TempDir dir;
  // np.array([...], dtype=np.uint16).tofile("train.bin"): little-endian ids, nothing else.
  const std::vector<std::uint16_t> u16{1, 65535, 0, 300, 7};
  write_bytes(dir.file("train.bin"), std::string(reinterpret_cast<const char*>(u16.data()), u16.size() * 2));
  const TokenFile file(dir.file("train.bin"), HeaderlessTokens{TokenDtype::UInt16});
  EXPECT_FALSE(file.has_header());
  EXPECT_EQ(file.read(0, 5), (std::vector<std::int64_t>{1, 65535, 0, 300, 7}));
  EXPECT_NO_THROW(file.verify());
  // The same bytes as uint32 ids (np.uint32): pairs of uint16, low half first.
  const std::vector<std::uint16_t> pairs{1, 0, 2, 1};
  write_bytes(dir.file("train32.bin"), std::string(reinterpret_cast<const char*>(pairs.data()), 8));
  const TokenFile wide(dir.file("train32.bin"), HeaderlessTokens{TokenDtype::UInt32});
  EXPECT_EQ(wide.read(0, 2), (std::vector<std::int64_t>{1, 65538}));
}

TEST(TokenFile, HeaderlessRefusals) {
  TempDir dir;
  write_bytes(dir.file("odd.bin"), "abc");
  EXPECT_EQ(format_error_of([&] { TokenFile f(dir.file("odd.bin"), HeaderlessTokens{TokenDtype::UInt16}); }),
            "TokenFile: '" + dir.file("odd.bin") +
                "': a headerless file of uint16 ids must be a multiple of 2 bytes "
                "long, it has 3");
  write_bytes(dir.file("six.bin"), "abcdef");
  EXPECT_TRUE(contains(format_error_of([&] { TokenFile f(dir.file("six.bin"), HeaderlessTokens{TokenDtype::UInt32}); }),
                       "multiple of 4 bytes long, it has 6"));
  // A raw .bin opened as a token file, and a token file opened as raw ids.
  EXPECT_EQ(format_error_of([&] { TokenFile f(dir.file("six.bin")); }),
            "TokenFile: '" + dir.file("six.bin") +
                "': not a token file (no XGRADTOK header; for nanoGPT's headerless "
                ".bin pass HeaderlessTokens{dtype})");
  write_bytes(dir.file("short.tok"), "XGRADTOK\x01");
  EXPECT_EQ(format_error_of([&] { TokenFile f(dir.file("short.tok")); }),
            "TokenFile: '" + dir.file("short.tok") + "': truncated: the header needs 64 bytes, the file has 9");
  write_bytes(dir.file("raw.bin"), std::string(100, '\x01'));
  EXPECT_TRUE(contains(format_error_of([&] { TokenFile f(dir.file("raw.bin")); }),
                       "'" + dir.file("raw.bin") +
                           "': not a token file (no XGRADTOK header; for nanoGPT's headerless "
                           ".bin pass HeaderlessTokens{dtype})"));
  write_token_file(dir.file("a.tok"), std::vector<std::int64_t>{1, 2, 3});
  EXPECT_TRUE(contains(format_error_of([&] { TokenFile f(dir.file("a.tok"), HeaderlessTokens{TokenDtype::UInt16}); }),
                       "'" + dir.file("a.tok") + "': it starts with the token-file header (XGRADTOK)"));
  // A vocabulary given for raw ids is checked on read.
  const std::vector<std::uint16_t> u16{1, 2, 900};
  write_bytes(dir.file("v.bin"), std::string(reinterpret_cast<const char*>(u16.data()), 6));
  const TokenFile v(dir.file("v.bin"), HeaderlessTokens{TokenDtype::UInt16, 500});
  EXPECT_EQ(v.at(1), 2u);
  EXPECT_EQ(format_error_of([&] { v.at(2); }),
            "TokenFile: '" + dir.file("v.bin") + "': id 900 at position 2 is not below the vocabulary's size 500");
  EXPECT_TRUE(contains(format_error_of([&] { v.verify(); }), "id 900 at position 2"));
}

TEST(TokenFile, CorruptTruncatedAndForgedFilesAreRefusedNamingTheFile) {
  TempDir dir;
  const std::vector<std::int64_t> ids = pseudo_random_ids(1000, 300, 3);
  write_token_file(dir.file("good.tok"), ids, TokenFileOptions().vocab_size(300));
  const std::string good = read_bytes(dir.file("good.tok"));
  ASSERT_EQ(good.size(), 64u + 2000u);
  ASSERT_EQ(good.substr(0, 8), "XGRADTOK");
  const std::string path = dir.file("bad.tok");
  const auto refusal = [&](const std::string& bytes) {
    write_bytes(path, bytes);
    return format_error_of([&] { TokenFile f(path); });
  };
  const std::string prefix = "TokenFile: '" + path + "': ";
  EXPECT_EQ(refusal(good.substr(0, good.size() - 1)),
            prefix +
                "truncated: the header claims 1000 uint16 ids (1000 x 2 bytes), the file has 1999 bytes after the "
                "header");
  EXPECT_EQ(refusal(good.substr(0, 64)),
            prefix +
                "truncated: the header claims 1000 uint16 ids (1000 x 2 bytes), the file has 0 bytes after the "
                "header");
  EXPECT_EQ(refusal(good.substr(0, 30)), prefix + "truncated: the header needs 64 bytes, the file has 30");
  EXPECT_EQ(refusal(good + "xyz"), prefix + "the header claims 1000 uint16 ids, but 3 more bytes follow them");
  std::string flipped = good;
  flipped[20] ^= 1;  // the count, without fixing the hash
  EXPECT_EQ(refusal(flipped), prefix + "corrupt header: its hash does not match");
  std::string magic = good;
  magic[0] = 'Y';
  EXPECT_TRUE(contains(refusal(magic), prefix + "not a token file"));
  // Forged: each field rewritten with a matching header hash.
  EXPECT_EQ(refusal(forge<std::uint32_t>(good, 8, 2)), prefix + "version 2 is not supported (expected 1)");
  EXPECT_EQ(refusal(forge<std::uint32_t>(good, 12, 3)), prefix + "ids of 3 bytes: expected 2 (uint16) or 4 (uint32)");
  EXPECT_EQ(refusal(forge<std::uint32_t>(good, 12, 4)),  // 2000 bytes as uint32: 500 ids, not 1000
            prefix +
                "truncated: the header claims 1000 uint32 ids (1000 x 4 bytes), the file has 2000 bytes after "
                "the header");
  EXPECT_TRUE(contains(refusal(forge<std::uint64_t>(good, 16, ~std::uint64_t(0))),  // count * 2 overflows
                       prefix + "truncated: the header claims 18446744073709551615 uint16 ids"));
  EXPECT_TRUE(contains(refusal(forge<std::uint64_t>(good, 16, std::uint64_t(1) << 63)), prefix + "truncated"));
  EXPECT_EQ(refusal(forge<std::uint64_t>(good, 24, 70000)), prefix + "a vocabulary of 70000 ids does not fit uint16");
  EXPECT_EQ(refusal(forge<std::uint8_t>(good, 47, 1)), prefix + "corrupt header: reserved byte 47 is not zero");

  // Ids at or past a forged-down vocabulary: the header opens, every read of such an id refuses.
  write_bytes(path, forge<std::uint64_t>(good, 24, 10));
  const auto shrunk = std::make_shared<const TokenFile>(path);
  const std::size_t first_bad =
      std::size_t(std::find_if(ids.begin(), ids.end(), [](auto id) { return id >= 10; }) - ids.begin());
  ASSERT_LT(first_bad, 900u);
  EXPECT_EQ(shrunk->read(first_bad + 1, 0), std::vector<std::int64_t>{});
  const std::string bad_id = format_error_of([&] { shrunk->at(first_bad); });
  EXPECT_TRUE(contains(bad_id, prefix + "id ")) << bad_id;
  EXPECT_TRUE(contains(bad_id, " at position " + std::to_string(first_bad) + " is not below the vocabulary's size 10"));
  EXPECT_TRUE(contains(format_error_of([&] { shrunk->verify(); }), prefix + "id "));
  const TokenWindowDataset windows(shrunk, 8);
  EXPECT_TRUE(contains(format_error_of([&] { windows.get(first_bad); }), "is not below the vocabulary's size 10"));

  // An id changed within the vocabulary: only the ids' hash shows it (verify).
  std::string changed = good;
  const auto other_id = static_cast<std::uint16_t>((ids[500] + 1) % 300);
  std::memcpy(&changed[64 + 2 * 500], &other_id, 2);
  write_bytes(path, changed);
  const TokenFile opened(path);
  EXPECT_EQ(format_error_of([&] { opened.verify(); }),
            prefix + "corrupt: the ids' hash does not match the header's (the ids were changed)");
  EXPECT_NO_THROW(TokenFile(dir.file("good.tok")).verify());
}

TEST(TokenFile, DevicesFifosAndFoldersAreRefusedWithoutBlocking) {
  TempDir dir;
  EXPECT_EQ(error_of([] { TokenFile f("/dev/zero"); }),
            "TokenFile: cannot read '/dev/zero': it is a character device, not a regular file");
  EXPECT_EQ(error_of([] { TokenFile f("/dev/zero", HeaderlessTokens{TokenDtype::UInt16}); }),
            "TokenFile: cannot read '/dev/zero': it is a character device, not a regular file");
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(error_of([&] { TokenFile f(fifo, HeaderlessTokens{TokenDtype::UInt16}); }),
            "TokenFile: cannot read '" + fifo + "': it is a FIFO (named pipe), not a regular file");
  EXPECT_EQ(error_of([&] { TokenFile f(dir.path()); }),
            "TokenFile: cannot read '" + dir.path() + "': it is a folder, not a regular file");
  EXPECT_TRUE(contains(error_of([&] { TokenFile f(dir.file("missing")); }),
                       "TokenFile: cannot open '" + dir.file("missing") + "': No such file or directory"));
}

TEST(TokenFile, WriterRefusesBadIdsAndLeavesThePreviousFile) {
  TempDir dir;
  const std::string path = dir.file("t.tok");
  write_token_file(path, std::vector<std::int64_t>{1, 2, 3});
  const std::string before = read_bytes(path);
  const auto expect_refused = [&](const std::vector<std::int64_t>& ids, const TokenFileOptions& options,
                                  const std::string& what) {
    const std::string m = error_of([&] { write_token_file(path, ids, options); });
    EXPECT_TRUE(contains(m, "cannot save '" + path + "'")) << m;
    EXPECT_TRUE(contains(m, what)) << m << "\nlacks: " << what;
    EXPECT_EQ(read_bytes(path), before);
    EXPECT_EQ(dir.entries(), std::set<std::string>{"t.tok"});
  };
  expect_refused({0, -1}, {},
                 "write_token_file: '" + path +
                     "': id -1 at position 1 is out of range: expected 0 to "
                     "65535 (uint16)");
  expect_refused({65536}, {}, "id 65536 at position 0 is out of range: expected 0 to 65535 (uint16)");
  expect_refused({3, 4, 5}, TokenFileOptions().vocab_size(5),
                 "id 5 at position 2 is out of range: the vocabulary "
                 "has 5 ids");
  expect_refused({1}, TokenFileOptions().vocab_size(70000),
                 "a vocabulary of 70000 ids does not fit uint16 (at most "
                 "65536): use TokenDtype::UInt32");
  expect_refused({std::int64_t(1) << 32}, TokenFileOptions().dtype(TokenDtype::UInt32), "expected 0 to 4294967295");
  // A writer that throws midway.
  const std::string m = error_of([&] {
    write_token_file(path, {}, [](TokenFileWriter& out) {
      out.append(std::vector<std::int64_t>(100000, 7));
      throw std::runtime_error("tokenizer failed");
    });
  });
  EXPECT_TRUE(contains(m, "tokenizer failed")) << m;
  EXPECT_EQ(read_bytes(path), before);
}

// Ids equal to their position (uint32), so a window's first id is its offset.
std::shared_ptr<const TokenFile> counting_file(const TempDir& dir, std::size_t n) {
  std::vector<std::int64_t> ids(n);
  for (std::size_t i = 0; i < n; ++i) ids[i] = static_cast<std::int64_t>(i);
  write_token_file(dir.file("count.tok"), ids, TokenFileOptions().dtype(TokenDtype::UInt32));
  return std::make_shared<const TokenFile>(dir.file("count.tok"));
}

DataLoader<TokenWindow> random_window_loader(std::shared_ptr<TokenWindowDataset> windows, std::size_t batch,
                                             std::uint64_t seed, std::size_t batches_per_epoch) {
  auto sampler = std::make_shared<RandomSampler>(windows->size(), Generator(seed), /*replacement=*/true,
                                                 batch * batches_per_epoch);
  return make_data_loader(windows, DataLoaderOptions().batch_size(batch).sampler(sampler).drop_last(true));
}

// The next batch, across epochs (as train_gpt takes them).
TokenBatch next_batch(DataLoader<TokenWindow>& loader) {
  auto b = loader.next();
  if (!b) b = loader.next();
  return std::move(*b);
}

TEST(TokenWindowDataset, WindowsAndBatches) {
  TempDir dir;
  const auto file = counting_file(dir, 50);
  const auto windows = std::make_shared<TokenWindowDataset>(file, 8);
  EXPECT_EQ(windows->size(), 42u);  // offsets 0 .. 41: the last window ends with id 49
  EXPECT_EQ(windows->block_size(), 8u);
  const TokenWindow last = windows->get(41);
  EXPECT_EQ(last.offset, 41u);
  EXPECT_EQ(last.tokens, (std::vector<std::int64_t>{41, 42, 43, 44, 45, 46, 47, 48, 49}));
  EXPECT_THROW(windows->get(42), std::out_of_range);
  const TokenBatch b = windows->batch({3, 0, 41});
  EXPECT_EQ(b.x, (IndexArray{{3, 4, 5, 6, 7, 8, 9, 10}, {0, 1, 2, 3, 4, 5, 6, 7}, {41, 42, 43, 44, 45, 46, 47, 48}}));
  EXPECT_EQ(b.y, (IndexArray{{4, 5, 6, 7, 8, 9, 10, 11}, {1, 2, 3, 4, 5, 6, 7, 8}, {42, 43, 44, 45, 46, 47, 48, 49}}));
  // The smallest file for a block: one window.
  EXPECT_EQ(TokenWindowDataset(file, 49).size(), 1u);
  EXPECT_THROW(TokenWindowDataset(file, 50), std::invalid_argument);
  EXPECT_THROW(TokenWindowDataset(file, 0), std::invalid_argument);
}

TEST(TokenWindowDataset, RandomWindowsAreInRangeAndReproduciblePerSeed) {
  TempDir dir;
  const std::size_t n = 1000, T = 16, B = 4;
  const auto windows = std::make_shared<TokenWindowDataset>(counting_file(dir, n), T);
  auto a = random_window_loader(windows, B, 11, 5), again = random_window_loader(windows, B, 11, 5),
       other = random_window_loader(windows, B, 12, 5);
  EXPECT_EQ(a.size(), 5u);
  std::set<std::int64_t> offsets;
  bool differs = false;
  for (int step = 0; step < 40; ++step) {  // 8 epochs
    const TokenBatch b = next_batch(a), c = next_batch(again), d = next_batch(other);
    ASSERT_EQ(b.x.shape(), (std::vector<std::size_t>{B, T}));
    ASSERT_EQ(b.y.shape(), (std::vector<std::size_t>{B, T}));
    EXPECT_EQ(b.x, c.x);
    EXPECT_EQ(b.y, c.y);
    differs = differs || b.x != d.x;
    for (std::size_t i = 0; i < B; ++i) {
      const std::int64_t start = b.x(i, 0);
      EXPECT_GE(start, 0);
      EXPECT_LE(start, std::int64_t(n - T - 1));
      offsets.insert(start);
      for (std::size_t t = 0; t < T; ++t) {
        EXPECT_EQ(b.x(i, t), start + std::int64_t(t));
        EXPECT_EQ(b.y(i, t), start + std::int64_t(t) + 1);
      }
    }
  }
  EXPECT_TRUE(differs);
  EXPECT_GT(offsets.size(), 100u);  // 160 draws with replacement from 984 offsets: mostly distinct
}

TEST(TokenWindowDataset, ResumeFromTheLoadersStateContinuesBitForBit) {
  TempDir dir;
  const auto windows = std::make_shared<TokenWindowDataset>(counting_file(dir, 5000), 32);
  for (const int taken : {0, 3, 5, 7, 12}) {  // at the start, mid-epoch, at an epoch's end, later epochs
    auto original = random_window_loader(windows, 6, 99, 5);
    for (int i = 0; i < taken; ++i) next_batch(original);
    const std::string saved = original.state_dict().to_string();
    std::vector<TokenBatch> expected;
    for (int i = 0; i < 9; ++i) expected.push_back(next_batch(original));

    auto resumed = random_window_loader(windows, 6, 12345, 5);  // the seed comes from the state
    resumed.load_state_dict(DataLoaderState::from_string(saved));
    for (int i = 0; i < 9; ++i) {
      const TokenBatch b = next_batch(resumed);
      EXPECT_EQ(b.x, expected[std::size_t(i)].x) << "after " << taken << " batches, batch " << i;
      EXPECT_EQ(b.y, expected[std::size_t(i)].y);
    }
  }
}

// Memory: the anonymous memory (what the process allocates, not the file's pages the kernel maps
// in and can drop) from /proc/self/status, in bytes.
std::int64_t anonymous_rss() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("RssAnon:", 0) == 0) return std::stoll(line.substr(8)) * 1024;
  return -1;
}
std::int64_t peak_rss() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return std::int64_t(u.ru_maxrss) * 1024;
}

TEST(TokenWindowDataset, MemoryDoesNotGrowWithTheCorpus) {
  TempDir dir;
  const std::uint64_t n = 50'000'000, vocab = 50257;  // 100 MB of uint16
  const std::string path = dir.file("big.tok");
  const std::int64_t peak_before = peak_rss();
  // Streaming: a million ids at a time.
  write_token_file(path, TokenFileOptions().vocab_size(vocab), [&](TokenFileWriter& out) {
    std::vector<std::uint16_t> chunk(1'000'000);
    std::uint64_t x = 1;
    for (std::uint64_t done = 0; done < n; done += chunk.size()) {
      for (auto& id : chunk)
        id = static_cast<std::uint16_t>((x = x * 6364136223846793005ULL + 1442695040888963407ULL) >> 33) % vocab;
      out.append(chunk);
    }
  });
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  ASSERT_EQ(std::uint64_t(st.st_size), 64 + 2 * n);

  const std::int64_t anon_before = anonymous_rss();
  ASSERT_GT(anon_before, 0);
  const std::size_t T = 256, B = 12;
  {
    const auto windows = std::make_shared<TokenWindowDataset>(std::make_shared<const TokenFile>(path), T);
    EXPECT_EQ(windows->size(), n - T);
    auto loader = random_window_loader(windows, B, 1337, 10);
    for (int i = 0; i < 25; ++i) {
      const TokenBatch b = next_batch(loader);
      ASSERT_EQ(b.x.shape(), (std::vector<std::size_t>{B, T}));
      EXPECT_LT(*std::max_element(b.y.begin(), b.y.end()), std::int64_t(vocab));
    }
    // The checkpoint state is five numbers and a few counters, whatever the corpus' size.
    const std::string state = loader.state_dict().to_string();
    EXPECT_LT(state.size(), 200u) << state;
    // What the loader allocated: an epoch's 120 offsets and a batch, not 16 bytes per window
    // (a permutation of all windows would be 800 MB).
    const std::int64_t grown = anonymous_rss() - anon_before;
    RecordProperty("anonymous_rss_growth_bytes", std::to_string(grown));
    EXPECT_LT(grown, std::int64_t(8) << 20) << "anonymous memory grew by " << grown << " bytes";
  }
  // The peak over writing and reading: well under the file's 100 MB (the writer holds a chunk; the
  // mapping brings in only the pages that windows touch).
  const std::int64_t peak_grown = peak_rss() - peak_before;
  RecordProperty("peak_rss_growth_bytes", std::to_string(peak_grown));
  EXPECT_LT(peak_grown, std::int64_t(50) << 20) << "peak RSS grew by " << peak_grown << " bytes";
}

}  // namespace
}  // namespace xgrad::data
