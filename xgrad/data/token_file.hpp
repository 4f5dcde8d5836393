// Token files: a corpus tokenized once into a flat array of ids on disk (nanoGPT's train.bin),
// read memory-mapped, and cut into training windows by offset, so that the memory of training
// does not grow with the corpus.
//
//   // tokenize once, streaming: the ids never need to be in memory together
//   data::write_token_file("train.tok", data::TokenFileOptions().vocab_size(50257), [&](data::TokenFileWriter& out) {
//     for (const std::string& line : lines) out.append(tokenizer.encode(line));
//   });
//   // train: windows of block_size + 1 ids at offsets drawn uniformly (nanoGPT's get_batch)
//   auto tokens = std::make_shared<const data::TokenFile>("train.tok");
//   auto windows = std::make_shared<data::TokenWindowDataset>(tokens, 1024);
//   auto sampler = std::make_shared<data::RandomSampler>(windows->size(), xgrad::Generator(seed),
//                                                        /*replacement=*/true, /*num_samples=*/B * 1000);
//   auto loader = data::make_data_loader(windows, data::DataLoaderOptions().batch_size(B).sampler(sampler));
//   auto batch = loader.next();  // TokenBatch: x, y (B, 1024) of ids, y = x shifted by one
//
// The file (little-endian): a 64-byte header, then `count` ids of 2 (uint16) or 4 (uint32) bytes.
//   offset  0  "XGRADTOK"                      magic
//           8  uint32 version = 1
//          12  uint32 bytes per id: 2 or 4      (the dtype)
//          16  uint64 count                    ids after the header
//          24  uint64 vocab_size               every id is below it; 0: not recorded
//          32  uint64 ids_hash                 FNV-1a over the ids (as uint64 values), for verify()
//          40  16 bytes of zeros               reserved
//          56  uint64 header_hash              FNV-1a over bytes 0..55
// The file's size must be 64 + count * bytes per id exactly. A headerless file of raw ids, as
// nanoGPT's prepare.py writes (`np.array(ids, dtype=np.uint16).tofile("train.bin")`), is read
// with an explicit dtype: TokenFile(path, HeaderlessTokens{TokenDtype::UInt16}).
//
// Memory: the reader maps the file read-only (the kernel pages it in and out as windows touch
// it; nothing is copied), and a DataLoader over TokenWindowDataset with a RandomSampler drawing
// with replacement holds one epoch of num_samples offsets and a checkpoint state of five numbers,
// whatever the corpus' size. (A shuffle(true) loader, a RandomSampler without replacement, draws
// a permutation of every window: 16 bytes per token. Do not use it on a large corpus.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <type_traits>
#include <vector>

#include <xgrad/arg.hpp>
#include <xgrad/backend/array.hpp>
#include <xgrad/data/collate.hpp>
#include <xgrad/data/dataset.hpp>

namespace xgrad {
class RegularFile;
}

namespace xgrad::data {

enum class TokenDtype { UInt16, UInt32 };

// 2 or 4.
std::size_t token_dtype_bytes(TokenDtype dtype);
// "uint16" or "uint32".
const char* token_dtype_name(TokenDtype dtype);
// UInt16 for a vocabulary of at most 65,536 ids, else UInt32.
TokenDtype token_dtype_for(std::uint64_t vocab_size);

struct TokenFileOptions {
  XGRAD_ARG(TokenDtype, dtype) = TokenDtype::UInt16;
  // Recorded in the header; every id must be below it (checked when written and when read).
  // 0: not recorded (ids need only fit the dtype).
  XGRAD_ARG(std::uint64_t, vocab_size) = 0;
};

// Appends ids to a token file being written by write_token_file; converts them to the file's
// dtype in chunks, so any number of append calls holds only a chunk in memory. An id that is
// negative, does not fit the dtype or is not below the vocabulary's size throws
// std::invalid_argument naming the id and its position (and the file is not written).
class TokenFileWriter {
 public:
  template <class Int>
  void append(const Int* ids, std::size_t n) {
    static_assert(std::is_integral_v<Int>, "TokenFileWriter::append: ids must be integers");
    for (std::size_t i = 0; i < n; ++i) {
      if constexpr (std::is_signed_v<Int>) {
        if (ids[i] < 0) refuse(std::to_string(ids[i]));
      }
      put(static_cast<std::uint64_t>(ids[i]));
    }
  }
  template <class Int>
  void append(const std::vector<Int>& ids) {
    append(ids.data(), ids.size());
  }
  // Ids appended so far.
  std::uint64_t count() const { return count_; }

  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;

 private:
  friend void write_token_file(const std::string&, const TokenFileOptions&,
                               const std::function<void(TokenFileWriter&)>&);
  TokenFileWriter(std::ostream& out, const std::string& path, const TokenFileOptions& options);

  void put(std::uint64_t id) {
    if (id >= limit_) refuse(std::to_string(id));
    hash_ = (hash_ ^ id) * 0x100000001b3ULL;
    staging_[staged_++] = static_cast<std::uint32_t>(id);
    ++count_;
    if (staged_ == staging_.size()) flush();
  }
  [[noreturn]] void refuse(const std::string& id) const;
  void flush();

