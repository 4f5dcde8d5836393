// Readers for the files users have: NumPy's .npy (through xtensor's xnpy), numeric CSV, and text
// with one example per line.
//
//   auto x = xgrad::data::read_npy<float>("x.npy");                       // any shape
//   auto table = xgrad::data::read_csv<float>("data.csv", xgrad::data::CsvOptions().header(true));  // (rows, cols)
//   auto words = std::make_shared<xgrad::data::TextLineDataset>("/usr/share/dict/words");
//
// Bad input throws std::runtime_error naming the reader, the file and, for text, the line (1-based):
// a missing or unreadable file, an empty file, CSV rows of different lengths, a field that is not
// a number, a truncated or malformed .npy.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <xgrad/arg.hpp>
#include <xgrad/core/tensor.hpp>
#include <xgrad/data/dataset.hpp>

namespace xgrad::data {

// A .npy file of float32, float64, int32, int64, uint8 or bool, converted to T (T = float,
// double or std::int64_t); C (row-major) or Fortran order.
template <class T>
xt::xarray<T> read_npy(const std::string& path);

struct CsvOptions {
  XGRAD_ARG(char, delimiter) = ',';
  // Skip the first line (column names).
  XGRAD_ARG(bool, header) = false;
};

// Every row the same number of fields, every field a number (surrounding spaces allowed; nan and
// inf as strtod reads them). Blank lines are skipped. -> (rows, columns).
template <class T>
xt::xarray<T> read_csv(const std::string& path, const CsvOptions& options = {});

// The lines of a text file, without their line ends ("\n" or "\r\n"); a final newline does not
// start another line. Throws for a missing or empty file.
std::vector<std::string> read_lines(const std::string& path);

// One example per line of a text file (torchtext's line datasets): get(i) is line i + 1.
class TextLineDataset : public Dataset<std::string> {
 public:
  explicit TextLineDataset(std::string path);
  std::size_t size() const override { return lines_.size(); }
  std::string get(std::size_t index) const override;
  const std::string& path() const { return path_; }
  const std::vector<std::string>& lines() const { return lines_; }

 private:
  std::string path_;
  std::vector<std::string> lines_;
};

extern template xt::xarray<float> read_npy<float>(const std::string&);
extern template xt::xarray<double> read_npy<double>(const std::string&);
extern template xt::xarray<std::int64_t> read_npy<std::int64_t>(const std::string&);
extern template xt::xarray<float> read_csv<float>(const std::string&, const CsvOptions&);
extern template xt::xarray<double> read_csv<double>(const std::string&, const CsvOptions&);

}  // namespace xgrad::data
