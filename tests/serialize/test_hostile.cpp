// Hostile files for the cereal loaders: a checkpoint truncated at every byte, 2000 seeded
// single-byte corruptions per format, length fields forged to claim 2^60 elements (which must
// throw before allocating: under ASan such an allocation aborts), shape products that overflow,
// bytes that are not bools, nesting that would exhaust the stack. Each file either loads a valid
// state or throws FormatError; nothing crashes (the suite also runs under ASan and UBSan).
#include <cstdio>
#include <limits>
#include <random>

#include "serialize_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

namespace {

std::string le64(std::uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return s;
}

std::string le_double(double x) {
  std::uint64_t bits;
  std::memcpy(&bits, &x, 8);
  return le64(bits);
}

// `bytes` with the only occurrence of `pattern` replaced (and the checksum recomputed).
std::string forge(const std::string& bytes, const std::string& pattern, const std::string& replacement) {
  const std::size_t at = bytes.find(pattern);
  EXPECT_NE(at, std::string::npos) << "pattern not found";
  EXPECT_EQ(bytes.find(pattern, at + 1), std::string::npos) << "pattern not unique";
  std::string forged = bytes;
  if (at != std::string::npos) forged.replace(at, pattern.size(), replacement);
  return reseal(bytes, std::move(forged));
}

template <class F>
void expect_format_error(F&& load, std::initializer_list<std::string> fragments) {
  expect_error<FormatError>([&] { load(); }, fragments);
}

nn::StateDict<float> one_tensor() {
  nn::StateDict<float> s;
  Array<float> w = Array<float>::from_shape({3, 5});
  for (std::size_t i = 0; i < w.size(); ++i) w.data()[i] = 0.25f * static_cast<float>(i);
  s.insert("weight", w);
  return s;
}

nn::StateDict<float> load_binary(const std::string& bytes) {
  return load_state_dict_from_memory<float>(bytes.data(), bytes.size(), ArchiveFormat::binary, "forged.xgrad");
}
nn::StateDict<float> load_json(const std::string& text) {
  return load_state_dict_from_memory<float>(text.data(), text.size(), ArchiveFormat::json, "forged.json");
}

// Loads `bytes` as a checkpoint; if it loads, restores it into fresh objects (which may refuse
// with std::invalid_argument) and checks that saving it again gives a file that loads the same.
// Returns whether it loaded; any exception other than FormatError / invalid_argument fails.
bool load_or_reject(const std::string& bytes, ArchiveFormat format) {
  Checkpoint<float> c;
  try {
    c = load_checkpoint_from_memory<float>(bytes.data(), bytes.size(), format);
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("load_checkpoint: '<memory>': "), std::string::npos) << e.what();
    return false;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a FormatError: " << e.what();
    return false;
  }
  SmallRun fresh(3, 0);
  try {
    c.restore(*fresh.model, *fresh.optimizer, fresh.scheduler.get(), fresh.generator);
  } catch (const std::invalid_argument&) {
  }
  try {
    const std::string again = checkpoint_bytes(c, format);
    EXPECT_EQ(checkpoint_bytes(load_checkpoint_from_memory<float>(again.data(), again.size(), format), format), again);
  } catch (const std::invalid_argument&) {
    // JSON cannot hold some values a binary file can (a non-finite lr): the save refuses.
  }
  return true;
}

}  // namespace

TEST(SerializeHostile, EveryTruncationOfABinaryCheckpointThrows) {
  const std::string bytes = checkpoint_bytes(SmallRun(1, 2).capture(), ArchiveFormat::binary);
  ASSERT_TRUE(load_or_reject(bytes, ArchiveFormat::binary));
  TempDir dir;
  const std::string path = dir.file("t.ckpt");
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    SCOPED_TRACE("prefix of " + std::to_string(n) + " bytes");
    EXPECT_FALSE(load_or_reject(bytes.substr(0, n), ArchiveFormat::binary));
    if (n % 16 == 0) {  // and through a file, the way users load
      write_bytes(path, bytes.substr(0, n));
      EXPECT_THROW(load_checkpoint<float>(path), FormatError);
    }
  }
}

