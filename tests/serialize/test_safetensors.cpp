// safetensors: round trips, the exact layout, 16-bit conversions, every malformed case of
// the format with its own error, truncation and corruption sweeps.
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <set>

#include <xgrad/nn/linear.hpp>
#include <xgrad/serialize/atomic_file.hpp>
#include <xgrad/serialize/safetensors.hpp>
#include "serialize_util.hpp"
#include "test_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

namespace {

namespace fs = std::filesystem;

std::string le64(std::uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return s;
}

// A file from its header text and data bytes.
std::string file_of(const std::string& header, const std::string& data = "") {
  return le64(header.size()) + header + data;
}

// n bytes of data (distinct values, so a misplaced tensor would show).
std::string data_of(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 7 + 1);
  return s;
}

std::string u16_bytes(std::initializer_list<std::uint16_t> values) {
  std::string s;
  for (auto v : values) s += std::string{static_cast<char>(v & 0xFF), static_cast<char>(v >> 8)};
  return s;
}

template <class T>
NamedArrays<T> load_bytes(const std::string& bytes, SafetensorsMetadata* metadata = nullptr) {
  return load_safetensors_from_memory<T>(bytes.data(), bytes.size(), metadata, "test.safetensors");
}

// Loading `bytes` from memory and from a file both throw FormatError naming the source and
// containing every fragment.
void expect_malformed(const std::string& bytes, std::initializer_list<const char*> fragments) {
  auto check = [&](const char* what, const std::string& source, auto&& load) {
    try {
      load();
      ADD_FAILURE() << what << ": expected FormatError";
    } catch (const FormatError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("'" + source + "'"), std::string::npos) << message;
      for (const char* fragment : fragments)
        EXPECT_NE(message.find(fragment), std::string::npos)
            << what << ": \"" << message << "\" lacks \"" << fragment << "\"";
    }
  };
  check("from memory", "test.safetensors", [&] { load_bytes<float>(bytes); });
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  write_bytes(path, bytes);
  check("from a file", path, [&] { load_safetensors<float>(path); });
}
#define EXPECT_MALFORMED(bytes, ...)        \
  do {                                      \
    SCOPED_TRACE(#bytes);                   \
    expect_malformed(bytes, {__VA_ARGS__}); \
  } while (0)

template <class T>
NamedArrays<T> sample_tensors() {
  Generator g(7);
  NamedArrays<T> t;
  // Not in alphabetical order: the file keeps the given order.
  t.emplace_back("layers.0.linear1.weight", randn<T>({3, 4}, g).value());
  t.emplace_back("bias", randn<T>({4}, g).value());
  t.emplace_back("scalar", Array<T>(T(2.5)));       // 0-d
  t.emplace_back("empty", empty_array<T>({0, 3}));  // no elements
  t.emplace_back("cube", randn<T>({2, 1, 3}, g).value());
  t.emplace_back("name with \"quotes\", \\ and \xC3\xA9", randn<T>({2}, g).value());
  return t;
}

}  // namespace

// ---- round trips and layout ----------------------------------------------------------------

TEST(Safetensors, RoundTripFloatKeepsNamesOrderShapesValuesAndMetadata) {
  TempDir dir;
  const auto tensors = sample_tensors<float>();
  const SafetensorsMetadata metadata{{"format", "pt"}, {"note", "line\nbreak \"quoted\""}};
  save_safetensors(tensors, dir.file("f.safetensors"), metadata);
  SafetensorsMetadata loaded_metadata;
  expect_same_arrays(tensors, load_safetensors<float>(dir.file("f.safetensors"), &loaded_metadata));
  EXPECT_EQ(loaded_metadata, metadata);

  const SafetensorsHeader header = read_safetensors_header(dir.file("f.safetensors"));
  ASSERT_EQ(header.tensors.size(), tensors.size());
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(header.tensors[i].name, tensors[i].first);
    EXPECT_EQ(header.tensors[i].dtype, "F32");
    EXPECT_EQ(header.tensors[i].begin, offset);
    offset += tensors[i].second.size() * 4;
    EXPECT_EQ(header.tensors[i].end, offset);
  }
  EXPECT_EQ(header.header_size % 8, 0u);
  EXPECT_EQ(header.data_size, offset);
  EXPECT_EQ(header.metadata, metadata);
}