  std::ostream& out_;
  std::string path_;
  TokenFileOptions options_;
  std::uint64_t limit_;  // ids must be below it
  std::uint64_t count_ = 0;
  std::uint64_t hash_;
  std::vector<std::uint32_t> staging_;
  std::size_t staged_ = 0;
  std::vector<unsigned char> bytes_;
};

// Writes a token file atomically (write_file_atomically: a temporary file renamed into place, so
// `path` holds the previous file or the complete new one): `write` appends the ids, then the
// header is filled in. Throws std::runtime_error naming `path` when the save fails or `write`
// throws (its exception nested), leaving `path` as it was.
void write_token_file(const std::string& path, const TokenFileOptions& options,
                      const std::function<void(TokenFileWriter&)>& write);
// The same for ids already in memory.
void write_token_file(const std::string& path, const std::vector<std::int64_t>& ids,
                      const TokenFileOptions& options = {});

// How to read a file of raw ids without a header (nanoGPT's train.bin).
struct HeaderlessTokens {
  TokenDtype dtype = TokenDtype::UInt16;
  std::uint64_t vocab_size = 0;  // checked on read when not 0
};

// A token file, memory-mapped read-only for as long as the object lives. Reads are const and
// may come from several threads at once (the DataLoader's workers).
//
// Opening refuses, with xgrad::FormatError naming the file: a bad magic, version, dtype or
// reserved bytes, a header whose hash does not match, a size other than 64 + count * bytes per
// id (truncated, or bytes after the ids), a headerless file whose size is not a multiple of its
// id size or that starts with this format's magic. A file that is not a regular file (a folder,
// /dev/zero, a FIFO) is refused with std::runtime_error before anything is read. Opening reads
// only the header: verify() scans the ids. A file of 0 ids is fine (nothing is mapped).
//
// The file must not be truncated while it is mapped (reading a page past its new end raises
// SIGBUS); write_token_file replaces a file by renaming, which leaves an open reader on the old
// one.
class TokenFile {
 public:
  explicit TokenFile(const std::string& path);
  TokenFile(const std::string& path, const HeaderlessTokens& headerless);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::string& path() const { return path_; }
  std::uint64_t size() const { return count_; }  // ids
  TokenDtype dtype() const { return dtype_; }
  std::uint64_t vocab_size() const { return vocab_size_; }  // 0: not known
  bool has_header() const { return has_header_; }

  // Id i; std::out_of_range past the end, FormatError if it is not below vocab_size().
  std::uint32_t at(std::uint64_t i) const;
  // Ids offset .. offset + n - 1 as int64 into out; the same checks (the range checked first:
  // std::out_of_range naming the file, n and offset).
  void read(std::uint64_t offset, std::size_t n, std::int64_t* out) const;
  std::vector<std::int64_t> read(std::uint64_t offset, std::size_t n) const;

  // Reads every id (in chunks through the file, not the mapping, so the pages it reads do not
  // stay in this process' memory): each must be below vocab_size() and, with a header, their
  // hash must be the header's. Throws FormatError naming the file and the first bad id.
  void verify() const;

 private:
  void open(const std::string& path, const HeaderlessTokens* headerless);
  void check_range(std::uint64_t offset, std::size_t n) const;
  std::uint64_t raw(std::uint64_t i) const;
  [[noreturn]] void bad_id(std::uint64_t position, std::uint64_t id) const;

  std::string path_;
  std::unique_ptr<RegularFile> file_;
  void* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  const unsigned char* ids_ = nullptr;  // the first id in the mapping
  std::uint64_t count_ = 0;
  TokenDtype dtype_ = TokenDtype::UInt16;
  std::uint64_t vocab_size_ = 0;
  std::uint64_t ids_hash_ = 0;
  bool has_header_ = false;
};

// One training example: block_size + 1 consecutive ids from `offset`; x = tokens[0, T), y =
// tokens[1, T] (the next token of each position).
struct TokenWindow {
  std::uint64_t offset = 0;
  std::vector<std::int64_t> tokens;
};

// A batch of windows, as the GPT training loop takes it.
struct TokenBatch {
  IndexArray x, y;  // (B, T)
};

// Every window of block_size + 1 ids of a token file: example i starts at id i, so there are
// size() = tokens - block_size of them (nanoGPT's get_batch draws ix in [0, len(data) -
// block_size)). It holds the mapped file and nothing per window. get() checks each id against
// the file's vocab_size (FormatError naming the file and the position).
class TokenWindowDataset : public Dataset<TokenWindow> {
 public:
  // The file needs more than block_size ids; otherwise std::invalid_argument naming it.
  TokenWindowDataset(std::shared_ptr<const TokenFile> tokens, std::size_t block_size);
  std::size_t size() const override { return size_; }
  TokenWindow get(std::size_t index) const override;
  std::size_t block_size() const { return block_size_; }
  const std::shared_ptr<const TokenFile>& tokens() const { return tokens_; }

  // The windows at these offsets, collated (for evaluation on fixed windows): x, y (B, T).
  TokenBatch batch(const std::vector<std::size_t>& offsets) const;
  // Stacks windows of equal length: x = tokens[0, T), y = tokens[1, T] of each.
  static TokenBatch collate(const std::vector<TokenWindow>& windows);

 private:
  std::shared_ptr<const TokenFile> tokens_;
  std::size_t block_size_;
  std::size_t size_;
};

// make_data_loader(windows, options) needs no collate function.
template <>
struct DefaultCollate<TokenWindow> {
  using Batch = TokenBatch;
  static Batch collate(const std::vector<TokenWindow>& windows) { return TokenWindowDataset::collate(windows); }
};

}  // namespace xgrad::data
