// A training checkpoint: everything a run needs to continue exactly as if it had never stopped --
// the model's state dict, the optimizer's state (per parameter by name, and every group's
// options including lr), the learning-rate schedule's state, the random generator's state (the
// dropout masks to come), the step, and string metadata of your own.
//
//   // save every 100 steps
//   xgrad::save_checkpoint("run.ckpt", *model, optimizer, &schedule, xgrad::default_generator(), step,
//                          {{"config", "d_model=64"}});
//
//   // resume: build model, optimizer and schedule as the run did (any seed), then
//   const auto ckpt = xgrad::load_checkpoint("run.ckpt", *model, optimizer, &schedule,
//                                            xgrad::default_generator());
//   for (std::int64_t step = ckpt.step; ...)  // the same steps, bit for bit
//
// The same in two parts, to inspect or edit a checkpoint between them:
//
//   auto ckpt = xgrad::Checkpoint<float>::capture(*model, optimizer, &schedule, generator, step);
//   xgrad::save_checkpoint(ckpt, "run.ckpt.json");       // JSON: the path ends in ".json"
//   auto loaded = xgrad::load_checkpoint<float>("run.ckpt.json");
//   loaded.restore(*model, optimizer, &schedule, generator);
//
// A distributed run (one process per rank, each with its own generator) keeps every rank's
// generator state in the metadata, under kRankGeneratorsKey, as one line of text; rank 0 writes
// the file and every rank resumes from it, taking its own state (xgrad/train/trainer.cpp):
//
//   std::vector<GeneratorState> states = ...;                 // gathered from every rank, by rank
//   metadata[kRankGeneratorsKey] = rank_generators_to_string(states);
//   generator.set_state(rank_generators_from_string(ckpt.metadata.at(kRankGeneratorsKey)).at(rank));
//
// The file is an archive of kind "checkpoint" (formats and safety in archive.hpp). A checkpoint
// holds its schedule's state only if it was captured with one, and restoring needs a schedule
// exactly when the checkpoint has one. The module's training flag is not part of the state (as in
// PyTorch): call model.train() or eval() after restoring.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <xgrad/serialize/archive.hpp>

namespace xgrad {

namespace detail {
// Keeps a parameter out of template argument deduction, so that nullptr or a derived schedule's
// address can be passed for `LRScheduler<T>*` (T comes from the model).
template <class T>
struct NoDeduce {
  using type = T;
};
}  // namespace detail

template <class T = float>
struct Checkpoint {
  nn::StateDict<T> model;
  OptimizerState<T> optimizer;  // parameters named as in `model`
  std::optional<optim::LRSchedulerState> scheduler;
  GeneratorState generator;
  std::int64_t step = 0;
  std::map<std::string, std::string> metadata;

  // Copies the current state; the optimizer's parameters must all belong to `model`.
  static Checkpoint capture(const nn::Module<T>& model, const optim::Optimizer<T>& optimizer,
                            const optim::LRScheduler<T>* scheduler, const Generator& generator, std::int64_t step,
                            std::map<std::string, std::string> metadata = {});

  // Loads the state into objects built like the captured ones: model (load_state_dict, strict),
  // optimizer (load_optimizer_state_dict), schedule (load_state) and generator. A mismatch throws
  // std::invalid_argument saying what differs, and leaves all four as they were.
  void restore(nn::Module<T>& model, optim::Optimizer<T>& optimizer, optim::LRScheduler<T>* scheduler,
               Generator& generator) const;
};

// The metadata key of the generator states of a distributed run's ranks.
inline constexpr const char* kRankGeneratorsKey = "rank_generators";
// "RankGenerators v1 n=2 0=<seed>,<s0>,<s1>,<s2>,<s3> 1=..." (rank r's state after "r=").
std::string rank_generators_to_string(const std::vector<GeneratorState>& states);
// The states, by rank; throws std::invalid_argument naming what is malformed (a missing or
// repeated rank, a count that is not n, a number that is not an unsigned 64-bit integer, an
// all-zero state, which xoshiro256** never reaches).
std::vector<GeneratorState> rank_generators_from_string(const std::string& text);

// Saves atomically (write_file_atomically): a failed save leaves the previous file intact.
template <class T>
void save_checkpoint(const Checkpoint<T>& checkpoint, const std::string& path);
// capture + save.
template <class T>
void save_checkpoint(const std::string& path, const nn::Module<T>& model, const optim::Optimizer<T>& optimizer,
                     const optim::LRScheduler<typename detail::NoDeduce<T>::type>* scheduler,
                     const Generator& generator, std::int64_t step, std::map<std::string, std::string> metadata = {});

// Throws std::runtime_error if the file cannot be read, FormatError if it is not a valid
// checkpoint (naming the file and the problem).
template <class T = float>
Checkpoint<T> load_checkpoint(const std::string& path);
// load + restore; returns the checkpoint (step, metadata).
template <class T>
Checkpoint<T> load_checkpoint(const std::string& path, nn::Module<T>& model, optim::Optimizer<T>& optimizer,
                              optim::LRScheduler<typename detail::NoDeduce<T>::type>* scheduler,
                              Generator& generator);

// The same in memory; `name` stands for the file in error messages.
template <class T>
void write_checkpoint(std::ostream& out, const Checkpoint<T>& checkpoint, ArchiveFormat format);
template <class T>
std::string checkpoint_bytes(const Checkpoint<T>& checkpoint, ArchiveFormat format);
template <class T = float>
Checkpoint<T> load_checkpoint_from_memory(const void* data, std::size_t size, ArchiveFormat format,
                                          const std::string& name = "<memory>");

}  // namespace xgrad