TEST(Safetensors, RoundTripDoubleIsBitExactIncludingSpecialValues) {
  TempDir dir;
  auto tensors = sample_tensors<double>();
  const double inf = std::numeric_limits<double>::infinity();
  tensors.emplace_back("special",
                       Array<double>{std::nan(""), inf, -inf, -0.0, std::numeric_limits<double>::denorm_min(),
                                     std::numeric_limits<double>::max(), 1.0 / 3.0});
  save_safetensors(tensors, dir.file("d.safetensors"));
  SafetensorsMetadata metadata{{"stale", "x"}};
  expect_same_arrays(tensors, load_safetensors<double>(dir.file("d.safetensors"), &metadata));
  EXPECT_TRUE(metadata.empty());
  for (const auto& e : read_safetensors_header(dir.file("d.safetensors")).tensors) EXPECT_EQ(e.dtype, "F64");
  // Bytes in memory equal the saved file.
  EXPECT_EQ(safetensors_bytes(tensors), read_bytes(dir.file("d.safetensors")));
}

TEST(Safetensors, WritesTheReferenceLayout) {
  // Header JSON padded with spaces to a multiple of 8, then little-endian data in the given order.
  NamedArrays<float> tensors;
  tensors.emplace_back("b", Array<float>{1.0f, -2.0f});
  tensors.emplace_back("a", Array<float>(0.5f));
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("a":{"dtype":"F32","shape":[],"data_offsets":[8,12]}})";
  const std::string padded = header + std::string((8 - header.size() % 8) % 8, ' ');
  const std::string data("\x00\x00\x80\x3F\x00\x00\x00\xC0\x00\x00\x00\x3F", 12);
  EXPECT_EQ(safetensors_bytes(tensors, {{"format", "pt"}}), file_of(padded, data));
}

TEST(Safetensors, LoadsAcrossPrecisions) {
  // F32 into double is exact; F64 into float rounds, and beyond float's range gives inf.
  NamedArrays<float> f;
  f.emplace_back("x", Array<float>{0.1f, -3.0e38f});
  const auto as_double = load_bytes<double>(safetensors_bytes(f));
  EXPECT_EQ(as_double[0].second(0), static_cast<double>(0.1f));
  EXPECT_EQ(as_double[0].second(1), static_cast<double>(-3.0e38f));

  NamedArrays<double> d;
  // FLT_MAX + half an ulp = 2^128 - 2^103 is the threshold of rounding to infinity.
  const double threshold = std::ldexp(2.0 - std::ldexp(1.0, -24), 127);
  d.emplace_back("x",
                 Array<double>{0.1, 1e300, -1e300, std::nextafter(threshold, 0.0), std::nan(""), threshold});
  const auto as_float = load_bytes<float>(safetensors_bytes(d));
  const Array<float>& v = as_float[0].second;
  EXPECT_EQ(v(0), 0.1f);
  EXPECT_EQ(v(1), std::numeric_limits<float>::infinity());
  EXPECT_EQ(v(2), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(v(3), std::numeric_limits<float>::max());  // just below the rounding threshold
  EXPECT_TRUE(std::isnan(v(4)));
  EXPECT_EQ(v(5), std::numeric_limits<float>::infinity());
}

TEST(Safetensors, ConvertsF16KnownValues) {
  const std::string data = u16_bytes(
      {0x0000, 0x8000, 0x3C00, 0xC000, 0x3555, 0x7BFF, 0x0400, 0x0001, 0x03FF, 0x7C00, 0xFC00, 0x7E00});
  const std::string header = R"({"h":{"dtype":"F16","shape":[3,4],"data_offsets":[0,24]}})";
  for (const Array<double>& v : {load_bytes<double>(file_of(header, data))[0].second,
                                 Array<double>(load_bytes<float>(file_of(header, data))[0].second)}) {
    ASSERT_EQ(shape_of(v), (Shape{3, 4}));
    const double* p = v.data();
    EXPECT_EQ(p[0], 0.0);
    EXPECT_FALSE(std::signbit(p[0]));
    EXPECT_TRUE(p[1] == 0.0 && std::signbit(p[1]));
    EXPECT_EQ(p[2], 1.0);
    EXPECT_EQ(p[3], -2.0);
    EXPECT_EQ(p[4], 0.333251953125);
    EXPECT_EQ(p[5], 65504.0);
    EXPECT_EQ(p[6], std::ldexp(1.0, -14));     // smallest normal
    EXPECT_EQ(p[7], std::ldexp(1.0, -24));     // smallest subnormal
    EXPECT_EQ(p[8], std::ldexp(1023.0, -24));  // largest subnormal
    EXPECT_EQ(p[9], std::numeric_limits<double>::infinity());
    EXPECT_EQ(p[10], -std::numeric_limits<double>::infinity());
    EXPECT_TRUE(std::isnan(p[11]));
  }
}

TEST(Safetensors, ConvertsBF16KnownValues) {
  const std::string data = u16_bytes({0x3F80, 0xC040, 0x4049, 0x7F7F, 0x0001, 0x8000, 0xFF80, 0x7FC0});
  const std::string header = R"({"b":{"dtype":"BF16","shape":[8],"data_offsets":[0,16]}})";
  const Array<double> v = load_bytes<double>(file_of(header, data))[0].second;
  EXPECT_EQ(v(0), 1.0);
  EXPECT_EQ(v(1), -3.0);
  EXPECT_EQ(v(2), 3.140625);
  EXPECT_EQ(v(3), std::ldexp(255.0, 120));  // largest finite: (2 - 2^-7) * 2^127
  EXPECT_EQ(v(4), std::ldexp(1.0, -133));   // smallest subnormal
  EXPECT_TRUE(v(5) == 0.0 && std::signbit(v(5)));
  EXPECT_EQ(v(6), -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(v(7)));
}

TEST(Safetensors, ReadsHeaderOrderWhitespaceAndExtraFields) {
  // Written by hand: keys out of order, spaces, an unknown extra field (ignored), metadata last.
  const std::string header =
      R"({ "z" : {"shape":[1], "dtype":"F32", "data_offsets":[4,8], "extra": {"k": [1]}},)"
      R"( "a": {"dtype":"F64","data_offsets":[8,16],"shape":[]}, "m": {"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
      R"( "__metadata__": {"k": "v"} }   )";
  SafetensorsMetadata metadata;
  const auto t = load_bytes<double>(file_of(header, data_of(16)), &metadata);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].first, "z");
  EXPECT_EQ(t[1].first, "a");
  EXPECT_EQ(t[2].first, "m");
  EXPECT_EQ(shape_of(t[1].second), Shape{});
  EXPECT_EQ(metadata, (SafetensorsMetadata{{"k", "v"}}));
}

