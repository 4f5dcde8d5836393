#include <xgrad/text/corpus.hpp>

#include <algorithm>
#include <exception>

#include <xgrad/data/token_file.hpp>
#include <xgrad/serialize/atomic_file.hpp>
#include <xgrad/text/utf8.hpp>

namespace xgrad::text {

LineSource utf8_file_lines(const std::string& path) {
  return [path](const LineSink& sink) {
    const RegularFile file("utf8_file_lines", path);
    std::string buffer, line;
    std::uint64_t offset = 0, line_number = 1;  // of the line's first byte in the file
    const auto emit = [&](std::string_view l) {
      check_utf8(l, path, offset, line_number);
      const std::uint64_t length = l.size();
      if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
      sink(l);
      offset += length + 1, ++line_number;
    };
    buffer.resize(1 << 20);
    for (std::uint64_t at = 0; at < file.size();) {
      const std::uint64_t n = file.read_at(at, std::min<std::uint64_t>(buffer.size(), file.size() - at), &buffer[0]);
      if (n == 0) break;  // the file shrank
      at += n;
      std::string_view chunk(buffer.data(), std::size_t(n));
      for (std::size_t end; (end = chunk.find('\n')) != std::string_view::npos;) {
        if (line.empty()) {
          emit(chunk.substr(0, end));
        } else {
          line.append(chunk.substr(0, end));
          emit(line);
          line.clear();
        }
        chunk.remove_prefix(end + 1);
      }
      line.append(chunk);
    }
    if (!line.empty()) emit(line);
  };
}

LineSource utf8_lines(std::vector<std::string> lines, const std::string& name) {
  return [lines = std::move(lines), name](const LineSink& sink) {
    std::uint64_t number = 1;
    for (const std::string& line : lines) {
      check_utf8(line, name, 0, number++);
      sink(line);
    }
  };
}

bool is_held_out(std::uint64_t index, std::uint64_t seed) {
  std::uint64_t h = 1469598103934665603ULL ^ (seed * 0x9E3779B97F4A7C15ULL);
  for (int k = 0; k < 8; ++k) h = (h ^ ((index >> (8 * k)) & 0xFF)) * 1099511628211ULL;
  return (((h ^ (h >> 31)) * 0xBF58476D1CE4E5B9ULL) >> 29) % 10 == 0;
}

LineSource training_lines(LineSource lines, std::uint64_t seed) {
  return [lines = std::move(lines), seed](const LineSink& sink) {
    std::uint64_t index = 0;
    lines([&](std::string_view line) {
      if (!is_held_out(index++, seed)) sink(line);
    });
  };
}

TokenizedCorpus tokenize_corpus(const LineSource& lines, std::uint64_t seed, const Tokenizer& tok,
                                const std::string& train_path, const std::string& held_path) {
  namespace data = xgrad::data;
  const auto options =
      data::TokenFileOptions().dtype(data::token_dtype_for(tok.vocab_size())).vocab_size(tok.vocab_size());
  TokenizedCorpus corpus;
  std::exception_ptr reading;  // an error of the text (not UTF-8, unreadable): rethrown as it is,
                               // not wrapped in write_token_file's message
  const auto write_lines = [&](data::TokenFileWriter& train, data::TokenFileWriter& held) {
    std::uint64_t index = 0;
    std::string piece;
    lines([&](std::string_view line) {
      const bool is_held = is_held_out(index++, seed);
      TokenizedPart& part = is_held ? corpus.held : corpus.train;
      piece.assign(line);
      piece += '\n';
      std::size_t skipped = 0;
      const std::vector<std::int64_t> ids = tok.encode(piece, &skipped);
      (is_held ? held : train).append(ids);
      ++part.lines;
      part.characters += check_utf8(piece, "the line");
      part.tokens += ids.size();
      part.skipped += skipped;
    });
  };
  try {
    data::write_token_file(train_path, options, [&](data::TokenFileWriter& train) {
      data::write_token_file(held_path, options, [&](data::TokenFileWriter& held) {
        try {
          write_lines(train, held);
        } catch (...) {
          reading = std::current_exception();
          throw;
        }
      });
    });
  } catch (...) {
    if (reading) std::rethrow_exception(reading);
    throw;
  }
  return corpus;
}

}  // namespace xgrad::text
