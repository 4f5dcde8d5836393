// The output rule (docs/reliability.md, "Output rule"): a run's paths checked together before any
// work (xgrad::train::check_run_paths): no two outputs, and no output and input, name the same
// file -- by device and inode when it exists (a symbolic or hard link counts), by the resolved path
// otherwise, a folder's files included -- with a message naming both flags; the Trainer refuses
// its own colliding paths (csv_path == checkpoint_path, weights_path == checkpoint_path, csv_path
// == ckpt_path) before reading or writing anything. Also the Trainer's CSV (AppendOnlyFile) and
// the step count's flag named in its messages.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <xgrad/serialize/atomic_file.hpp>
#include <xgrad/train/trainer.hpp>

namespace {

namespace fs = std::filesystem;
namespace train = xgrad::train;
using train::RunPath;

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

// The message of the Refused that check_run_paths throws; "accepted" when it throws nothing.
std::string refusal(const std::vector<RunPath>& paths) {
  try {
    train::check_run_paths(paths);
  } catch (const train::Refused& e) {
    return e.what();
  }
  return "accepted";
}

class RunPaths : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("xgrad_run_paths_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string at(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(RunPaths, TwoOutputsNamingOneFileAreRefusedNamingBothFlags) {
  const std::string x = at("x");
  EXPECT_EQ(refusal({RunPath::output("--tokens", x), RunPath::output("--csv", x)}),
            "--tokens " + x + " and --csv " + x +
                " name the same file: two outputs would overwrite each other; expected different files");
  // Not there yet: the same path once resolved ("d/../x", "./x").
  const std::string other = (dir_ / "sub" / ".." / "x").string();
  fs::create_directories(dir_ / "sub");
  EXPECT_NE(refusal({RunPath::output("--plot", x), RunPath::output("--profile", other)}), "accepted");
  EXPECT_EQ(refusal({RunPath::output("--plot", x), RunPath::output("--profile", at("y"))}), "accepted");
  EXPECT_EQ(refusal({RunPath::output("--plot", ""), RunPath::output("--profile", "")}), "accepted");  // not given
}

TEST_F(RunPaths, LinksToOneFileAreTheSameFile) {
  write(dir_ / "real", "data");
  fs::create_symlink(dir_ / "real", dir_ / "soft");
  fs::create_hard_link(dir_ / "real", dir_ / "hard");
  fs::create_directories(dir_ / "d");
  fs::create_directory_symlink(dir_, dir_ / "d" / "up");  // d/up/real is real through a linked folder
  for (const char* name : {"soft", "hard", "d/up/real"}) {
    const std::string message = refusal({RunPath::input("--text", at("real")), RunPath::output("--csv", at(name))});
    EXPECT_EQ(message, "--text " + at("real") + " and --csv " + at(name) +
                           " name the same file: an output would overwrite an input; expected different files")
        << name;
  }
  // A file not there yet, reached through a linked folder.
  EXPECT_NE(refusal({RunPath::output("--csv", at("new")), RunPath::output("--plot", at("d/up/new"))}), "accepted");
  EXPECT_EQ(read(dir_ / "real"), "data");
}

TEST_F(RunPaths, AFoldersFilesCountAndSoDoesTheFolder) {
  fs::create_directories(dir_ / "gpt2");
  write(dir_ / "gpt2" / "model.safetensors", "weights");
  const RunPath hf = RunPath::input_folder("--hf", at("gpt2"), {"config.json", "model.safetensors"});
  EXPECT_EQ(refusal({hf, RunPath::output("--checkpoint", at("gpt2/model.safetensors"))}),
            "--hf " + at("gpt2") + " (its model.safetensors) and --checkpoint " + at("gpt2/model.safetensors") +
                " name the same file: an output would overwrite an input; expected different files");
  // config.json is not there: the same path is the same file all the same.
  EXPECT_NE(refusal({hf, RunPath::output("--tokens", at("gpt2/config.json"))}), "accepted");
  EXPECT_EQ(refusal({hf, RunPath::output("--csv", at("gpt2/log.csv"))}), "accepted");  // another file of the folder
  // An output folder and an output file of the same path; two output folders writing one file.
  const RunPath save = RunPath::output_folder("--save-hf", at("out"), {"config.json", "model.safetensors"});
  EXPECT_NE(refusal({save, RunPath::output("--csv", at("out"))}), "accepted");
  EXPECT_NE(refusal({save, RunPath::output("--csv", at("out/config.json"))}), "accepted");
  EXPECT_NE(refusal({save, RunPath::output_folder("--tokenizer", at("out"), {"config.json"})}), "accepted");
  EXPECT_EQ(refusal({save, RunPath::output_folder("--tokenizer", at("out"), {"vocab.bpe"})}), "accepted");
  // Writing the model back over its input folder.
  EXPECT_NE(refusal({hf, RunPath::output_folder("--save-hf", at("gpt2"), {"model.safetensors"})}), "accepted");
  EXPECT_EQ(read(dir_ / "gpt2" / "model.safetensors"), "weights");
}

TEST_F(RunPaths, InputsMayShareAndAnOutputMayReplaceTheInputItNames) {
  write(dir_ / "a.ckpt", "checkpoint");
  EXPECT_EQ(refusal({RunPath::input("--text", at("a.ckpt")), RunPath::input("--init", at("a.ckpt"))}), "accepted");
  EXPECT_EQ(refusal({RunPath::input("--resume", at("a.ckpt")),
                     RunPath::output("--checkpoint", at("a.ckpt")).may_replace("--resume")}),
            "accepted");
  EXPECT_NE(refusal({RunPath::input("--resume", at("a.ckpt")), RunPath::output("--csv", at("a.ckpt"))}), "accepted");
}

TEST_F(RunPaths, EachPathIsCheckedAsWell) {
  ASSERT_EQ(::mkfifo(at("fifo").c_str(), 0600), 0);
  EXPECT_EQ(refusal({RunPath::input("--text", at("fifo"))}),
            "cannot read --text " + at("fifo") + ": it is a FIFO (named pipe), not a regular file");
  EXPECT_EQ(refusal({RunPath::input("--text", "/dev/urandom")}),
            "cannot read --text /dev/urandom: it is a character device, not a regular file");
  EXPECT_EQ(refusal({RunPath::input("--text", at("missing"))}), "accepted");  // the program says it is missing
  write(dir_ / "file", "x");
  EXPECT_EQ(refusal({RunPath::input_folder("--hf", at("file"), {})}),
            "cannot read --hf " + at("file") + ": is a file, expected a folder");
  EXPECT_EQ(refusal({RunPath::output("--profile", at("fifo"))}),
            "--profile " + at("fifo") + ": it is a FIFO (named pipe), expected a regular file");
  EXPECT_EQ(refusal({RunPath::output("--profile", at("missing/trace.json"))}),
            "--profile " + at("missing/trace.json") + ": the folder " + at("missing") + " does not exist");
  EXPECT_EQ(refusal({RunPath::output_folder("--save-hf", at("file"), {})}),
            "--save-hf " + at("file") + ": is a file, expected a folder");
}

// ---- the Trainer's own paths -----------------------------------------------------------------

std::string trainer_refusal(train::TrainerOptions options) {
  options.max_steps = 5;
  train::Settings settings;
  try {
    train::Trainer trainer("p", options, settings);
  } catch (const train::Refused& e) {
    return e.what();
  }
  return "accepted";
}

TEST_F(RunPaths, TheTrainerRefusesItsOwnPathsNamingOneFile) {
  train::TrainerOptions o;
  o.checkpoint_path = o.csv_path = at("run.ckpt");
  EXPECT_EQ(trainer_refusal(o), "--checkpoint " + o.checkpoint_path + " and --csv " + o.csv_path +
                                    " name the same file: two outputs would overwrite each other; expected "
                                    "different files");
  o = {};
  o.checkpoint_path = o.weights_path = at("run.ckpt");
  EXPECT_NE(trainer_refusal(o).find("--checkpoint " + o.checkpoint_path + " and --save-weights"), std::string::npos);
  // In default_root_dir, a relative path and an absolute one.
  o = {};
  o.default_root_dir = dir_.string();
  o.csv_path = "log.csv";
  o.weights_path = at("log.csv");
  EXPECT_NE(trainer_refusal(o).find("--csv " + at("log.csv") + " and --save-weights"), std::string::npos);
  // The checkpoint being resumed is an input: the CSV would truncate it before it is read.
  write(dir_ / "old.ckpt", "not read");
  o = {};
  o.ckpt_path = o.csv_path = at("old.ckpt");
  EXPECT_EQ(trainer_refusal(o), "--resume " + o.ckpt_path + " and --csv " + o.csv_path +
                                    " name the same file: an output would overwrite an input; expected different "
                                    "files");
  EXPECT_EQ(read(dir_ / "old.ckpt"), "not read");
  o = {};
  o.checkpoint_path = o.csv_path = at("run.ckpt");
  o.enable_checkpointing = false;  // no checkpoint written: no collision
  EXPECT_EQ(trainer_refusal(o), "accepted");
  EXPECT_FALSE(fs::exists(dir_ / "run.ckpt"));
}

TEST_F(RunPaths, RunPathsOfTheTrainerAreResolvedInTheRootFolder) {
  train::TrainerOptions o;
  o.default_root_dir = "root";
  o.ckpt_path = "a.ckpt", o.checkpoint_path = "b.ckpt", o.csv_path = "/abs.csv", o.weights_path = "";
  const std::vector<RunPath> paths = train::run_paths(o);
  ASSERT_EQ(paths.size(), 4u);
  EXPECT_EQ(paths[0].flag + " " + paths[0].path, "--resume root/a.ckpt");
  EXPECT_EQ(paths[1].flag + " " + paths[1].path, "--checkpoint root/b.ckpt");
  EXPECT_EQ(paths[2].flag + " " + paths[2].path, "--csv /abs.csv");
  EXPECT_EQ(paths[3].flag + " " + paths[3].path, "--save-weights ");
  EXPECT_EQ(paths[1].replaceable, std::vector<std::string>{"--resume"});
}

// ---- the CSV: written whole at its start, then a row at a time -------------------------------

TEST_F(RunPaths, AppendOnlyFileStartsAtomicallyAndAppendsWholeLines) {
  const fs::path path = dir_ / "log.csv";
  write(path, "previous\n");
  fs::create_symlink(path, dir_ / "link.csv");
  {
    xgrad::AppendOnlyFile log((dir_ / "link.csv").string(), "step,loss\n");  // through the link, as a save
    log.append("1,0.5\n");
    EXPECT_EQ(read(path), "step,loss\n1,0.5\n");
    log.append("2,0.25\n");
  }
  EXPECT_TRUE(fs::is_symlink(dir_ / "link.csv"));
  EXPECT_EQ(read(path), "step,loss\n1,0.5\n2,0.25\n");
  ASSERT_EQ(::mkfifo((dir_ / "fifo").c_str(), 0600), 0);
  EXPECT_THROW(xgrad::AppendOnlyFile((dir_ / "fifo").string(), "x"), std::runtime_error);  // refused, not blocked
  EXPECT_THROW(xgrad::AppendOnlyFile("/dev/null", "x"), std::runtime_error);
  // No temporary file is left beside it.
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir_)) ++files;
  EXPECT_EQ(files, 3u);  // log.csv, link.csv, fifo
}

}  // namespace
