// DataLoaderState's text form (dataloader.hpp).
#include <xgrad/data/dataloader.hpp>

#include <sstream>

#include <xgrad/base/input.hpp>

namespace xgrad::data {

namespace {
constexpr const char* kStateHeader = "DataLoaderState v1";

std::uint64_t parse_u64(const std::string& text, const std::string& key, const std::string& all) {
  std::uint64_t v = 0;
  XGRAD_CHECK(integer_from_text(text, v) == NumberStatus::ok && text[0] != '-', "DataLoaderState::from_string: ", key,
              " must be a non-negative integer, got '", text, "' in '", all, "'");
  return v;
}
}  // namespace

std::string DataLoaderState::to_string() const {
  std::ostringstream s;
  s << kStateHeader << " epoch=" << epoch << " next_batch=" << next_batch << " dataset_size=" << dataset_size
    << " batch_size=" << batch_size << " sampler=";
  if (!sampler) {
    s << "none";
  } else {
    s << sampler->seed;
    for (std::uint64_t w : sampler->s) s << ',' << w;
  }
  return s.str();
}

DataLoaderState DataLoaderState::from_string(const std::string& text) {
  const std::string header = kStateHeader;
  XGRAD_CHECK(text.compare(0, header.size(), header) == 0, "DataLoaderState::from_string: expected text starting ",
              "with '", header, "', got '", text, "'");
  std::istringstream in(text.substr(header.size()));
  std::map<std::string, std::string> fields;
  std::string item;
  while (in >> item) {
    const auto eq = item.find('=');
    XGRAD_CHECK(eq != std::string::npos, "DataLoaderState::from_string: expected key=value, got '", item, "'");
    XGRAD_CHECK(fields.emplace(item.substr(0, eq), item.substr(eq + 1)).second,
                "DataLoaderState::from_string: '", item.substr(0, eq), "' appears twice in '", text, "'");
  }
  for (const char* key : {"epoch", "next_batch", "dataset_size", "batch_size", "sampler"})
    XGRAD_CHECK(fields.count(key), "DataLoaderState::from_string: '", key, "' is missing from '", text, "'");
  XGRAD_CHECK(fields.size() == 5, "DataLoaderState::from_string: unexpected fields in '", text, "'");
  DataLoaderState s;
  s.epoch = static_cast<std::int64_t>(parse_u64(fields["epoch"], "epoch", text));
  s.next_batch = parse_u64(fields["next_batch"], "next_batch", text);
  s.dataset_size = parse_u64(fields["dataset_size"], "dataset_size", text);
  s.batch_size = parse_u64(fields["batch_size"], "batch_size", text);
  if (fields["sampler"] != "none") {
    std::vector<std::uint64_t> words;
    std::istringstream w(fields["sampler"]);
    std::string part;
    while (std::getline(w, part, ',')) words.push_back(parse_u64(part, "sampler", text));
    XGRAD_CHECK(words.size() == 5, "DataLoaderState::from_string: sampler must be 'none' or 5 comma-separated ",
                "integers (seed and state), got '", fields["sampler"], "'");
    GeneratorState g;
    g.seed = words[0];
    for (int i = 0; i < 4; ++i) g.s[i] = words[i + 1];
    s.sampler = g;
  }
  return s;
}

}  // namespace xgrad::data
