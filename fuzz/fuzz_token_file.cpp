// libFuzzer target for token files (xgrad/data/token_file.hpp): every input is opened as a token
// file with a header, and as headerless uint16 and uint32 ids. A malformed file must throw
// xgrad::FormatError; a file that opens must give its ids (each below the vocabulary it claims)
// or refuse one with FormatError in verify(). Anything else (another exception, a crash, a
// sanitizer report, a leak, a hang) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <xgrad/data/token_file.hpp>
#include <xgrad/serialize/format_error.hpp>

#include "memory_file.hpp"

namespace {

void read_all(const xgrad::data::TokenFile& file) {
  try {
    file.verify();
  } catch (const xgrad::FormatError&) {
    return;  // a bad id or hash: refused
  }
  const std::uint64_t n = file.size() < 64 ? file.size() : 64;
  const std::vector<std::int64_t> ids = file.read(file.size() - n, static_cast<std::size_t>(n));
  for (const std::int64_t id : ids)
    if (id < 0 || (file.vocab_size() > 0 && static_cast<std::uint64_t>(id) >= file.vocab_size())) std::abort();
}

// Opens the input as `headerless` ids, or with a header when null.
void open(const std::string& path, const xgrad::data::HeaderlessTokens* headerless) {
  try {
    const auto file = headerless ? std::make_unique<xgrad::data::TokenFile>(path, *headerless)
                                 : std::make_unique<xgrad::data::TokenFile>(path);
    read_all(*file);
  } catch (const xgrad::FormatError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static xgrad_fuzz::MemoryFile memory;
  memory.write(data, size);
  using xgrad::data::TokenDtype;
  static const xgrad::data::HeaderlessTokens uint16{TokenDtype::UInt16, 50257}, uint32{TokenDtype::UInt32, 0};
  open(memory.path(), nullptr);
  open(memory.path(), &uint16);
  open(memory.path(), &uint32);
  return 0;
}
