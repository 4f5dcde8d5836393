// The examples' --plot: the CSV log of xgrad::train::Trainer rendered to a PNG loss curve by
// examples/plot_loss.sh with gnuplot, when it is installed. Header-only; the program is compiled
// with XGRAD_EXAMPLES_DIR, the folder of plot_loss.sh (examples/CMakeLists.txt).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>

#include <xgrad/train/cli.hpp>

namespace plot {

inline void add_flag(CLI::App& app, std::string& png) {
  app.add_option("--plot", png, "loss curve PNG rendered with gnuplot at the end; empty: none")
      ->check(xgrad::train::cli::not_special_file())  // gnuplot would block on a FIFO
      ->capture_default_str();
}

// Renders `csv` to `png`; nothing when either is empty.
inline void render(const std::string& csv, const std::string& png) {
  if (csv.empty() || png.empty()) return;
  std::fflush(stdout);  // before the script's own output
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    std::printf(
        "loss curve not rendered: gnuplot is not installed (apt-get install gnuplot-nox), then:\n"
        "  sh %s/plot_loss.sh %s %s\n",
        XGRAD_EXAMPLES_DIR, csv.c_str(), png.c_str());
    return;
  }
  const std::string command = std::string("sh '") + XGRAD_EXAMPLES_DIR + "/plot_loss.sh' '" + csv + "' '" + png + "'";
  if (std::system(command.c_str()) != 0) std::printf("plot_loss.sh failed\n");
}

}  // namespace plot
