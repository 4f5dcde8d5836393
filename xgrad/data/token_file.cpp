// Token files (token_file.hpp): the header, the streaming writer, the mapped reader and the
// window dataset.
#include <xgrad/data/token_file.hpp>

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <xgrad/base/check.hpp>
#include <xgrad/serialize/atomic_file.hpp>
#include <xgrad/serialize/format_error.hpp>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "token files are little-endian; this host is not");

namespace xgrad::data {

namespace {

constexpr char kMagic[8] = {'X', 'G', 'R', 'A', 'D', 'T', 'O', 'K'};
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kHeaderBytes = 64;
constexpr std::uint64_t kFnvBasis = 0xcbf29ce484222325ULL, kFnvPrime = 0x100000001b3ULL;
constexpr std::size_t kChunk = std::size_t(1) << 15;  // ids converted (or verified) at a time

std::uint64_t fnv1a_bytes(const unsigned char* p, std::size_t n) {
  std::uint64_t h = kFnvBasis;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * kFnvPrime;
  return h;
}

template <class U>
void put_le(unsigned char* at, U v) {
  std::memcpy(at, &v, sizeof v);  // little-endian host (static_assert above)
}
template <class U>
U get_le(const unsigned char* at) {
  U v;
  std::memcpy(&v, at, sizeof v);
  return v;
}

struct Header {
  std::uint64_t bytes_per_id = 0, count = 0, vocab_size = 0, ids_hash = 0;
};

void encode_header(const Header& h, unsigned char* out) {
  std::memset(out, 0, kHeaderBytes);
  std::memcpy(out, kMagic, sizeof kMagic);
  put_le<std::uint32_t>(out + 8, kVersion);
  put_le<std::uint32_t>(out + 12, static_cast<std::uint32_t>(h.bytes_per_id));
  put_le<std::uint64_t>(out + 16, h.count);
  put_le<std::uint64_t>(out + 24, h.vocab_size);
  put_le<std::uint64_t>(out + 32, h.ids_hash);
  put_le<std::uint64_t>(out + 56, fnv1a_bytes(out, 56));
}

std::string where(const std::string& path) { return "TokenFile: '" + path + "': "; }

}  // namespace

std::size_t token_dtype_bytes(TokenDtype dtype) { return dtype == TokenDtype::UInt16 ? 2 : 4; }
const char* token_dtype_name(TokenDtype dtype) { return dtype == TokenDtype::UInt16 ? "uint16" : "uint32"; }
TokenDtype token_dtype_for(std::uint64_t vocab_size) {
  return vocab_size <= 65536 ? TokenDtype::UInt16 : TokenDtype::UInt32;
}

// ---- writing ---------------------------------------------------------------------------------

TokenFileWriter::TokenFileWriter(std::ostream& out, const std::string& path, const TokenFileOptions& options)
    : out_(out),
      path_(path),
      options_(options),
      hash_(kFnvBasis),
      staging_(kChunk),
      bytes_(kChunk * token_dtype_bytes(options.dtype())) {
  const std::uint64_t dtype_limit = options.dtype() == TokenDtype::UInt16 ? 65536ULL : 4294967296ULL;
  XGRAD_CHECK(options.vocab_size() <= dtype_limit, "write_token_file: '", path, "': a vocabulary of ",
              options.vocab_size(), " ids does not fit ", token_dtype_name(options.dtype()), " (at most ", dtype_limit,
              "): use TokenDtype::UInt32");
  limit_ = options.vocab_size() > 0 ? options.vocab_size() : dtype_limit;
}

void TokenFileWriter::refuse(const std::string& id) const {
  throw std::invalid_argument(xgrad::detail::concat(
      "write_token_file: '", path_, "': id ", id, " at position ", count_, " is out of range: ",
      options_.vocab_size() > 0 ? "the vocabulary has " + std::to_string(options_.vocab_size()) + " ids"
                                : std::string("expected 0 to ") + std::to_string(limit_ - 1) + " (" +
                                      token_dtype_name(options_.dtype()) + ")"));
}

void TokenFileWriter::flush() {
  if (staged_ == 0) return;
  if (options_.dtype() == TokenDtype::UInt32) {
    out_.write(reinterpret_cast<const char*>(staging_.data()), static_cast<std::streamsize>(staged_ * 4));
  } else {
    for (std::size_t i = 0; i < staged_; ++i) put_le<std::uint16_t>(&bytes_[2 * i], std::uint16_t(staging_[i]));
    out_.write(reinterpret_cast<const char*>(bytes_.data()), static_cast<std::streamsize>(staged_ * 2));
  }
  staged_ = 0;
}

void write_token_file(const std::string& path, const TokenFileOptions& options,
                      const std::function<void(TokenFileWriter&)>& write) {
  write_file_atomically(path, [&](std::ostream& out) {
    unsigned char header[kHeaderBytes] = {};
    out.write(reinterpret_cast<const char*>(header), kHeaderBytes);  // filled in at the end
    TokenFileWriter writer(out, path, options);
    write(writer);
    writer.flush();
    encode_header({token_dtype_bytes(options.dtype()), writer.count_, options.vocab_size(), writer.hash_}, header);
    out.seekp(0);
    out.write(reinterpret_cast<const char*>(header), kHeaderBytes);
  });
}

void write_token_file(const std::string& path, const std::vector<std::int64_t>& ids, const TokenFileOptions& options) {
  write_token_file(path, options, [&](TokenFileWriter& out) { out.append(ids); });
}

// ---- reading ---------------------------------------------------------------------------------

TokenFile::TokenFile(const std::string& path) { open(path, nullptr); }
TokenFile::TokenFile(const std::string& path, const HeaderlessTokens& headerless) { open(path, &headerless); }

TokenFile::~TokenFile() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
}

