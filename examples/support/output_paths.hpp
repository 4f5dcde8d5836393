// The examples' paths, checked together before a program starts its work (xgrad::train::RunPath,
// check_run_paths): a typo in --checkpoint or --save-hf fails at once, naming the flag, rather
// than after an hour of training, and two flags naming one file (--tokens x --csv x, --checkpoint
// naming --hf's model.safetensors) are refused naming both. The Trainer's own paths come from
// xgrad::train::run_paths(options); each program adds its own:
//   output_paths::check(options, {RunPath::input("--text", text), output_paths::plot(plot, csv), ...});
#pragma once

#include <string>
#include <vector>

#include <xgrad/train/trainer.hpp>

namespace output_paths {

using xgrad::train::RunPath;

// The files of a Hugging Face GPT-2 folder that xgrad reads (--hf) or writes (--save-hf: the first two).
inline const std::vector<std::string> kHfFiles = {"config.json",    "model.safetensors", "model.safetensors.index.json",
                                                  "tokenizer.json", "vocab.json",        "merges.txt",
                                                  "encoder.json",   "vocab.bpe"};
// A tokenizer folder: read (any of these), or written by --train-tokenizer (encoder.json, vocab.bpe).
inline const std::vector<std::string> kTokenizerFiles = {"tokenizer.json", "vocab.json", "merges.txt", "encoder.json",
                                                         "vocab.bpe"};

// --export-onnx FILE and the files written beside it (FILE.sample.json, and more in `beside`).
inline std::vector<RunPath> onnx(const std::string& path, const std::vector<std::string>& beside = {".sample.json"}) {
  std::vector<RunPath> paths = {RunPath::output("--export-onnx", path)};
  for (const std::string& suffix : beside)
    paths.push_back(RunPath::output("the " + suffix + " file of --export-onnx", path.empty() ? "" : path + suffix));
  return paths;
}

// --plot, written when there is a CSV to plot.
inline RunPath plot(const std::string& png, const std::string& csv) {
  return RunPath::output("--plot", csv.empty() ? "" : png);
}

// The paths `own` checked with those of a Trainer with `options` (xgrad::train::run_paths).
inline void check(const xgrad::train::TrainerOptions& options, std::vector<RunPath> own) {
  std::vector<RunPath> paths = xgrad::train::run_paths(options);
  paths.insert(paths.end(), own.begin(), own.end());
  xgrad::train::check_run_paths(paths);
}

// The paths of a run without a Trainer (a tool mode: --train-tokenizer, --sample).
inline void check(const std::vector<RunPath>& paths) { xgrad::train::check_run_paths(paths); }

}  // namespace output_paths