TEST(SerializeHostile, EveryTruncationOfAJsonCheckpointThrows) {
  // Format 2's checksum covers the whole text, the final newline too.
  const std::string text = checkpoint_bytes(SmallRun(1, 2).capture(), ArchiveFormat::json);
  ASSERT_TRUE(load_or_reject(text, ArchiveFormat::json));
  for (std::size_t n = 0; n < text.size(); ++n) {
    SCOPED_TRACE("prefix of " + std::to_string(n) + " bytes");
    EXPECT_FALSE(load_or_reject(text.substr(0, n), ArchiveFormat::json));
  }
}

TEST(SerializeHostile, EverySingleByteCorruptionIsRejected) {
  for (ArchiveFormat format : {ArchiveFormat::binary, ArchiveFormat::json}) {
    const std::string bytes = checkpoint_bytes(SmallRun(1, 2).capture(), format);
    std::mt19937_64 rng(format == ArchiveFormat::binary ? 2024 : 2025);
    std::size_t loaded = 0, rejected = 0;
    for (int trial = 0; trial < 2000; ++trial) {
      const std::size_t at = rng() % bytes.size();
      std::string corrupt = bytes;
      if (format == ArchiveFormat::json && trial % 2 == 0) {
        // A character JSON gives meaning to, so that more corruptions get past the parser.
        const std::string alphabet = "0123456789-+.eE[]{},:\" tfn";
        do corrupt[at] = alphabet[rng() % alphabet.size()];
        while (corrupt[at] == bytes[at]);
      } else {
        corrupt[at] = static_cast<char>(static_cast<unsigned char>(corrupt[at]) ^ (1 + rng() % 255));
      }
      SCOPED_TRACE("byte " + std::to_string(at));
      (load_or_reject(corrupt, format) ? loaded : rejected)++;
    }
    // The checksum catches what the structure cannot: a corrupt data byte, a changed digit.
    EXPECT_EQ(loaded, 0u);
    EXPECT_EQ(rejected, 2000u);
  }
}

TEST(SerializeHostile, FlippingAnyBitOfASmallArchiveOrCheckpointIsRefused) {
  // Every bit of every byte, one at a time, of a state dict archive and a checkpoint in both
  // formats: each must throw FormatError naming the file (never load other values), saying why.
  const std::string name = "flipped";
  for (ArchiveFormat format : {ArchiveFormat::binary, ArchiveFormat::json}) {
    const std::string archive = state_dict_bytes(one_tensor(), format);
    const std::string checkpoint = checkpoint_bytes(SmallRun(1, 1).capture(), format);
    for (std::size_t at = 0; at < archive.size(); ++at)
      for (int bit = 0; bit < 8; ++bit) {
        std::string corrupt = archive;
        corrupt[at] = static_cast<char>(corrupt[at] ^ (1 << bit));
        try {
          load_state_dict_from_memory<float>(corrupt.data(), corrupt.size(), format, name);
          ADD_FAILURE() << "archive byte " << at << " bit " << bit << " flipped: loaded";
        } catch (const FormatError& e) {
          EXPECT_EQ(std::string(e.what()).rfind("load_state_dict: 'flipped': ", 0), 0u) << e.what();
        }
      }
    std::size_t checksum_said = 0, flips = 0;
    for (std::size_t at = 0; at < checkpoint.size(); ++at)
      for (int bit = 0; bit < 8; bit += 3) {  // bits 0, 3, 6 of every byte
        std::string corrupt = checkpoint;
        corrupt[at] = static_cast<char>(corrupt[at] ^ (1 << bit));
        ++flips;
        try {
          load_checkpoint_from_memory<float>(corrupt.data(), corrupt.size(), format);
          ADD_FAILURE() << "checkpoint byte " << at << " bit " << bit << " flipped: loaded";
        } catch (const FormatError& e) {
          checksum_said += std::string(e.what()).find("checksum") != std::string::npos;
        }
      }
    // In a binary file most flips fall in the content, where only the checksum can tell (in JSON
    // most break the syntax first).
    if (format == ArchiveFormat::binary) {
      EXPECT_GT(checksum_said, flips / 2);
    }
    std::printf("[bit flips] %s checkpoint: %zu flips refused, %zu by the checksum\n",
                format == ArchiveFormat::json ? "json" : "binary", flips, checksum_said);
  }
}

