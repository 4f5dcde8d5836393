// The atomic writer (write_file_atomically, behind every save): a save replaces the file in one
// rename, and a writer that throws, a failed stream, a write error halfway (a file size limit, as
// a full disk), a folder that cannot take a file and a failed rename each leave the previous file
// intact and readable, with no temporary file behind.
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <set>

#include <xgrad/serialize/atomic_file.hpp>
#include <xgrad/serialize/safetensors.hpp>
#include "serialize_util.hpp"
#include "test_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

namespace {

namespace fs = std::filesystem;

// The previous file of the failure tests: a valid safetensors file.
NamedArrays<float> previous_tensors() {
  NamedArrays<float> t;
  t.emplace_back("old", Array<float>{1.0f, 2.0f, 3.0f});
  return t;
}

void expect_runtime_error(const std::function<void()>& f, std::initializer_list<std::string> fragments) {
  try {
    f();
    ADD_FAILURE() << "expected std::runtime_error";
  } catch (const std::runtime_error& e) {
    for (const auto& fragment : fragments)
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
          << "\"" << e.what() << "\" lacks \"" << fragment << "\"";
  }
}

}  // namespace

TEST(AtomicFile, WritesAndReplacesLeavingNoTemporaryFile) {
  TempDir dir;
  const std::string path = dir.file("out.bin");
  write_file_atomically(path, [](std::ostream& out) { out << "first"; });
  EXPECT_EQ(read_bytes(path), "first");
  ::chmod(path.c_str(), 0640);
  write_file_atomically(path, [](std::ostream& out) { out << std::string(200000, 'x'); });
  EXPECT_EQ(read_bytes(path), std::string(200000, 'x'));
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);  // the replaced file's permissions are kept
  EXPECT_EQ(dir.entries(), std::set<std::string>{"out.bin"});
}

TEST(AtomicFile, WriterThrowingMidwayLeavesThePreviousFileIntact) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  save_safetensors(previous_tensors(), path);
  const std::string before = read_bytes(path);
  try {
    write_file_atomically(path, [](std::ostream& out) {
      out << std::string(100000, 'y');  // half written, part of it already on disk
      throw std::invalid_argument("bad value halfway");
    });
    ADD_FAILURE() << "expected an error";
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find("the writer threw: bad value halfway"), std::string::npos) << message;
    EXPECT_THROW(std::rethrow_if_nested(e), std::invalid_argument);
  }
  EXPECT_EQ(read_bytes(path), before);
  expect_same_arrays(previous_tensors(), load_safetensors<float>(path));
  EXPECT_EQ(dir.entries(), std::set<std::string>{"model.safetensors"});
}

TEST(AtomicFile, WriterLeavingAFailedStreamFails) {
  TempDir dir;
  const std::string path = dir.file("x");
  expect_runtime_error(
      [&] { write_file_atomically(path, [](std::ostream& out) { out.setstate(std::ios::badbit); }); },
      {path, "failed state"});
  EXPECT_TRUE(dir.entries().empty());
}

TEST(AtomicFile, WriteErrorMidwayLeavesThePreviousFileIntact) {
  // A real I/O failure that also happens as root (who ignores permission bits): a file size
  // limit (RLIMIT_FSIZE) makes write(2) fail with EFBIG halfway through the save, exactly as a
  // full disk fails it with ENOSPC.
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  save_safetensors(previous_tensors(), path);
  const std::string before = read_bytes(path);

  NamedArrays<float> big;
  big.emplace_back("big", Array<float>::from_shape({256, 1024}));
  big[0].second.fill(1.0f);
  rlimit original{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &original), 0);
  rlimit limited = original;
  limited.rlim_cur = 64 * 1024;
  auto* previous_handler = ::signal(SIGXFSZ, SIG_IGN);  // else the process is killed
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limited), 0);
  std::string message;
  try {
    save_safetensors(big, path);
  } catch (const std::runtime_error& e) {
    message = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &original);
  ::signal(SIGXFSZ, previous_handler);

  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find(std::strerror(EFBIG)), std::string::npos) << message;
  EXPECT_EQ(read_bytes(path), before);
  expect_same_arrays(previous_tensors(), load_safetensors<float>(path));
  EXPECT_EQ(dir.entries(), std::set<std::string>{"model.safetensors"});
}

TEST(AtomicFile, FolderThatCannotTakeAFile) {
  // A parent that is a regular file, or that does not exist, fails as root too.
  TempDir dir;
  write_bytes(dir.file("plain"), "not a folder");
  const std::string under_file = dir.file("plain/model.safetensors");
  expect_runtime_error([&] { save_safetensors(previous_tensors(), under_file); },
                       {under_file, "cannot create a temporary file", std::strerror(ENOTDIR)});
  const std::string missing = dir.file("missing/model.safetensors");
  expect_runtime_error([&] { save_safetensors(previous_tensors(), missing); },
                       {missing, std::strerror(ENOENT)});
  EXPECT_EQ(read_bytes(dir.file("plain")), "not a folder");
  EXPECT_EQ(dir.entries(), std::set<std::string>{"plain"});
}

TEST(AtomicFile, RenameFailureRemovesTheTemporaryFile) {
  // The target is a non-empty folder: everything is written, then the rename fails.
  TempDir dir;
  const std::string target = dir.file("folder");
  fs::create_directory(target);
  write_bytes(target + "/keep", "kept");
  expect_runtime_error([&] { save_safetensors(previous_tensors(), target); }, {target, "cannot rename"});
  EXPECT_EQ(read_bytes(target + "/keep"), "kept");
  EXPECT_EQ(dir.entries(), std::set<std::string>{"folder"});
}

// ---- modules -------------------------------------------------------------------------------