void TokenFile::open(const std::string& path, const HeaderlessTokens* headerless) {
  path_ = path;
  file_ = std::make_unique<RegularFile>("TokenFile", path);  // refuses folders, devices, FIFOs
  const std::uint64_t size = file_->size();
  const auto fail = [&](const std::string& what) { throw FormatError(where(path) + what); };
  unsigned char header[kHeaderBytes] = {};
  const std::uint64_t got = file_->read_at(0, std::min<std::uint64_t>(size, kHeaderBytes), header);
  const bool magic = got >= sizeof kMagic && std::memcmp(header, kMagic, sizeof kMagic) == 0;
  std::uint64_t offset = 0;
  if (headerless != nullptr) {
    if (magic)
      fail("it starts with the token-file header (XGRADTOK): open it as a token file, not as headerless " +
           std::string(token_dtype_name(headerless->dtype)) + " ids");
    dtype_ = headerless->dtype;
    vocab_size_ = headerless->vocab_size;
    const std::uint64_t b = token_dtype_bytes(dtype_);
    if (size % b != 0)
      fail("a headerless file of " + std::string(token_dtype_name(dtype_)) + " ids must be a multiple of " +
           std::to_string(b) + " bytes long, it has " + std::to_string(size));
    count_ = size / b;
  } else {
    if (got < kHeaderBytes) {
      if (magic || size == 0)
        fail("truncated: the header needs " + std::to_string(kHeaderBytes) + " bytes, the file has " +
             std::to_string(size));
      fail("not a token file (no XGRADTOK header; for nanoGPT's headerless .bin pass HeaderlessTokens{dtype})");
    }
    if (!magic)
      fail("not a token file (no XGRADTOK header; for nanoGPT's headerless .bin pass HeaderlessTokens{dtype})");
    if (get_le<std::uint64_t>(header + 56) != fnv1a_bytes(header, 56)) fail("corrupt header: its hash does not match");
    const auto version = get_le<std::uint32_t>(header + 8);
    if (version != kVersion)
      fail("version " + std::to_string(version) + " is not supported (expected " + std::to_string(kVersion) + ")");
    const auto bytes_per_id = get_le<std::uint32_t>(header + 12);
    if (bytes_per_id != 2 && bytes_per_id != 4)
      fail("ids of " + std::to_string(bytes_per_id) + " bytes: expected 2 (uint16) or 4 (uint32)");
    for (std::size_t i = 40; i < 56; ++i)
      if (header[i] != 0) fail("corrupt header: reserved byte " + std::to_string(i) + " is not zero");
    dtype_ = bytes_per_id == 2 ? TokenDtype::UInt16 : TokenDtype::UInt32;
    count_ = get_le<std::uint64_t>(header + 16);
    vocab_size_ = get_le<std::uint64_t>(header + 24);
    ids_hash_ = get_le<std::uint64_t>(header + 32);
    has_header_ = true;
    offset = kHeaderBytes;
    // The count is compared with what the file holds (count * bytes could overflow).
    const std::uint64_t after = size - kHeaderBytes, room = after / bytes_per_id;
    if (count_ > room)
      fail("truncated: the header claims " + std::to_string(count_) + " " + token_dtype_name(dtype_) + " ids (" +
           std::to_string(count_) + " x " + std::to_string(bytes_per_id) + " bytes), the file has " +
           std::to_string(after) + " bytes after the header");
    if (count_ * bytes_per_id != after)
      fail("the header claims " + std::to_string(count_) + " " + token_dtype_name(dtype_) + " ids, but " +
           std::to_string(after - count_ * bytes_per_id) + " more bytes follow them");
    if (vocab_size_ > (dtype_ == TokenDtype::UInt16 ? 65536ULL : 4294967296ULL))
      fail("a vocabulary of " + std::to_string(vocab_size_) + " ids does not fit " + token_dtype_name(dtype_));
  }
  if (count_ == 0) return;  // nothing to map (mmap refuses a length of 0)
  map_bytes_ = static_cast<std::size_t>(size);
  void* map = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_SHARED, file_->fd(), 0);
  if (map == MAP_FAILED)
    throw std::runtime_error(where(path) + "cannot map " + std::to_string(size) + " bytes: " + std::strerror(errno));
  map_ = map;
  ::madvise(map_, map_bytes_, MADV_RANDOM);  // windows are read at random offsets: no readahead
  ids_ = static_cast<const unsigned char*>(map_) + offset;
}

