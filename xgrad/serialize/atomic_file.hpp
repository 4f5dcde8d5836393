// Saving a file so that it is never half written: readers see either the previous file or the
// complete new one, whatever happens during the save.
//
//   write_file_atomically("model.safetensors", [&](std::ostream& out) { out.write(...); });
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

// The loaders' side (RegularFile, read_regular_file) lives in the input layer; included here for
// the files that still reach it through this header.
#include <xgrad/base/input.hpp>

namespace xgrad {

// Calls `write` with a binary stream onto a new temporary file in the folder of `path`
// (".<name>.tmp-<pid>-<counter>-<clock>", created exclusively, so concurrent saves never share
// one), then flushes it, fsyncs it, closes it and renames it over `path` -- atomic on POSIX file
// systems -- and finally fsyncs the folder (best effort) so the rename survives a power loss.
// The new file keeps the permission bits of the file it replaces, or gets 0666 minus the umask.
//
// On any failure the temporary file is removed, the file at `path` is left as it was, and a
// std::runtime_error is thrown whose message names `path` and the reason:
//  - `write` throws: the message quotes its what(), and the exception stays attached
//    (std::throw_with_nested; std::rethrow_if_nested gives it back);
//  - a write, flush, fsync or close fails (full disk, file size limit, I/O error): strerror;
//  - the folder cannot take a new file (missing, not a folder, read-only, no permission);
//  - the rename fails (e.g. `path` is a folder);
//  - `path` exists and is neither a regular file nor a folder (a device such as /dev/null, a
//    FIFO, a socket): it is refused before anything is written, so a save never replaces one.
// `write` may also stop early by leaving the stream in a failed state (badbit/failbit). The
// stream is seekable (seekp, tellp), so a writer may go back to fill in a header at the end.
//
// A symbolic link is written through: the file it points to (after every link in the chain) is
// replaced atomically, in its own folder, and the link stays. A link that points nowhere is
// refused. (The checks and the rename are separate steps: a path swapped for a device by
// another process in between is not detected.)
//
// tests/test_safetensors.cpp forces each failure for real, also as root (who ignores
// permission bits): a `write` that throws halfway; RLIMIT_FSIZE, which makes write(2) fail
// with EFBIG halfway as a full disk would with ENOSPC; a parent path that is a regular file or
// missing; a target that is a folder (the rename fails).
void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write);

// A log that grows by lines while a program runs (the Trainer's CSV), where rewriting the whole
// file at each line would cost a rename and an fsync per line. The file is first written whole by
// write_file_atomically (`initial`: a header, the rows a resumed run keeps), so that a crash leaves
// the previous file or the new start, never a half-written one; each append() is then one
// write(2) at the end (O_APPEND): a reader sees whole lines, the lines written before a crash stay.
// A full disk makes append() throw (std::runtime_error naming the path), and may leave part of a
// line at the end. The open after the rename refuses (std::runtime_error) anything that is not a
// regular file by then, without blocking (O_NONBLOCK), as write_file_atomically refuses devices,
// FIFOs and sockets before it writes.
class AppendOnlyFile {
 public:
  AppendOnlyFile(const std::string& path, const std::string& initial);
  ~AppendOnlyFile();
  AppendOnlyFile(const AppendOnlyFile&) = delete;
  AppendOnlyFile& operator=(const AppendOnlyFile&) = delete;

  void append(const std::string& bytes);

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace xgrad