TEST(Safetensors, EmptyFileAndZeroSizeTensorsSharingAnOffset) {
  EXPECT_TRUE(load_bytes<float>(file_of("{}")).empty());
  const std::string header =
      R"({"e1":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
      R"("e2":{"dtype":"F16","shape":[2,0],"data_offsets":[4,4]}})";
  const auto t = load_bytes<float>(file_of(header, data_of(4)));
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(shape_of(t[2].second), (Shape{2, 0}));
}

TEST(Safetensors, SaveRejectsBadNamesBeforeTouchingTheFile) {
  TempDir dir;
  NamedArrays<float> dup;
  dup.emplace_back("w", Array<float>{1.0f});
  dup.emplace_back("w", Array<float>{2.0f});
  XGRAD_EXPECT_THROW_MSG(save_safetensors(dup, dir.file("x")), "duplicate tensor name \"w\"");
  NamedArrays<float> reserved;
  reserved.emplace_back("__metadata__", Array<float>{1.0f});
  XGRAD_EXPECT_THROW_MSG(save_safetensors(reserved, dir.file("x")), "__metadata__");
  NamedArrays<float> bad_utf8;
  bad_utf8.emplace_back("w\xFF", Array<float>{1.0f});
  XGRAD_EXPECT_THROW_MSG(save_safetensors(bad_utf8, dir.file("x")), "not valid UTF-8");
  XGRAD_EXPECT_THROW_MSG(save_safetensors(NamedArrays<float>{}, dir.file("x"), {{"k", "\xC0\xAF"}}),
                         "metadata value");
  EXPECT_TRUE(dir.entries().empty());
}

// ---- every malformed case has its own error ------------------------------------------------

namespace {
// One valid F32 entry of shape (2,) at [0, 8).
const std::string kEntry = R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
}  // namespace

