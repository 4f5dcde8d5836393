// The sampling flags of the GPT programs: --temperature, --top-k, --top-p, --greedy, each checked
// with one line naming the flag (xgrad::SamplingOptions).
#pragma once

#include <cmath>
#include <string>

#include <xgrad/train/cli.hpp>
#include <xgrad/xgrad.hpp>

namespace sampling_flags {

inline void add(CLI::App& app, xgrad::SamplingOptions& options, const std::string& unit = "tokens") {
  namespace cli = xgrad::train::cli;
  app.add_option("--temperature", options.temperature, "divides the logits before sampling")
      ->check(CLI::Validator(
          [](std::string& v) {
            double x = 0;
            return cli::detail::to_double(v, x) && x > 0 && std::isfinite(x)
                       ? std::string()
                       : "expected a number > 0 (for argmax decoding pass --greedy)" + cli::detail::got(v);
          },
          "> 0"))
      ->capture_default_str();
  app.add_option("--top-k", options.top_k, "sample among the k most likely " + unit + " (default: all)")
      ->check(cli::integer_in(1, 1000000000));
  app.add_option("--top-p", options.top_p, "nucleus sampling: the most likely " + unit + " reaching p, in (0, 1]")
      ->check(CLI::Validator(
          [](std::string& v) {
            double x = 0;
            return cli::detail::to_double(v, x) && x > 0 && x <= 1
                       ? std::string()
                       : "expected a number in (0, 1]" + cli::detail::got(v);
          },
          "(0, 1]"))
      ->capture_default_str();
  app.add_flag("--greedy", options.greedy, "the most likely token each time (argmax)");
}

// --tokens N (how many --sample generates) and --window W (past the model's context, generate from
// the last W tokens; 0: refuse going past it; -1, the default: the context length).
inline void add_length(CLI::App& app, int& tokens, int& window, const std::string& unit = "tokens") {
  namespace cli = xgrad::train::cli;
  app.add_option("--tokens", tokens, unit + " --sample generates")
      ->check(cli::integer_in(1, 1000000))
      ->capture_default_str();
  app.add_option("--window", window,
                 "past the context, keep generating from the last W " + unit +
                     "; 0: refuse going past it (default: the context length)")
      ->check(cli::integer_in(0, 65536));
}

}  // namespace sampling_flags