TEST(SerializeHostile, TruncationsSayTruncatedAndSpecialPathsSayWhatTheyAre) {
  const std::string bytes = checkpoint_bytes(SmallRun(1, 1).capture(), ArchiveFormat::binary);
  for (std::size_t n = 1; n < bytes.size(); ++n) {
    try {
      load_checkpoint_from_memory<float>(bytes.data(), n, ArchiveFormat::binary);
      ADD_FAILURE() << "a prefix of " << n << " bytes loaded";
    } catch (const FormatError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("load_checkpoint: '<memory>': "), std::string::npos) << m;
      EXPECT_NE(m.find("truncated"), std::string::npos) << "prefix of " << n << ": " << m;
    }
  }
  // procfs reports a size of 0 for files that hold text: read, then refused for what they are.
  expect_format_error([] { load_checkpoint<float>("/proc/self/status"); }, {"/proc/self/status", "not an xgrad archive"});
  nn::Linear<float> model(2, 2);
  expect_error<std::runtime_error>([&] { save(model, ""); }, {"the path is empty"});
}

TEST(SerializeHostile, TheVersion1ReaderTooRejectsEveryTruncationAndSurvivesCorruption) {
  // The committed version-1 checkpoint goes through the reader of the old layout (options as
  // fixed fields, a parameter's state as four optional arrays).
  const std::string bytes = read_bytes(std::string(XGRAD_FIXTURES_DIR) + "/serialize_v1/checkpoint.bin");
  ASSERT_TRUE(load_or_reject(bytes, ArchiveFormat::binary));
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    SCOPED_TRACE("prefix of " + std::to_string(n) + " bytes");
    EXPECT_FALSE(load_or_reject(bytes.substr(0, n), ArchiveFormat::binary));
  }
  std::mt19937_64 rng(2026);
  std::size_t loaded = 0, rejected = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const std::size_t at = rng() % bytes.size();
    std::string corrupt = bytes;
    corrupt[at] = static_cast<char>(static_cast<unsigned char>(corrupt[at]) ^ (1 + rng() % 255));
    SCOPED_TRACE("byte " + std::to_string(at));
    (load_or_reject(corrupt, ArchiveFormat::binary) ? loaded : rejected)++;
  }
  EXPECT_GT(loaded, 0u);
  EXPECT_GT(rejected, 0u);
}