TEST(SafetensorsMalformed, ShortFile) {
  for (std::size_t n = 0; n < 8; ++n)
    EXPECT_MALFORMED(std::string(n, '\x01'), "shorter than the 8-byte header length");
}

TEST(SafetensorsMalformed, HeaderLongerThanTheFile) {
  EXPECT_MALFORMED(le64(1000) + std::string(92, ' '),
                   "header length 1000 exceeds the 92 bytes left in the file");
}

TEST(SafetensorsMalformed, HeaderOverTheLimitEvenIfTheFileIsLongEnough) {
  EXPECT_MALFORMED(le64(100'000'001) + "{}", "header length 100000001 exceeds the limit of 100000000 bytes");
  // 2^60: throws before allocating (under ASan, an attempt to allocate it would abort).
  EXPECT_MALFORMED(le64(std::uint64_t(1) << 60) + "{}", "exceeds the limit");
}

TEST(SafetensorsMalformed, HeaderNotStartingWithABrace) {
  EXPECT_MALFORMED(file_of("[" + kEntry + "]", data_of(8)), "does not start with '{'");
  EXPECT_MALFORMED(file_of(" {" + kEntry + "}", data_of(8)), "does not start with '{'");
  EXPECT_MALFORMED(file_of(""), "does not start with '{'", "(it is empty)");
}

TEST(SafetensorsMalformed, InvalidUtf8) {
  for (const char* bad : {"\xFF", "\xC0\xAF" /* overlong */, "\xED\xA0\x80" /* surrogate */,
                          "\xF4\x90\x80\x80", "\xE2\x82" /* cut short */}) {
    const std::string header =
        "{\"w" + std::string(bad) + R"(":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    EXPECT_MALFORMED(file_of(header, data_of(8)), "not valid UTF-8", "header offset 3");
  }
}

TEST(SafetensorsMalformed, InvalidJson) {
  EXPECT_MALFORMED(file_of(R"({"w": })"), "not valid JSON");
  EXPECT_MALFORMED(file_of("{" + kEntry + "} x", data_of(8)), "not valid JSON");
  EXPECT_MALFORMED(file_of("{" + kEntry, data_of(8)), "not valid JSON");
  EXPECT_MALFORMED(file_of(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],}})", data_of(8)),
                   "not valid JSON");
}

TEST(SafetensorsMalformed, DuplicateKey) {
  EXPECT_MALFORMED(file_of("{" + kEntry + "," + kEntry + "}", data_of(8)),
                   "duplicate key \"w\" in the header");
  EXPECT_MALFORMED(
      file_of(R"({"w":{"dtype":"F32","shape":[2],"dtype":"F64","data_offsets":[0,8]}})", data_of(8)),
      "duplicate key \"dtype\" in entry \"w\"");
  EXPECT_MALFORMED(file_of(R"({"__metadata__":{"k":"a","k":"b"},)" + kEntry + "}", data_of(8)),
                   "duplicate key \"k\" in entry \"__metadata__\"");
}

TEST(SafetensorsMalformed, UnknownDtype) {
  EXPECT_MALFORMED(file_of(R"({"w":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", data_of(8)),
                   "entry \"w\": unknown dtype \"F33\"");
  EXPECT_MALFORMED(file_of(R"({"w":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}})", data_of(8)),
                   "unknown dtype");
  EXPECT_MALFORMED(file_of(R"({"w":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})", data_of(8)),
                   "dtype is not a string");
}

TEST(SafetensorsMalformed, KnownButNotFloatingPointDtypeIsReportedNotLoaded) {
  const std::string bytes =
      file_of(R"({"steps":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", data_of(8));
  EXPECT_MALFORMED(bytes, "tensor \"steps\" has dtype I64, which xgrad does not load");
  TempDir dir;
  write_bytes(dir.file("i.safetensors"), bytes);
  const SafetensorsHeader header = read_safetensors_header(dir.file("i.safetensors"));
  ASSERT_EQ(header.tensors.size(), 1u);
  EXPECT_EQ(header.tensors[0].dtype, "I64");
}

TEST(SafetensorsMalformed, NegativeOffset) {
  EXPECT_MALFORMED(file_of(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[-4,4]}})", data_of(8)),
                   "entry \"w\": negative data offset -4");
}

