// The examples' --plot: the CSV log of xgrad::train::Trainer (step,loss,<metric>,lr,elapsed)
// rendered to a PNG, one panel per metric, by examples/plot_metrics.sh with gnuplot, when it is
// installed. Header-only; the program is compiled with XGRAD_EXAMPLES_DIR, the folder of
// plot_metrics.sh (examples/CMakeLists.txt).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>

#include <xgrad/train/cli.hpp>

namespace plot {

inline void add_flag(CLI::App& app, std::string& png) {
  app.add_option("--plot", png,
                 "PNG of the CSV's metrics (loss, held-out metric, lr) rendered with gnuplot at the end "
                 "(examples/plot_metrics.sh); empty: none")
      ->check(xgrad::train::cli::not_special_file())  // gnuplot would block on a FIFO
      ->capture_default_str();
}

namespace detail {
inline std::string quoted(const std::string& s) {  // for sh: '...' with ' as '\''
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}
}  // namespace detail

// Renders `csv` to `png`, titled `title` (the program); nothing when either path is empty.
inline void render(const std::string& csv, const std::string& png, const std::string& title) {
  if (csv.empty() || png.empty()) return;
  std::fflush(stdout);  // before the script's own output
  const std::string script = std::string(XGRAD_EXAMPLES_DIR) + "/plot_metrics.sh";
  const std::string args = " --title " + detail::quoted(title) + " " + detail::quoted(csv) + " " + detail::quoted(png);
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    std::printf("metrics not plotted: gnuplot is not installed (apt-get install gnuplot-nox), then:\n  sh %s%s\n",
                script.c_str(), args.c_str());
    return;
  }
  if (std::system(("sh " + detail::quoted(script) + args).c_str()) != 0) std::printf("plot_metrics.sh failed\n");
}

// The same, titled by the CSV's file name (plot_metrics.sh's default).
inline void render(const std::string& csv, const std::string& png) {
  std::string title = csv.substr(csv.find_last_of('/') + 1);
  if (title.size() > 4 && title.compare(title.size() - 4, 4, ".csv") == 0) title.resize(title.size() - 4);
  render(csv, png, title);
}

}  // namespace plot
