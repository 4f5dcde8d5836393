#include "progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include <xgrad/base/input.hpp>
#include <xgrad/train/files.hpp>

namespace xgrad::train {

namespace {

std::string format_duration(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

}  // namespace

// Under mpirun, a rank's stdout is a pseudo-terminal of Open MPI's even when mpirun's own output
// goes to a file: plain lines there.
Progress::Progress() : tty_(isatty(STDOUT_FILENO) != 0 && std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr) {}

std::string ValidationMetric::describe(double value) const {
  if (format) return format(value);
  char text[40];
  std::snprintf(text, sizeof text, "held-out accuracy %6.2f%%", 100 * value);
  return text;
}

std::string ValidationMetric::describe_pending() const { return format ? column + " -" : "held-out accuracy       -"; }

ValidationMetric ValidationMetric::loss(std::string column, std::string unit) {
  ValidationMetric m;
  m.column = std::move(column);
  m.format = [unit = std::move(unit)](double value) {
    char text[64];
    std::snprintf(text, sizeof text, "held-out %.4f%s%s", value, unit.empty() ? "" : " ", unit.c_str());
    return std::string(text);
  };
  return m;
}

void Progress::update(int step, int steps, double loss, const std::string& metric, int steps_run, double seconds,
                      bool row) {
  const double rate = seconds > 0 ? steps_run / seconds : 0;
  const double left = rate > 0 ? (steps - step) / rate : 0;
  char line[300];
  std::snprintf(line, sizeof line, "step %*d/%d | loss %.4f | %s | %5.1f steps/s | %s left",
                int(std::to_string(steps).size()), step, steps, loss, metric.c_str(), rate,
                format_duration(left).c_str());
  if (tty_) {
    const auto now = std::chrono::steady_clock::now();
    if (!row && step != steps && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    std::printf("\r%s\033[K", line);
  } else if (row) {
    std::printf("%s\n", line);
  }
  std::fflush(stdout);
  drawn_ = tty_;
}

void Progress::note(const std::string& message) {
  finish();
  std::printf("%s\n", message.c_str());
  std::fflush(stdout);
}

void Progress::finish() {
  if (drawn_) std::printf("\n");
  drawn_ = false;
}

namespace detail {

namespace {

// The rows of the CSV log `path` (if there is one) whose step is at most `step`: those of the run
// being resumed, up to its checkpoint. A row's step must be an int.
std::vector<std::string> rows_until(const std::string& path, int step) {
  std::vector<std::string> kept;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return kept;
  InputFileStream in("CsvLog", path);
  std::size_t number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (line.empty() || !std::isdigit(static_cast<unsigned char>(line[0]))) continue;  // the header
    const std::string where = "cannot resume the CSV log " + path + ": line " + std::to_string(number) + ": step";
    if (parse_integer<int>(where, std::string_view(line).substr(0, line.find(',')), 0) <= step) kept.push_back(line);
  }
  if (in.bad()) throw std::runtime_error("cannot resume the CSV log " + path + ": a read failed");
  return kept;
}

}  // namespace

CsvLog::CsvLog(const std::string& path, int resumed_step, const std::string& metric_column) {
  if (path.empty()) return;
  // A FIFO would block the open, a device such as /dev/zero would be read without end.
  const std::string kind = special_file_kind(path);
  if (!kind.empty())
    throw std::runtime_error("cannot write the CSV log " + path + ": it is " + kind +
                             ", not a regular file; expected a regular file path");
  std::string text = "step,loss," + metric_column + ",lr,elapsed\n";
  if (resumed_step > 0)
    for (const auto& line : rows_until(path, resumed_step)) text += line + '\n';
  try {
    out_ = std::make_unique<xgrad::AppendOnlyFile>(path, text);
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot write the CSV log " + path + ": " + e.what());
  }
}

void CsvLog::row(const Metrics& m) {
  if (!out_) return;
  char buf[160];
  std::snprintf(buf, sizeof buf, "%d,%.9g,%.9g,%.9g,%.3f\n", m.step, m.loss, m.val_metric, m.lr, m.elapsed);
  out_->append(buf);
}

}  // namespace detail

}  // namespace xgrad::train