TEST(SafetensorsMalformed, NonIntegerOffset) {
  EXPECT_MALFORMED(file_of(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0.0,8]}})", data_of(8)),
                   "data offset 0.0 is not an integer");
  EXPECT_MALFORMED(file_of(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,"8"]}})", data_of(8)),
                   "data offset \"8\" is not an integer");
  EXPECT_MALFORMED(
      file_of(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551616]}})", data_of(8)),
      "is not an integer in [0, 2^64)");
}

TEST(SafetensorsMalformed, OffsetsNotAPair) {
  EXPECT_MALFORMED(file_of(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", data_of(8)),
                   "data_offsets is not an array [begin, end]");
  EXPECT_MALFORMED(file_of(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":{"begin":0}}})", data_of(8)),
                   "data_offsets is not an array [begin, end]");
}

TEST(SafetensorsMalformed, InvertedOffsets) {
  EXPECT_MALFORMED(file_of(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", data_of(8)),
                   "data_offsets [8, 0] are inverted");
}

TEST(SafetensorsMalformed, SizeNotMatchingShape) {
  EXPECT_MALFORMED(file_of(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", data_of(20)),
                   "data_offsets [0, 20] span 20 bytes but shape (2, 3) of F32 needs 24");
  EXPECT_MALFORMED(file_of(R"({"w":{"dtype":"F64","shape":[2],"data_offsets":[0,8]}})", data_of(8)),
                   "span 8 bytes but shape (2) of F64 needs 16");
}

TEST(SafetensorsMalformed, BadShape) {
  EXPECT_MALFORMED(file_of(R"({"w":{"dtype":"F32","shape":[2,-1],"data_offsets":[0,8]}})", data_of(8)),
                   "negative shape dimension -1");
  EXPECT_MALFORMED(file_of(R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", data_of(8)),
                   "shape dimension 2.5 is not an integer");
  EXPECT_MALFORMED(file_of(R"({"w":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", data_of(8)),
                   "shape is not an array");
}

TEST(SafetensorsMalformed, ShapeProductOverflow) {
  // 2^32 * 2^32 elements overflows u64; 2^62 F32 elements fit as a count but not as bytes; a
  // zero dim makes the tensor empty but the other dims' product must still fit (strides).
  for (const char* shape :
       {"[4294967296,4294967296]", "[4611686018427387904]", "[1099511627776,1099511627776,0]"}) {
    const std::string header =
        R"({"w":{"dtype":"F32","shape":)" + std::string(shape) + R"(,"data_offsets":[0,0]}})";
    EXPECT_MALFORMED(file_of(header), "entry \"w\": shape (", ") overflows");
  }
}

TEST(SafetensorsMalformed, ShapeClaiming2To60ElementsThrowsBeforeAllocating) {
  // Consistent offsets for 2^60 bytes of U8... but the file holds 8: refused as truncated.
  EXPECT_MALFORMED(
      file_of(R"({"w":{"dtype":"F32","shape":[1152921504606846976],"data_offsets":[0,4611686018427387904]}})",
              data_of(8)),
      "truncated data: tensor \"w\" ends at data offset 4611686018427387904", "only 8 bytes");
}

TEST(SafetensorsMalformed, OverlappingTensors) {
  EXPECT_MALFORMED(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                           data_of(12)),
                   "tensors \"a\" and \"b\" overlap (data bytes [4, 8))");
  // The same bytes twice.
  EXPECT_MALFORMED(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                           data_of(8)),
                   "overlap");
}

TEST(SafetensorsMalformed, GapBetweenTensors) {
  EXPECT_MALFORMED(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})",
                           data_of(20)),
                   "gap of 4 unused bytes at data offset 8 before tensor \"b\"");
  EXPECT_MALFORMED(file_of(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", data_of(12)),
                   "gap of 4 unused bytes at data offset 0");
}

TEST(SafetensorsMalformed, TrailingBytes) {
  EXPECT_MALFORMED(file_of("{" + kEntry + "}", data_of(11)), "3 trailing bytes after the last tensor");
  EXPECT_MALFORMED(file_of("{}", data_of(1)), "1 trailing bytes");
}

TEST(SafetensorsMalformed, TruncatedData) {
  EXPECT_MALFORMED(file_of("{" + kEntry + "}", data_of(5)),
                   "truncated data: tensor \"w\" ends at data offset 8 but the file holds only 5 bytes");
}

