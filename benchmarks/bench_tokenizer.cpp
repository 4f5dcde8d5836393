// bench_tokenizer: GPT-2's tokenizer (xgrad::text::BPETokenizer) encoding a text, by default the
// King James Bible (Debian's bible-kjv, 4.3 MB), with the GPT-2 files of tests/fixtures/tokenizer.
// The text is encoded line by line (one encode() call per line, the ids concatenated), as
// tokenizer_npm.cjs does with the npm package gpt-3-encoder, and also whole in one call. The first
// pass starts with an empty cache of merged pieces; the following ones find most pieces there.
// With --ids-out both programs write their line-by-line ids, which must be equal
// (benchmarks/README.md).
//
//   build/release/benchmarks/bench_tokenizer [--text FILE] [--tokenizer DIR] [--repeats N] [--ids-out FILE]
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include <xgrad/text/bpe.hpp>

#include "bench_util.hpp"

int main(int argc, char** argv) {
  CLI::App app{"GPT-2 tokenizer encoding speed"};
  std::string text_path, tokenizer_dir = std::string(XGRAD_SOURCE_DIR) + "/tests/fixtures/tokenizer", ids_out;
  int repeats = 5;
  app.add_option("--text", text_path, "text file to encode (default: the KJV through `bible`)");
  app.add_option("--tokenizer", tokenizer_dir, "folder with encoder.json + vocab.bpe (or tokenizer.json)");
  app.add_option("--repeats", repeats, "encodes after the first")->check(CLI::Range(1, 1000));
  app.add_option("--ids-out", ids_out, "write the ids, one JSON list");
  CLI11_PARSE(app, argc, argv);

  std::string text;
  if (text_path.empty()) {
    text = xgrad::bench::read_kjv();
    if (text.empty()) {
      std::cerr << "bench_tokenizer: the `bible` program printed nothing (apt-get install bible-kjv), or pass --text\n";
      return 1;
    }
  } else {
    std::ifstream in(text_path, std::ios::binary);
    if (!in) {
      std::cerr << "bench_tokenizer: cannot read --text " << text_path << "\n";
      return 1;
    }
    std::ostringstream s;
    s << in.rdbuf();
    text = s.str();
  }
  auto t0 = std::chrono::steady_clock::now();
  const auto tok = xgrad::text::BPETokenizer::load(tokenizer_dir);
  const double load_s = xgrad::bench::seconds_since(t0);

  std::vector<std::string_view> lines;  // split at '\n', as JavaScript's split('\n')
  for (std::size_t at = 0;;) {
    const std::size_t end = text.find('\n', at);
    lines.push_back(std::string_view(text).substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  const auto encode_lines = [&] {
    std::vector<std::int64_t> ids;
    for (const auto line : lines) {
      const auto part = tok.encode(line);
      ids.insert(ids.end(), part.begin(), part.end());
    }
    return ids;
  };
  t0 = std::chrono::steady_clock::now();
  const std::vector<std::int64_t> ids = encode_lines();
  const double first_s = xgrad::bench::seconds_since(t0);
  std::vector<double> warm, whole;
  std::size_t whole_tokens = 0;
  for (int r = 0; r < repeats; ++r) {
    t0 = std::chrono::steady_clock::now();
    const auto again = encode_lines();
    warm.push_back(xgrad::bench::seconds_since(t0));
    if (again != ids) {
      std::cerr << "bench_tokenizer: a repeated encode gave other ids\n";
      return 1;
    }
    t0 = std::chrono::steady_clock::now();
    whole_tokens = tok.encode(text).size();
    whole.push_back(xgrad::bench::seconds_since(t0));
  }
  t0 = std::chrono::steady_clock::now();
  const std::string decoded = tok.decode(tok.encode(text));
  const double decode_s = xgrad::bench::seconds_since(t0);
  const bool round_trip = decoded == text;
  const double mb = static_cast<double>(text.size()) / 1e6;
  std::printf(
      "{\"bench\": \"bench_tokenizer\", \"bytes\": %zu, \"tokens\": %zu, \"load_s\": %.3f, "
      "\"first_encode_s\": %.3f, \"encode_s\": %.3f, \"encode_mb_per_s\": %.2f, "
      "\"whole_text_tokens\": %zu, \"whole_text_encode_s\": %.3f, \"encode_decode_s\": %.3f, "
      "\"round_trip\": %s}\n",
      text.size(), ids.size(), load_s, first_s, xgrad::bench::median(warm), mb / xgrad::bench::median(warm),
      whole_tokens, xgrad::bench::median(whole), decode_s, round_trip ? "true" : "false");
  if (!ids_out.empty()) {
    std::ofstream out(ids_out);
    out << "[";
    for (std::size_t i = 0; i < ids.size(); ++i) out << (i ? "," : "") << ids[i];
    out << "]\n";
  }
  return round_trip ? 0 : 1;
}