TEST(SerializeHostile, LengthsClaiming2To60ElementsThrowBeforeAllocating) {
  const std::string bytes = state_dict_bytes(one_tensor(), ArchiveFormat::binary);
  const std::uint64_t huge = std::uint64_t{1} << 60;
  const std::string shape = le64(2) + le64(3) + le64(5);
  // Without the checks, each would allocate 2^60 items (ASan aborts; the plain build throws
  // bad_alloc), so the messages show the check came first.
  expect_format_error([&] { load_binary(forge(bytes, shape, le64(2) + le64(huge) + le64(1))); },
                      {"forged.xgrad", "tensor data claims 1152921504606846976 items of at least 4 bytes, but only 60"});
  expect_format_error([&] { load_binary(forge(bytes, shape, le64(huge) + le64(3) + le64(5))); },
                      {"a tensor shape claims 1152921504606846976 items"});
  expect_format_error([&] { load_binary(forge(bytes, le64(6) + "weight", le64(huge) + "weight")); },
                      {"a string claims 1152921504606846976 items of at least 1 bytes"});
  const std::string entries = le64(1) + le64(6) + "weight";
  expect_format_error([&] { load_binary(forge(bytes, entries, le64(huge) + le64(6) + "weight")); },
                      {"state dict entries claims 1152921504606846976 items"});
  // A shape just too large for the 60 bytes of data that remain, and one just under.
  expect_format_error([&] { load_binary(forge(bytes, shape, le64(2) + le64(4) + le64(5))); },
                      {"tensor data claims 20 items of at least 4 bytes, but only 60 bytes remain"});
  expect_format_error([&] { load_binary(forge(bytes, shape, le64(2) + le64(1) + le64(5))); },
                      {"40 unexpected bytes after the end of the archive"});
  // Products: 2^31 * 2^31 = 2^62 is a count (too large for the file), 2^32 * 2^32 overflows.
  expect_format_error([&] { load_binary(forge(bytes, shape, le64(2) + le64(1ull << 31) + le64(1ull << 31))); },
                      {"tensor data claims 4611686018427387904 items"});
  expect_format_error([&] { load_binary(forge(bytes, shape, le64(2) + le64(1ull << 32) + le64(1ull << 32))); },
                      {"the shape (4294967296, 4294967296) has too many elements"});
  expect_format_error(
      [&] { load_binary(forge(bytes, shape, le64(2) + le64(1ull << 40) + le64(0))); },
      {"60 unexpected bytes"});  // a huge but empty shape reads no data
  // The largest tensor the file's bytes allow still loads.
  EXPECT_EQ(load_binary(bytes).at("weight").size(), 15u);
}

TEST(SerializeHostile, ForgedJsonShapesAndValues) {
  const std::string text = state_dict_bytes(one_tensor(), ArchiveFormat::json);
  const std::size_t begin = text.find("\"shape\": ["), end = text.find(']', begin);
  ASSERT_NE(begin, std::string::npos);
  const std::string shape = text.substr(begin, end + 1 - begin);  // [3, 5], pretty-printed
  expect_format_error([&] { load_json(forge(text, shape, "\"shape\": [1099511627776, 1099511627776]")); },
                      {"forged.json", "has too many elements"});
  expect_format_error([&] { load_json(forge(text, shape, "\"shape\": [1152921504606846976]")); },
                      {"holds 15 values; expected 1152921504606846976"});
  expect_format_error([&] { load_json(forge(text, shape, "\"shape\": [-3, 5]")); }, {"forged.json"});
  expect_format_error([&] { load_json(forge(text, "\"float32\"", "\"int8\"")); }, {"unknown tensor dtype 'int8'"});
  expect_format_error([&] { load_json(forge(text, "\"non_finite\": []", "\"non_finite\": [[15, \"nan\"]]")); },
                      {"non-finite value at index 15 of a tensor of 15 values"});
  expect_format_error([&] { load_json(forge(text, "\"non_finite\": []", "\"non_finite\": [[0, \"huge\"]]")); },
                      {"non-finite value 'huge'"});
  expect_format_error([&] { load_json(forge(text, "\"non_finite\": []", "\"non_finite\": [[0]]")); },
                      {"1 values; expected 2"});
  // JSON's literals NaN and Infinity (which cereal's parser accepts) load as such.
  const auto nan = load_json(forge(text, "0.25,", "NaN,"));
  EXPECT_TRUE(std::isnan(nan.at("weight").data()[1]));
  // Zeros that would reach rapidjson 1.1.0's undefined __builtin_clzll(0); ordinary zeros load.
  for (const char* zero : {"0e300", "-0.0E-30", "0.00000000000000000000000"})
    expect_format_error([&] { load_json(forge(text, "0.25,", std::string(zero) + ",")); },
                        {"unsupported number " + std::string(zero), "a zero with an exponent beyond +-22"});
  for (const char* zero : {"0e22", "-0.0e-21", "0.0000000000000000000000", "0E+5"})
    EXPECT_EQ(load_json(forge(text, "0.25,", std::string(zero) + ",")).at("weight").data()[1], 0.0f) << zero;
  // Magnitudes beyond double's range, which would read past rapidjson 1.1.0's table of powers
  // of ten, and overlong numbers; the extremes of double still load.
  for (const char* big : {"1184467440711111111111111111111111111111111111111111111111e308", "1e-400",
                          "0.00000000000000000000000000000000000000001e-300", "1.5e309"})
    expect_format_error([&] { load_json(forge(text, "0.25,", std::string(big) + ",")); },
                        {"unsupported number", "beyond the range of double"});
  expect_format_error([&] { load_json(forge(text, "0.25,", std::string(70, '1') + ",")); },
                      {"longer than 64 characters"});
  for (const char* wraps : {"184467440737095516155", "0.0018446744073709551615999e3"})
    expect_format_error([&] { load_json(forge(text, "0.25,", std::string(wraps) + ",")); },
                        {"its significand overflows"});
  EXPECT_EQ(load_json(forge(text, "0.25,", "184467440737095516145,")).at("weight").data()[1], 1.8446744073709552e20f);
  nn::StateDict<double> extremes;
  extremes.insert("x", Array<double>{std::numeric_limits<double>::max(), std::numeric_limits<double>::denorm_min(),
                                     -std::numeric_limits<double>::min()});
  const std::string e = state_dict_bytes(extremes, ArchiveFormat::json);
  expect_same_state_dict(extremes, load_state_dict_from_memory<double>(e.data(), e.size(), ArchiveFormat::json));
  // Nesting that would exhaust the recursive parser's stack.
  std::string deep = "{\"header\": " + std::string(100000, '[');
  expect_format_error([&] { load_json(deep); }, {"JSON nested more than 64 deep"});
  expect_format_error([&] { load_json(text.substr(0, 20) + std::string("\0", 1) + text.substr(21)); },
                      {"a NUL byte"});
  expect_format_error([&] { load_json(forge(text, "\"weight\"", "\"w\xC3\"")); }, {"invalid JSON"});
}