TEST(SafetensorsMalformed, Metadata) {
  EXPECT_MALFORMED(file_of(R"({"__metadata__":{"k":1},)" + kEntry + "}", data_of(8)),
                   "__metadata__ value of \"k\" is not a string (it is number)");
  EXPECT_MALFORMED(file_of(R"({"__metadata__":{"k":null}})"), "value of \"k\" is not a string (it is null)");
  EXPECT_MALFORMED(file_of(R"({"__metadata__":["k"]})"), "__metadata__ is not an object (it is array)");
}

TEST(SafetensorsMalformed, EntryNotAnObject) {
  EXPECT_MALFORMED(file_of(R"({"w":[0,8]})"), "entry \"w\" is not an object (it is array)");
  EXPECT_MALFORMED(file_of(R"({"w":"F32"})"), "entry \"w\" is not an object (it is string)");
}

TEST(SafetensorsMalformed, MissingField) {
  EXPECT_MALFORMED(file_of(R"({"w":{"shape":[2],"data_offsets":[0,8]}})", data_of(8)),
                   "entry \"w\" lacks the field \"dtype\"");
  EXPECT_MALFORMED(file_of(R"({"w":{"dtype":"F32","data_offsets":[0,8]}})", data_of(8)),
                   "lacks the field \"shape\"");
  EXPECT_MALFORMED(file_of(R"({"w":{"dtype":"F32","shape":[2]}})", data_of(8)),
                   "lacks the field \"data_offsets\"");
}

TEST(SafetensorsMalformed, NestingTooDeep) {
  const std::string deep = std::string(100, '[') + std::string(100, ']');
  EXPECT_MALFORMED(
      file_of(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":)" + deep + "}}", data_of(8)),
      "nests deeper than 16 levels");
}

TEST(SafetensorsMalformed, FileSystemErrorsAreRuntimeErrorsNotFormatErrors) {
  TempDir dir;
  for (const std::string& path : {dir.file("missing.safetensors"), dir.path()}) {
    try {
      load_safetensors<float>(path);
      ADD_FAILURE() << "expected an error for " << path;
    } catch (const FormatError& e) {
      ADD_FAILURE() << "not a format error: " << e.what();
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
}

// ---- truncation and corruption sweeps ------------------------------------------------------

TEST(SafetensorsHostile, EveryTruncationThrowsAFormatError) {
  NamedArrays<float> tensors;
  tensors.emplace_back("a", Array<float>{1.0f, 2.0f, 3.0f});
  tensors.emplace_back("b", Array<float>(4.0f));
  const std::string bytes = safetensors_bytes(tensors, {{"k", "v"}});
  TempDir dir;
  const std::string path = dir.file("t.safetensors");
  // The tensors must end exactly at the end of the file, so every strict prefix is malformed.
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    SCOPED_TRACE("prefix of " + std::to_string(n) + " bytes");
    EXPECT_THROW(load_safetensors_from_memory<float>(bytes.data(), n), FormatError);
    write_bytes(path, bytes.substr(0, n));
    EXPECT_THROW(load_safetensors<float>(path), FormatError);
  }
  write_bytes(path, bytes);
  expect_same_arrays(tensors, load_safetensors<float>(path));
}

TEST(SafetensorsHostile, SingleByteCorruptionsLoadOrThrowFormatError) {
  NamedArrays<double> tensors;
  tensors.emplace_back("w", Array<double>{{1.0, 2.0}, {3.0, 4.0}});
  tensors.emplace_back("b", Array<double>{0.5, -0.5});
  const std::string bytes = safetensors_bytes(tensors, {{"format", "pt"}});
  const std::size_t data_start = bytes.size() - 6 * 8;
  std::size_t loaded = 0, rejected = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    for (unsigned char replacement :
         {0x00, 0x01, 0x20, 0x22, 0x2C, 0x2D, 0x30, 0x39, 0x5B, 0x7B, 0x7D, 0x80, 0xFF}) {
      if (static_cast<unsigned char>(bytes[i]) == replacement) continue;
      std::string corrupt = bytes;
      corrupt[i] = static_cast<char>(replacement);
      try {
        const auto t = load_bytes<double>(corrupt);
        ++loaded;
        // A data byte only changes a value; the header may also survive some changes (a digit
        // in a metadata string, a space), but never into tensors that do not match the file.
        if (i >= data_start) {
          ASSERT_EQ(t.size(), 2u);
          EXPECT_EQ(shape_of(t[0].second), (Shape{2, 2}));
        }
      } catch (const FormatError&) {
        ++rejected;
        EXPECT_LT(i, data_start) << "a data byte must not make the file malformed";
      }
    }
  }
  EXPECT_GT(loaded, 0u);
  EXPECT_GT(rejected, 0u);
}