std::uint64_t TokenFile::raw(std::uint64_t i) const {
  return dtype_ == TokenDtype::UInt16 ? get_le<std::uint16_t>(ids_ + 2 * i) : get_le<std::uint32_t>(ids_ + 4 * i);
}

void TokenFile::bad_id(std::uint64_t position, std::uint64_t id) const {
  throw FormatError(where(path_) + "id " + std::to_string(id) + " at position " + std::to_string(position) +
                    " is not below the vocabulary's size " + std::to_string(vocab_size_));
}

std::uint32_t TokenFile::at(std::uint64_t i) const {
  if (i >= count_)
    throw std::out_of_range(where(path_) + "id " + std::to_string(i) + " is out of range for " +
                            std::to_string(count_) + " ids");
  const std::uint64_t id = raw(i);
  if (vocab_size_ > 0 && id >= vocab_size_) bad_id(i, id);
  return static_cast<std::uint32_t>(id);
}

// Before anything is read or allocated; offset + n may wrap, so it is not computed.
void TokenFile::check_range(std::uint64_t offset, std::size_t n) const {
  if (offset > count_ || n > count_ - offset)
    throw std::out_of_range(where(path_) + std::to_string(n) + " ids from id " + std::to_string(offset) +
                            " are out of range for " + std::to_string(count_) + " ids");
}

void TokenFile::read(std::uint64_t offset, std::size_t n, std::int64_t* out) const {
  check_range(offset, n);
  for (std::size_t k = 0; k < n; ++k) {
    const std::uint64_t id = raw(offset + k);
    if (vocab_size_ > 0 && id >= vocab_size_) bad_id(offset + k, id);
    out[k] = static_cast<std::int64_t>(id);
  }
}