TEST(SerializeHostile, BytesThatAreNotBoolsAndStatesThatCannotBe) {
  manual_seed(1);
  nn::Linear<float> model(2, 2);
  optim::SGD<float> opt(model.parameters(), optim::SGDOptions(0.125).momentum(0.5).dampening(0.25).weight_decay(0.375));
  TempDir dir;
  save(opt, dir.file("sgd.xgrad"), parameter_names(opt, model));
  const std::string bytes = read_bytes(dir.file("sgd.xgrad"));
  // The option nesterov: {name, kind, value}, the value a byte.
  const std::string nesterov = le64(8) + "nesterov" + le64(4) + "bool";
  write_bytes(dir.file("bad.xgrad"), forge(bytes, nesterov + std::string("\0", 1), nesterov + "\x02"));
  expect_format_error([&] { load_optimizer_state<float>(dir.file("bad.xgrad")); },
                      {"'nesterov' should be a bool, got the byte 2"});
  write_bytes(dir.file("bad.xgrad"), forge(bytes, le_double(0.125), le_double(-1.0)));
  expect_format_error([&] { load_optimizer_state<float>(dir.file("bad.xgrad")); },
                      {"invalid options: SGD: invalid learning rate -1"});

  // A generator state xoshiro256** cannot be in.
  Generator g;
  g.set_state(GeneratorState{5, {0, 0, 0, 0}});
  save(g, dir.file("zero.xgrad"));
  expect_format_error([&] { load(g, dir.file("zero.xgrad")); }, {"the generator state is all zeros"});

  // Schedules nested deeper than any real run (each level one more recursion).
  optim::LRSchedulerState state{0, 1, {0.1}, {0.1}, {}};
  for (int i = 0; i < 20; ++i) state = optim::LRSchedulerState{0, 1, {0.1}, {0.1}, {state}};
  for (const char* name : {"deep.xgrad", "deep.json"}) {
    save(state, dir.file(name));
    expect_format_error([&] { load_lr_scheduler_state(dir.file(name)); },
                        {"learning-rate schedules nested more than 16 deep"});
  }
}