TEST(SafetensorsModule, StateDictRoundTripThroughAFile) {
  TempDir dir;
  nn::Linear<float> saved(3, 2);
  save_safetensors(saved, dir.file("linear.safetensors"), {{"format", "pt"}});
  const SafetensorsHeader header = read_safetensors_header(dir.file("linear.safetensors"));
  ASSERT_EQ(header.tensors.size(), 2u);
  EXPECT_EQ(header.tensors[0].name, "weight");
  EXPECT_EQ(header.tensors[0].shape, (Shape{2, 3}));
  EXPECT_EQ(header.tensors[1].name, "bias");

  nn::Linear<float> loaded(3, 2);  // another random init
  ASSERT_NE(loaded.state_dict().at("weight"), saved.state_dict().at("weight"));
  loaded.load_state_dict(load_safetensors_state_dict<float>(dir.file("linear.safetensors")));
  expect_same_arrays(saved.state_dict().items(), loaded.state_dict().items());

  nn::Linear<float> other(4, 2);
  EXPECT_THROW(other.load_state_dict(load_safetensors_state_dict<float>(dir.file("linear.safetensors"))),
               std::invalid_argument);
}

// torch's .to(torch.bfloat16) and .to(torch.float16): nearest, ties to even, overflow to inf.
TEST(Safetensors, WritesBF16AndF16RoundingToNearestEven) {
  Array<float> values = empty_array<float>(Shape{6});
  const float bf16_tie_down = 1.0f + std::ldexp(1.0f, -8), bf16_tie_up = 1.0f + 3 * std::ldexp(1.0f, -8);
  values(0) = bf16_tie_down;                 // halfway between 1 and 1 + 2^-7: to 1
  values(1) = bf16_tie_up;                   // halfway, odd below: up to 1 + 2^-6
  values(2) = 65520.0f;                      // f16: halfway past 65504: inf
  values(3) = 1.0f + std::ldexp(1.0f, -11);  // f16: halfway between 1 and 1 + 2^-10: to 1
  values(4) = std::ldexp(3.0f, -26);         // f16 subnormal: 0.75 * 2^-24 ... rounds to 2^-24
  values(5) = -std::ldexp(1.0f, -25);        // f16: halfway between -0 and -2^-24: to -0
  const NamedArrays<float> t = {{"x", values}};
  const std::string b = safetensors_bytes(t, {}, {{"x", "BF16"}}), h = safetensors_bytes(t, {}, {{"x", "F16"}});
  const Array<float> rb = load_safetensors_from_memory<float>(b.data(), b.size()).at(0).second;
  const Array<float> rh = load_safetensors_from_memory<float>(h.data(), h.size()).at(0).second;
  EXPECT_EQ(rb(0), 1.0f);
  EXPECT_EQ(rb(1), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_TRUE(std::isinf(rh(2)) && rh(2) > 0);
  EXPECT_EQ(rh(3), 1.0f);
  EXPECT_EQ(rh(4), std::ldexp(1.0f, -24));
  EXPECT_TRUE(rh(5) == 0.0f && std::signbit(rh(5)));
  EXPECT_THROW(safetensors_bytes(t, {}, {{"x", "I8"}}), std::invalid_argument);
  // NaN stays NaN; a double goes through float, as in torch; the header names the dtype.
  const NamedArrays<double> d = {{"y", full_array<double>(Shape{2}, std::nan(""), "test")}};
  const std::string nan_bytes = safetensors_bytes(d, {}, {{"y", "BF16"}});
  EXPECT_NE(nan_bytes.find("\"dtype\":\"BF16\""), std::string::npos);
  EXPECT_TRUE(std::isnan(load_safetensors_from_memory<double>(nan_bytes.data(), nan_bytes.size()).at(0).second(1)));
}
