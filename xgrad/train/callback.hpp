// The Trainer's callbacks: user code called by the loop at its documented times (Lightning's
// Callback, Keras' callbacks and LambdaCallback).
#pragma once

#include <functional>
#include <map>
#include <string>

#include <xgrad/train/progress.hpp>

namespace xgrad::train {

class Trainer;

// User code called by the loop (Lightning's Callback, Keras' callbacks). Every hook runs on every
// rank; the default ones do nothing.
class Callback {
 public:
  virtual ~Callback() = default;
  // After each optimizer step; `loss` is the step's loss, the mean over ranks.
  virtual void on_train_batch_end(Trainer& trainer, int step, double loss);
  // After each evaluation, once its CSV row and progress line are written.
  virtual void on_validation_end(Trainer& trainer, const Metrics& metrics);
  // Before each checkpoint is written: add the program's own values to `metadata` (a state with
  // state_dict/load_state_dict, a DataLoader's position, is Trainer::track's to save and restore).
  // The Trainer's keys, and those of track(), are read-only: changing, removing or adding a "config." key or
  // one of the loop's own (loss_sum, loss_count, accuracy, elapsed, max_steps, planned_steps,
  // world_size, rank_generators) throws std::invalid_argument naming the key, and nothing is
  // written.
  virtual void on_save_checkpoint(Trainer& trainer, std::map<std::string, std::string>& metadata);
  // When every step is done (not when the run stops early).
  virtual void on_fit_end(Trainer& trainer);
};

// A Callback made of functions (Keras' LambdaCallback); an empty one is not called.
struct LambdaCallback : Callback {
  std::function<void(Trainer&, int, double)> train_batch_end;
  std::function<void(Trainer&, const Metrics&)> validation_end;
  std::function<void(Trainer&, std::map<std::string, std::string>&)> save_checkpoint;
  std::function<void(Trainer&)> fit_end;

  void on_train_batch_end(Trainer& trainer, int step, double loss) override;
  void on_validation_end(Trainer& trainer, const Metrics& metrics) override;
  void on_save_checkpoint(Trainer& trainer, std::map<std::string, std::string>& metadata) override;
  void on_fit_end(Trainer& trainer) override;
};

}  // namespace xgrad::train
