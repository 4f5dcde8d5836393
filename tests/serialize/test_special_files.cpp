// Loading and saving meet special files: a loader refuses anything but a regular file before
// reading (an endless /dev/zero, a FIFO without a writer, a folder) and reads no more than the
// file's size; a save refuses a target that is a device or a FIFO, and writes through a symbolic
// link to the file it points to. safetensors shapes have at most 64 dims.
#include "serialize_util.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <xgrad/nn/nn.hpp>

using namespace xgrad;
using namespace xgrad::testing;

namespace {

// Runs f in a child process (memory capped at 1 GiB) and returns the message of what it threw,
// "no exception", or "TIMEOUT" when it did not finish within `seconds` (the child is killed):
// a load that blocks or reads forever must not hang the test.
std::string outcome_in_child(const std::function<void()>& f, int seconds = 10) {
  int fds[2];
  if (::pipe(fds) != 0) return "pipe failed";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
#if !defined(__SANITIZE_ADDRESS__)  // ASan maps terabytes of shadow: the timeout alone guards there
    rlimit limit{1u << 30, 1u << 30};
    ::setrlimit(RLIMIT_AS, &limit);
#endif
    std::string result = "no exception";
    try {
      f();
    } catch (const std::exception& e) {
      result = e.what();
    }
    const ssize_t ignored = ::write(fds[1], result.data(), result.size());
    (void)ignored;
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string result;
  pollfd p{fds[0], POLLIN, 0};
  bool timed_out = false;
  for (;;) {
    if (::poll(&p, 1, seconds * 1000) <= 0) {
      timed_out = true;
      break;
    }
    char buffer[4096];
    const ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    if (n <= 0) break;
    result.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return timed_out ? "TIMEOUT" : result;
}

void expect_outcome(const std::function<void()>& f, std::initializer_list<std::string> fragments) {
  const std::string m = outcome_in_child(f);
  for (const auto& fragment : fragments) EXPECT_NE(m.find(fragment), std::string::npos) << m << "\nlacks: " << fragment;
}

// Every loader on `path`.
void expect_every_loader_refuses(const std::string& path, const std::string& what) {
  const std::string tail = "cannot read '" + path + "': it is " + what + ", not a regular file";
  expect_outcome([&] {
    nn::Linear<float> m(2, 2);
    load(m, path);
  }, {"load: " + tail});
  expect_outcome([&] { load_state_dict<float>(path); }, {"load_state_dict: " + tail});
  expect_outcome([&] { load_checkpoint<float>(path); }, {"load_checkpoint: " + tail});
  expect_outcome([&] { load_safetensors<float>(path); }, {"safetensors: " + tail});
  expect_outcome([&] { read_safetensors_header(path); }, {"safetensors: " + tail});
}

}  // namespace

TEST(SpecialFiles, LoadersRefuseDevicesFifosAndFoldersWithoutReadingOrBlocking) {
  TempDir dir;
  expect_every_loader_refuses("/dev/zero", "a character device");
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_every_loader_refuses(fifo, "a FIFO (named pipe)");  // no writer: used to block forever
  expect_every_loader_refuses(dir.file(""), "a folder");
}

TEST(SpecialFiles, LoadersStillReadRegularFilesAndLinksToThem) {
  TempDir dir;
  manual_seed(1);
  nn::Linear<float> a(3, 2), b(3, 2);
  save(a, dir.file("m.xgrad"));
  save_safetensors(a.state_dict(), dir.file("m.safetensors"));
  std::filesystem::create_symlink(dir.file("m.xgrad"), dir.file("link.xgrad"));
  load(b, dir.file("link.xgrad"));
  expect_same_state_dict(a.state_dict(), b.state_dict());
  EXPECT_EQ(load_safetensors<float>(dir.file("m.safetensors")).size(), 2u);
  // A file cut short is a format error, not a read past its end.
  const std::string bytes = read_bytes(dir.file("m.xgrad"));
  write_bytes(dir.file("cut.xgrad"), bytes.substr(0, bytes.size() / 2));
  expect_error<FormatError>([&] { load(b, dir.file("cut.xgrad")); }, {"cut.xgrad"});
}

TEST(SpecialFiles, SavesRefuseDevicesAndFifos) {
  TempDir dir;
  nn::Linear<float> m(2, 2);
  // A FIFO as the target: refused, and it stays a FIFO (it used to be replaced by a file).
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_error<std::runtime_error>([&] { save(m, fifo); },
                                   {"cannot save '" + fifo + "'", "it is a FIFO (named pipe), not a regular file; refusing"});
  expect_error<std::runtime_error>([&] { save_safetensors(m.state_dict(), fifo); }, {"a FIFO"});
  struct stat st {};
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));

  // A character device: a node like /dev/null made in the temporary folder when we may (as
  // root, a regression must not replace the real /dev/null), else /dev/null itself when we are
  // not root (then nothing could replace it anyway).
  std::string device = dir.file("null");
  if (::mknod(device.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) {
    if (::geteuid() == 0) GTEST_SKIP() << "cannot mknod a device as root here";
    device = "/dev/null";
  }
  expect_error<std::runtime_error>([&] { save(m, device); }, {"it is a character device, not a regular file"});
  expect_error<std::runtime_error>(
      [&] {
        Checkpoint<float> c;
        save_checkpoint(c, device);
      },
      {"it is a character device"});
  ASSERT_EQ(::lstat(device.c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  // A link to a device is refused too, naming the device.
  std::filesystem::create_symlink(device, dir.file("to-device"));
  expect_error<std::runtime_error>([&] { save(m, dir.file("to-device")); }, {"a character device ('" + device + "')"});
  for (const auto& name : dir.entries()) EXPECT_EQ(name.find(".tmp-"), std::string::npos) << name;
}

TEST(SpecialFiles, SavingThroughASymlinkReplacesItsTargetAndKeepsTheLink) {
  TempDir dir;
  manual_seed(2);
  nn::Linear<float> a(3, 2), b(3, 2);
  std::filesystem::create_directory(dir.file("runs"));
  write_bytes(dir.file("runs/real.xgrad"), "old contents");
  std::filesystem::create_symlink("runs/real.xgrad", dir.file("latest.xgrad"));  // relative, as ln -s makes
  std::filesystem::create_symlink(dir.file("latest.xgrad"), dir.file("chain.xgrad"));  // a link to a link
  save(a, dir.file("chain.xgrad"));
  EXPECT_TRUE(std::filesystem::is_symlink(dir.file("latest.xgrad")));
  EXPECT_TRUE(std::filesystem::is_symlink(dir.file("chain.xgrad")));
  load(b, dir.file("runs/real.xgrad"));
  expect_same_state_dict(a.state_dict(), b.state_dict());
  EXPECT_EQ(dir.entries(), (std::set<std::string>{"chain.xgrad", "latest.xgrad", "runs"}));
  for (const auto& e : std::filesystem::directory_iterator(dir.file("runs")))
    EXPECT_EQ(e.path().filename(), "real.xgrad");  // no temporary file left next to the target

  // A link that points nowhere is refused; nothing is created.
  std::filesystem::create_symlink(dir.file("missing.xgrad"), dir.file("dangling.xgrad"));
  expect_error<std::runtime_error>([&] { save(a, dir.file("dangling.xgrad")); },
                                   {"symbolic link that cannot be resolved"});
  EXPECT_FALSE(std::filesystem::exists(dir.file("missing.xgrad")));
}

TEST(SpecialFiles, SafetensorsShapesHaveAtMost64Dims) {
  auto file = [](std::size_t dims) {
    std::string shape = "[";
    for (std::size_t i = 0; i < dims; ++i) shape += i ? ",1" : "1";
    std::string header = R"({"w":{"dtype":"F32","shape":)" + shape + R"(],"data_offsets":[0,4]}})";
    header.append((8 - header.size() % 8) % 8, ' ');
    std::string bytes(8, '\0');
    for (std::size_t i = 0, n = header.size(); i < 8; ++i, n >>= 8) bytes[i] = static_cast<char>(n & 0xFF);
    return bytes + header + std::string(4, '\0');
  };
  const std::string ok = file(64);
  EXPECT_EQ(load_safetensors_from_memory<float>(ok.data(), ok.size()).at(0).second.dimension(), 64u);
  for (std::size_t dims : {65u, 1000000u}) {  // a million dims used to load (slowly)
    const std::string bad = file(dims);
    expect_error<FormatError>([&] { load_safetensors_from_memory<float>(bad.data(), bad.size()); },
                              {"entry \"w\": shape has more than 64 dimensions"});
  }
  TempDir dir;
  write_bytes(dir.file("deep.safetensors"), file(65));
  expect_error<FormatError>([&] { load_safetensors<float>(dir.file("deep.safetensors")); },
                            {"deep.safetensors", "more than 64 dimensions"});
}
