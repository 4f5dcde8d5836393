// bench_tokenizer_json: xgrad's HFTokenizer and Hugging Face's tokenizers library (the npm package
// `tokenizers`, the Rust library's Node binding; tokenizer_json_npm.cjs) encoding the same text in
// one run, by default the whole King James Bible (Debian's bible-kjv, 4.3 MB) in one call with the
// Llama-3-style tokenizer.json of tests/fixtures/tokenizers. Each side times its first encode (a
// fresh tokenizer, empty cache of merged words) and the median of the repeats; the ids of both must
// agree (count and FNV-1a hash). Without the npm package (or node) only xgrad's times are printed.
//
//   npm install --prefix /tmp/hf_tokenizers tokenizers@0.23.2
//   build/release/benchmarks/bench_tokenizer_json [--tokenizer FILE] [--text FILE] [--repeats N]
//       [--node-modules /tmp/hf_tokenizers/node_modules]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <xgrad/text/tokenizer_json.hpp>

#include "bench_util.hpp"

namespace {

std::uint64_t fnv1a(const std::vector<std::int64_t>& ids) {  // over the ids as little-endian uint32
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (const std::int64_t id : ids)
    for (int k = 0; k < 4; ++k) {
      hash ^= (static_cast<std::uint64_t>(id) >> (8 * k)) & 0xff;
      hash *= 0x100000001b3ull;
    }
  return hash;
}

// The npm package's JSON line, or "" when it could not run.
std::string run_npm(const std::string& node_modules, const std::string& tokenizer, const std::string& text_path,
                    int repeats) {
  const std::string command = "NODE_PATH='" + node_modules + "' node '" + std::string(XGRAD_SOURCE_DIR) +
                              "/benchmarks/tokenizer_json_npm.cjs' '" + tokenizer + "' '" + text_path + "' " +
                              std::to_string(repeats);
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return "";
  std::string out;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  const int status = pclose(pipe);
  return status == 0 ? out : "";
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return in ? s.str() : "";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tokenizer.json encoding speed: xgrad against Hugging Face's tokenizers"};
  std::string tokenizer = std::string(XGRAD_SOURCE_DIR) + "/tests/fixtures/tokenizers/bytelevel-llama3/tokenizer.json";
  std::string text_path, node_modules = "/tmp/hf_tokenizers/node_modules";
  int repeats = 3;
  app.add_option("--tokenizer", tokenizer, "tokenizer.json");
  app.add_option("--text", text_path, "text file to encode (default: the KJV through `bible`)");
  app.add_option("--repeats", repeats, "encodes after the first, on each side")->check(CLI::Range(1, 100));
  app.add_option("--node-modules", node_modules, "the node_modules folder that holds the npm package tokenizers");
  CLI11_PARSE(app, argc, argv);

  std::string text, temporary;  // the KJV goes to a temporary file for the npm side
  if (text_path.empty()) {
    text = xgrad::bench::read_kjv();
    temporary = text_path = "/tmp/bench_tokenizer_json_kjv." + std::to_string(getpid()) + ".txt";
    std::ofstream(text_path, std::ios::binary) << text;
  } else {
    text = read_text(text_path);
  }
  if (text.empty()) {
    std::cerr << "bench_tokenizer_json: no text (apt-get install bible-kjv, or pass --text)\n";
    return 1;
  }
  auto t0 = std::chrono::steady_clock::now();
  const auto tok = xgrad::text::HFTokenizer::from_file(tokenizer);
  const double load_s = xgrad::bench::seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  const std::vector<std::int64_t> ids = tok.encode(text, false);
  const double first_s = xgrad::bench::seconds_since(t0);
  std::vector<double> warm;
  for (int r = 0; r < repeats; ++r) {
    t0 = std::chrono::steady_clock::now();
    if (tok.encode(text, false) != ids) {
      std::cerr << "bench_tokenizer_json: a repeated encode gave other ids\n";
      return 1;
    }
    warm.push_back(xgrad::bench::seconds_since(t0));
  }
  const bool round_trip = tok.decode(ids) == text;
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(fnv1a(ids)));
  std::printf(
      "{\"bench\": \"xgrad HFTokenizer\", \"bytes\": %zu, \"tokens\": %zu, \"ids_fnv1a\": \"%s\", \"load_s\": %.3f, "
      "\"first_encode_s\": %.3f, \"encode_s\": %.3f, \"round_trip\": %s}\n",
      text.size(), ids.size(), hash, load_s, first_s, xgrad::bench::median(warm), round_trip ? "true" : "false");
  std::fflush(stdout);
  const std::string npm = run_npm(node_modules, tokenizer, text_path, repeats);
  if (!temporary.empty()) std::remove(temporary.c_str());
  if (npm.empty()) {
    std::printf("npm tokenizers: not run (node, or the package under %s, is missing)\n", node_modules.c_str());
    return round_trip ? 0 : 1;
  }
  std::printf("%s", npm.c_str());
  const std::string expected = "\"tokens\":" + std::to_string(ids.size()) + ",\"ids_fnv1a\":\"" +
                               std::string(hash).erase(0, std::string(hash).find_first_not_of('0')) + "\"";
  const bool same = npm.find(expected) != std::string::npos;
  std::printf("ids equal: %s\n", same ? "yes" : "NO");
  return round_trip && same ? 0 : 1;
}
