// xgrad::data's readers: .npy, numeric CSV and text lines, and the message of each bad input
// (missing file, empty file, ragged CSV rows, non-numeric fields, truncated .npy, index out of range).
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <xtensor/xnpy.hpp>

#include <xgrad/xgrad.hpp>
#include "serialize_util.hpp"
#include "test_util.hpp"

namespace xgrad::data {
namespace {

using testing::TempDir;
using testing::write_bytes;
using testing::error_of;

TEST(DataReaders, NpyEveryDtypeAndOrder) {
  TempDir dir;
  const xt::xarray<double> d{{1.5, -2.0, 3.25}, {4.0, 5.0, 6.0}};
  xt::dump_npy(dir.file("d.npy"), d);
  EXPECT_EQ(read_npy<double>(dir.file("d.npy")), d);
  EXPECT_EQ(read_npy<float>(dir.file("d.npy")), xt::xarray<float>(xt::cast<float>(d)));
  const xt::xarray<std::int64_t> i{7, -8, 9};
  xt::dump_npy(dir.file("i.npy"), i);
  EXPECT_EQ(read_npy<std::int64_t>(dir.file("i.npy")), i);
  EXPECT_EQ(read_npy<float>(dir.file("i.npy")), (xt::xarray<float>{7, -8, 9}));
  const xt::xarray<std::int32_t> i32{{1, 2}, {3, 4}};
  xt::dump_npy(dir.file("i32.npy"), i32);
  EXPECT_EQ(read_npy<double>(dir.file("i32.npy")), (xt::xarray<double>{{1, 2}, {3, 4}}));
  const xt::xarray<bool> b{true, false, true};
  xt::dump_npy(dir.file("b.npy"), b);
  EXPECT_EQ(read_npy<float>(dir.file("b.npy")), (xt::xarray<float>{1, 0, 1}));
  // Fortran order (numpy.asfortranarray): the same values.
  xt::xarray<float, xt::layout_type::column_major> f{{1, 2, 3}, {4, 5, 6}};
  xt::dump_npy(dir.file("f.npy"), f);
  EXPECT_EQ(read_npy<float>(dir.file("f.npy")), (xt::xarray<float>{{1, 2, 3}, {4, 5, 6}}));
  const xt::xarray<float> scalar = xt::xarray<float>::from_shape({});
  xt::dump_npy(dir.file("s.npy"), xt::xarray<float>(3.0f));
  EXPECT_EQ(read_npy<float>(dir.file("s.npy"))(), 3.0f);
}

TEST(DataReaders, NpyBadInput) {
  TempDir dir;
  const std::string missing = dir.file("missing.npy");
  EXPECT_EQ(error_of([&] { read_npy<float>(missing); }),
            "read_npy: '" + missing + "': cannot open the file (No such file or directory)");
  write_bytes(dir.file("empty.npy"), "");
  EXPECT_EQ(error_of([&] { read_npy<float>(dir.file("empty.npy")); }),
            "read_npy: '" + dir.file("empty.npy") + "': the file is empty");
  write_bytes(dir.file("text.npy"), "1,2,3\n");
  EXPECT_NE(error_of([&] { read_npy<float>(dir.file("text.npy")); }).find("not a .npy file"), std::string::npos);
  xt::dump_npy(dir.file("d.npy"), xt::xarray<double>{{1, 2, 3}, {4, 5, 6}});
  std::string bytes = testing::read_bytes(dir.file("d.npy"));
  write_bytes(dir.file("cut.npy"), bytes.substr(0, bytes.size() - 8));
  EXPECT_EQ(error_of([&] { read_npy<float>(dir.file("cut.npy")); }),
            "read_npy: '" + dir.file("cut.npy") + "': truncated: the shape (2, 3) needs 6 x 8 bytes of data, the file has 40");
  write_bytes(dir.file("head.npy"), bytes.substr(0, 30));
  EXPECT_NE(error_of([&] { read_npy<float>(dir.file("head.npy")); }).find("truncated header"), std::string::npos);
  // A header claiming a huge shape is rejected before anything is allocated.
  const std::size_t at = bytes.find("(2, 3)");
  ASSERT_NE(at, std::string::npos);
  std::string huge = bytes;
  huge.replace(at, 6, "(9999999999, 99)");
  huge.erase(huge.find('\n') - 10, 10);  // keep the header's length
  write_bytes(dir.file("huge.npy"), huge);
  EXPECT_NE(error_of([&] { read_npy<float>(dir.file("huge.npy")); }).find("truncated: the shape (9999999999, 99)"),
            std::string::npos);
}

TEST(DataReaders, Csv) {
  TempDir dir;
  write_bytes(dir.file("a.csv"), "x,y,label\n1, 2.5 ,3\n\n-4,5e-1,6\r\n 7,8,nan\n");
  const xt::xarray<double> a = read_csv<double>(dir.file("a.csv"), CsvOptions().header(true));
  ASSERT_EQ(shape_of(a), (Shape{3, 3}));
  EXPECT_EQ(a(0, 1), 2.5);
  EXPECT_EQ(a(1, 0), -4.0);
  EXPECT_EQ(a(1, 1), 0.5);
  EXPECT_TRUE(std::isnan(a(2, 2)));
  write_bytes(dir.file("b.tsv"), "1\t2\n3\t4");  // no final newline
  EXPECT_EQ(read_csv<float>(dir.file("b.tsv"), CsvOptions().delimiter('\t')), (xt::xarray<float>{{1, 2}, {3, 4}}));
}

TEST(DataReaders, CsvBadInput) {
  TempDir dir;
  const auto path = [&](const char* name, const std::string& bytes) {
    write_bytes(dir.file(name), bytes);
    return dir.file(name);
  };
  const std::string ragged = path("ragged.csv", "1,2,3\n4,5,6\n7,8\n");
  EXPECT_EQ(error_of([&] { read_csv<float>(ragged); }),
            "read_csv: '" + ragged + "': line 3 has 2 fields, line 1 has 3 (every row needs the same number)");
  const std::string word = path("word.csv", "a,b\n1,2\n3,abc\n");
  EXPECT_EQ(error_of([&] { read_csv<float>(word, CsvOptions().header(true)); }),
            "read_csv: '" + word + "': line 3, field 2: 'abc' is not a number");
  const std::string blank_field = path("blank.csv", "1,,3\n");
  EXPECT_EQ(error_of([&] { read_csv<float>(blank_field); }),
            "read_csv: '" + blank_field + "': line 1, field 2: '' is not a number");
  const std::string trailing = path("trailing.csv", "1,2x\n");
  EXPECT_NE(error_of([&] { read_csv<float>(trailing); }).find("line 1, field 2: '2x' is not a number"), std::string::npos);
  const std::string empty = path("empty.csv", "");
  EXPECT_EQ(error_of([&] { read_csv<float>(empty); }), "read_csv: '" + empty + "': the file is empty");
  EXPECT_EQ(error_of([&] { read_csv<float>(dir.file("none.csv")); }),
            "read_csv: '" + dir.file("none.csv") + "': cannot open the file (No such file or directory)");
  const std::string header_only = path("header.csv", "a,b\n");
  EXPECT_EQ(error_of([&] { read_csv<float>(header_only, CsvOptions().header(true)); }),
            "read_csv: '" + header_only + "': no rows after the header");
}

TEST(DataReaders, TextLines) {
  TempDir dir;
  write_bytes(dir.file("w.txt"), "apple\r\nbanana\n\ncherry");
  TextLineDataset ds(dir.file("w.txt"));
  ASSERT_EQ(ds.size(), 4u);
  EXPECT_EQ(ds.get(0), "apple");
  EXPECT_EQ(ds.get(2), "");
  EXPECT_EQ(ds.get(3), "cherry");
  EXPECT_EQ(error_of([&] { ds.get(4); }),
            "TextLineDataset('" + dir.file("w.txt") + "').get: index 4 is out of range for 4 examples");
  write_bytes(dir.file("one.txt"), "one\n");
  EXPECT_EQ(read_lines(dir.file("one.txt")), std::vector<std::string>{"one"});
  write_bytes(dir.file("empty.txt"), "");
  EXPECT_EQ(error_of([&] { TextLineDataset(dir.file("empty.txt")); }),
            "read_lines: '" + dir.file("empty.txt") + "': the file is empty");
  EXPECT_EQ(error_of([&] { TextLineDataset(dir.file("none.txt")); }),
            "read_lines: '" + dir.file("none.txt") + "': cannot open the file (No such file or directory)");
  // Lines feed a DataLoader with a collate of one's own.
  auto lines = std::make_shared<TextLineDataset>(dir.file("w.txt"));
  auto loader = make_data_loader(lines, DataLoaderOptions().batch_size(3), [](const std::vector<std::string>& words) {
    std::string joined;
    for (const auto& w : words) joined += w + "|";
    return joined;
  });
  EXPECT_EQ(*loader.next(), "apple|banana||");
  EXPECT_EQ(*loader.next(), "cherry|");
  EXPECT_FALSE(loader.next().has_value());
}

// A FIFO would block a reader forever, /dev/zero would be read until memory runs out: both are
// refused before any read (the library's loaders' rule, xgrad::read_regular_file).
TEST(DataReaders, SpecialFilesAreRefusedBeforeAnyRead) {
  TempDir dir;
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(error_of([&] { read_lines(fifo); }),
            "read_lines: '" + fifo + "': cannot read the file (it is a FIFO (named pipe), not a regular file)");
  EXPECT_EQ(error_of([&] { read_npy<float>("/dev/zero"); }),
            "read_npy: '/dev/zero': cannot read the file (it is a character device, not a regular file)");
  EXPECT_EQ(error_of([&] { read_csv<float>(dir.path()); }),
            "read_csv: '" + dir.path() + "': cannot read the file (it is a folder, not a regular file)");
}

}  // namespace
}  // namespace xgrad::data
