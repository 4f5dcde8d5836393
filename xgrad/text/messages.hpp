// Internal to xgrad/text: what the tokenizer's and the trainer's messages and limits share.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace xgrad::text::detail {

// The largest vocabulary accepted: ids are int32 inside, int64 outside.
inline constexpr std::size_t kMaxVocab = std::size_t{1} << 30;

// The largest tokenizer file read (tokenizer.json, encoder.json, vocab.bpe, merges.txt): GPT-2's
// tokenizer.json is 1.4 MB, those of 250,000-token vocabularies about 20 MB.
inline constexpr std::uint64_t kMaxTokenizerFileBytes = std::uint64_t{256} << 20;
inline constexpr const char* kTokenizerFile = "tokenizer file";

// Printable quoting for messages: at most 60 bytes, control bytes as \xNN.
inline std::string quote(std::string_view s) {
  std::string out = "'";
  const std::size_t n = std::min<std::size_t>(s.size(), 60);
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7F) {
      static const char* hex = "0123456789ABCDEF";
      out += "\\x";
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  if (s.size() > n) out += "...";
  return out + "'";
}

}  // namespace xgrad::text::detail
