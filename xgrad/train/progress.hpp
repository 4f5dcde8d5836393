// What the Trainer shows and logs at each step and evaluation: the validation value's name and
// text (ValidationMetric), the progress line (Progress) and the CSV log.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <xgrad/serialize/atomic_file.hpp>

namespace xgrad::train {

// How the validation value is shown: its CSV column and its text on the progress line.
struct ValidationMetric {
  // The CSV column (Lightning's logged name): "val_accuracy", "val_loss"...
  std::string column = "val_accuracy";
  // The value -> the progress line's text; null: "held-out accuracy  71.20%" (a fraction).
  std::function<std::string(double)> format;

  std::string describe(double value) const;
  // The progress line's text before the first evaluation: "held-out accuracy       -" (format
  // null), else "<column> -".
  std::string describe_pending() const;
  // A metric named `column` shown as "held-out <value> <unit>" with 4 decimals ("val_loss",
  // "nats/token"): a loss.
  static ValidationMetric loss(std::string column = "val_loss", std::string unit = "");
};

// The loop's numbers at an evaluation.
struct Metrics {
  int step;           // steps done
  double loss;        // mean training loss since the previous evaluation (mean over ranks)
  double val_metric;  // the validation function's value (named TrainerOptions::metric.column)
  double lr;          // the learning rate of this step's update
  double elapsed;     // seconds of training over every run
};

// One line redrawn in place with '\r' on a terminal (at most 10 times a second); on a pipe or
// file, one plain line per evaluation:
//   step  50/300 | loss 1.2345 | held-out accuracy  71.20% | 120.3 steps/s | 0:02 left
class Progress {
 public:
  Progress();
  // steps_run and seconds: this run's, for the speed and the time left; metric: the validation
  // value as ValidationMetric::describe shows it.
  void update(int step, int steps, double loss, const std::string& metric, int steps_run, double seconds, bool row);
  void note(const std::string& message);  // a line of its own, above the progress line
  void finish();                          // ends the redrawn line

 private:
  bool tty_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
};

namespace detail {

// The Trainer's CSV log: step,loss,<ValidationMetric::column>,lr,elapsed, one row per evaluation.
// A resumed run keeps the rows up to its step (a run stopped after its last checkpoint may have
// written more) and appends. An empty path: no file. The header and the kept rows are written
// atomically, each row is then appended whole (xgrad::AppendOnlyFile). A special file (a FIFO
// would block the open, /dev/zero be read without end) is refused (std::runtime_error).
class CsvLog {
 public:
  CsvLog(const std::string& path, int resumed_step, const std::string& metric_column);
  void row(const Metrics& m);

 private:
  std::unique_ptr<xgrad::AppendOnlyFile> out_;
};

}  // namespace detail

}  // namespace xgrad::train
