// serialize/hf_folder's writer of several files, all or none (save_hf_gpt2's failures are tested in
// tests/models/test_hf_gpt2.cpp): the files land together, and two names for one file are refused
// before anything is written.
#include "serialize_util.hpp"

#include <filesystem>
#include <string>

#include <xgrad/serialize/hf_folder.hpp>

using namespace xgrad;
using namespace xgrad::testing;
namespace fs = std::filesystem;

namespace {

FolderFile text_file(const std::string& name, const std::string& text) {
  return {name, [text](std::ostream& out) { out << text; }};
}

}  // namespace

TEST(WriteFilesTogether, WritesEveryFileAndLeavesNoTemporary) {
  TempDir dir;
  const std::string folder = dir.file("new/model");
  write_files_together(folder, {text_file("config.json", "{}\n"), text_file("model.safetensors", "weights")});
  EXPECT_EQ(read_bytes(folder + "/config.json"), "{}\n");
  EXPECT_EQ(read_bytes(folder + "/model.safetensors"), "weights");
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(folder)) ++entries;
  EXPECT_EQ(entries, 2u);
}

TEST(WriteFilesTogether, RefusesTwoNamesForOneFile) {
  TempDir dir;
  write_bytes(dir.file("model.safetensors"), "old weights");
  fs::create_symlink("model.safetensors", dir.file("config.json"));
  expect_error<std::runtime_error>(
      [&] {
        write_files_together(dir.path(), {text_file("model.safetensors", "new"), text_file("config.json", "{}")},
                             "save_x");
      },
      {"save_x", dir.file("config.json"), "same file as", dir.file("model.safetensors")});
  EXPECT_EQ(read_bytes(dir.file("model.safetensors")), "old weights");
  EXPECT_EQ(dir.entries(), (std::set<std::string>{"config.json", "model.safetensors"}));
}