std::vector<std::int64_t> TokenFile::read(std::uint64_t offset, std::size_t n) const {
  check_range(offset, n);  // before the vector of n ids is allocated
  std::vector<std::int64_t> out(n);
  read(offset, n, out.data());
  return out;
}

void TokenFile::verify() const {
  const std::size_t b = token_dtype_bytes(dtype_);
  const std::uint64_t first = has_header_ ? kHeaderBytes : 0;
  std::vector<unsigned char> chunk(kChunk * b);
  std::uint64_t h = kFnvBasis;
  for (std::uint64_t i = 0; i < count_;) {
    const std::uint64_t n = std::min<std::uint64_t>(kChunk, count_ - i);
    if (file_->read_at(first + i * b, n * b, chunk.data()) != n * b)
      throw FormatError(where(path_) + "truncated: it ends before id " + std::to_string(i + n) + " of " +
                        std::to_string(count_));
    for (std::uint64_t k = 0; k < n; ++k) {
      const std::uint64_t id = b == 2 ? get_le<std::uint16_t>(&chunk[2 * k]) : get_le<std::uint32_t>(&chunk[4 * k]);
      if (vocab_size_ > 0 && id >= vocab_size_) bad_id(i + k, id);
      h = (h ^ id) * kFnvPrime;
    }
    i += n;
  }
  if (has_header_ && h != ids_hash_)
    throw FormatError(where(path_) + "corrupt: the ids' hash does not match the header's (the ids were changed)");
}

// ---- windows ---------------------------------------------------------------------------------

TokenWindowDataset::TokenWindowDataset(std::shared_ptr<const TokenFile> tokens, std::size_t block_size)
    : tokens_(std::move(tokens)), block_size_(block_size), size_(0) {
  XGRAD_CHECK(tokens_ != nullptr, "TokenWindowDataset: the token file is null");
  XGRAD_CHECK(block_size_ > 0, "TokenWindowDataset: block_size must be positive, got 0");
  // Not "at least block_size + 1": that overflows for block_size = SIZE_MAX.
  XGRAD_CHECK(tokens_->size() > block_size_, "TokenWindowDataset: '", tokens_->path(), "' has ", tokens_->size(),
              " ids; a window of block_size ", block_size_, " needs block_size + 1 ids (more than ", block_size_, ")");
  size_ = static_cast<std::size_t>(tokens_->size() - block_size_);
}

TokenWindow TokenWindowDataset::get(std::size_t index) const {
  detail::check_index("TokenWindowDataset.get", index, size_);
  return {index, tokens_->read(index, block_size_ + 1)};
}

TokenBatch TokenWindowDataset::batch(const std::vector<std::size_t>& offsets) const {
  std::vector<TokenWindow> windows;
  windows.reserve(offsets.size());
  for (std::size_t i : offsets) windows.push_back(get(i));
  return collate(windows);
}

TokenBatch TokenWindowDataset::collate(const std::vector<TokenWindow>& windows) {
  XGRAD_CHECK(!windows.empty(), "TokenWindowDataset::collate: expected at least one window");
  const std::size_t n = windows[0].tokens.size();
  XGRAD_CHECK(n >= 2, "TokenWindowDataset::collate: a window needs at least 2 ids, got ", n);
  const std::size_t B = windows.size(), T = n - 1;
  TokenBatch b{empty_array<std::int64_t>(Shape{B, T}, "TokenWindowDataset::collate"),
               empty_array<std::int64_t>(Shape{B, T}, "TokenWindowDataset::collate")};
  for (std::size_t i = 0; i < B; ++i) {
    XGRAD_CHECK(windows[i].tokens.size() == n, "TokenWindowDataset::collate: window ", i, " has ",
                windows[i].tokens.size(), " ids, window 0 has ", n);
    const std::int64_t* w = windows[i].tokens.data();
    std::copy(w, w + T, b.x.data() + i * T);
    std::copy(w + 1, w + n, b.y.data() + i * T);
  }
  return b;
}

}  // namespace xgrad::data
