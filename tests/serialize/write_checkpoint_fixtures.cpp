// Writes fixture_checkpoint() (checkpoint_fixture.hpp) as checkpoint.bin and checkpoint.json into
// the folder given, for a new checkpoint layout's fixtures. Refuses to overwrite: committed
// fixtures are never rewritten. Run through scripts/make_checkpoint_fixtures.sh.
#include <filesystem>
#include <iostream>
#include <string>

#include "checkpoint_fixture.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " FOLDER (e.g. tests/fixtures/serialize_v4)\n";
    return 2;
  }
  const std::filesystem::path folder = argv[1];
  std::filesystem::create_directories(folder);
  for (const char* name : xgrad::testing::kFixtureNames) {
    if (std::filesystem::exists(folder / name)) {
      std::cerr << (folder / name).string() << " exists: committed fixtures are never rewritten\n";
      return 1;
    }
  }
  for (const char* name : xgrad::testing::kFixtureNames) {
    xgrad::save_checkpoint(xgrad::testing::fixture_checkpoint(), (folder / name).string());
    std::cout << "wrote " << (folder / name).string() << "\n";
  }
  return 0;
}
