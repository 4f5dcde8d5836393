#include <xgrad/text/bpe_trainer.hpp>
#include <xgrad/text/messages.hpp>

#include <algorithm>
#include <queue>
#include <set>
#include <stdexcept>
#include <unordered_set>

namespace xgrad::text {

using detail::kMaxVocab;

namespace {

std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}
std::int32_t left_of(std::uint64_t key) { return static_cast<std::int32_t>(key >> 32); }
std::int32_t right_of(std::uint64_t key) { return static_cast<std::int32_t>(key & 0xFFFFFFFFu); }

// GPT-2's byte order of ids 0-255: the bytes that print as themselves, then the others.
std::vector<int> gpt2_byte_order() {
  std::vector<int> order;
  for (int b = 0; b < 256; ++b)
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) order.push_back(b);
  for (int b = 0; b < 256; ++b)
    if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)) order.push_back(b);
  return order;
}

}  // namespace

BPETrainer::BPETrainer(BPETrainerOptions options) : options_(std::move(options)) {
  const auto& special = options_.special_tokens();
  const std::size_t least = 256 + special.size();
  if (options_.vocab_size() < least || options_.vocab_size() > kMaxVocab)
    throw std::invalid_argument("BPETrainer: vocab_size must be at least " + std::to_string(least) +
                                " (the 256 bytes and " + std::to_string(special.size()) +
                                " special tokens) and at most " + std::to_string(kMaxVocab) + ", got " +
                                std::to_string(options_.vocab_size()));
  std::set<std::string> seen;
  const auto& chars = bytes_to_unicode();
  for (const auto& name : special) {
    if (name.empty()) throw std::invalid_argument("BPETrainer: a special token is empty");
    if (!is_valid_utf8(name))
      throw std::invalid_argument("BPETrainer: the special token '" + name + "' is not valid UTF-8");
    if (!seen.insert(name).second)
      throw std::invalid_argument("BPETrainer: the special token '" + name + "' is given twice");
    if (std::find(chars.begin(), chars.end(), name) != chars.end())
      throw std::invalid_argument("BPETrainer: the special token '" + name + "' is the token of a single byte");
  }
}

void BPETrainer::add(std::string_view text) {
  for (const std::string_view piece : pretokenizer_.split(text)) ++counts_[std::string(piece)];
}

BPETokenizer BPETrainer::train() const {
  // Words: the distinct pieces (sorted, so that nothing depends on hashing), as symbol ids.
  // Symbols 0-255 are the bytes themselves; merges append symbols.
  std::vector<std::pair<std::string, std::int64_t>> pieces(counts_.begin(), counts_.end());
  std::sort(pieces.begin(), pieces.end());
  std::vector<std::vector<std::int32_t>> words(pieces.size());
  std::vector<std::int64_t> word_count(pieces.size());
  std::vector<std::string> symbol_bytes(256);
  for (int b = 0; b < 256; ++b) symbol_bytes[b] = std::string(1, static_cast<char>(b));
  std::unordered_map<std::string, std::int32_t> symbol_of(symbol_bytes.size() * 2);
  for (int b = 0; b < 256; ++b) symbol_of.emplace(symbol_bytes[b], b);

  std::unordered_map<std::uint64_t, std::int64_t> pair_count;
  std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> pair_words;  // may repeat a word
  for (std::size_t w = 0; w < pieces.size(); ++w) {
    const std::string& bytes = pieces[w].first;
    word_count[w] = pieces[w].second;
    auto& word = words[w];
    word.reserve(bytes.size());
    for (const char c : bytes) word.push_back(static_cast<unsigned char>(c));
    for (std::size_t i = 0; i + 1 < word.size(); ++i) {
      const auto key = pair_key(word[i], word[i + 1]);
      pair_count[key] += word_count[w];
      pair_words[key].push_back(static_cast<std::uint32_t>(w));
    }
  }

  // The queue: highest count first, then the smallest (left bytes, right bytes). Entries go stale
  // as counts change; a popped entry whose count is not the pair's current count is pushed again
  // with the current count (every increase pushes an entry of its own).
  struct Candidate {
    std::int64_t count;
    std::uint64_t key;
  };
  auto lower_priority = [&](const Candidate& x, const Candidate& y) {
    if (x.count != y.count) return x.count < y.count;
    const std::string& xa = symbol_bytes[left_of(x.key)];
    const std::string& ya = symbol_bytes[left_of(y.key)];
    if (xa != ya) return xa > ya;
    return symbol_bytes[right_of(x.key)] > symbol_bytes[right_of(y.key)];
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(lower_priority)> queue(lower_priority);
  for (const auto& [key, count] : pair_count) queue.push({count, key});

  const auto& special = options_.special_tokens();
  std::unordered_set<std::string> special_text(special.begin(), special.end());
  const std::int64_t least = std::max<std::int64_t>(1, options_.min_frequency());
  const std::size_t target = options_.vocab_size() - special.size();  // bytes + merged tokens
  std::vector<std::pair<std::int32_t, std::int32_t>> merges;
  std::vector<std::uint32_t> seen_at(words.size(), 0);  // the merge that last rewrote each word
  std::vector<std::int32_t> merged_word;

  while (symbol_bytes.size() < target && !queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    const auto found = pair_count.find(top.key);
    const std::int64_t current = found == pair_count.end() ? 0 : found->second;
    if (current != top.count) {
      if (current > 0) queue.push({current, top.key});
      continue;
    }
    if (current < least) break;
    const std::int32_t a = left_of(top.key), b = right_of(top.key);
    const std::string bytes = symbol_bytes[a] + symbol_bytes[b];
    if (special_text.count(unicode_from_bytes(bytes))) {  // would spell a special token: never merged
      pair_count.erase(top.key);
      continue;
    }
    std::int32_t c;
    const auto existing = symbol_of.find(bytes);
    if (existing != symbol_of.end()) {
      c = existing->second;
    } else {
      c = static_cast<std::int32_t>(symbol_bytes.size());
      symbol_bytes.push_back(bytes);
      symbol_of.emplace(bytes, c);
    }
    merges.emplace_back(a, b);
    const auto stamp = static_cast<std::uint32_t>(merges.size());
    std::vector<std::uint32_t> affected = std::move(pair_words[top.key]);
    pair_words.erase(top.key);
    std::unordered_set<std::uint64_t> increased;
    for (const std::uint32_t w : affected) {
      if (seen_at[w] == stamp) continue;
      seen_at[w] = stamp;
      auto& word = words[w];
      const std::int64_t n = word_count[w];
      // Take the word's pairs out, merge every (a, b) left to right, put its pairs back.
      for (std::size_t i = 0; i + 1 < word.size(); ++i) pair_count[pair_key(word[i], word[i + 1])] -= n;
      merged_word.clear();
      for (std::size_t i = 0; i < word.size();) {
        if (i + 1 < word.size() && word[i] == a && word[i + 1] == b) {
          merged_word.push_back(c);
          i += 2;
        } else {
          merged_word.push_back(word[i++]);
        }
      }
      word.swap(merged_word);
      for (std::size_t i = 0; i + 1 < word.size(); ++i) {
        const auto key = pair_key(word[i], word[i + 1]);
        pair_count[key] += n;
        if (word[i] == c || word[i + 1] == c) {
          pair_words[key].push_back(w);
          increased.insert(key);
        }
      }
    }
    pair_count.erase(top.key);
    for (const auto key : increased) {
      const auto it = pair_count.find(key);
      if (it != pair_count.end() && it->second > 0) queue.push({it->second, key});
    }
  }

  // Ids: bytes in GPT-2's order, merged tokens, special tokens.
  std::vector<std::string> tokens;
  tokens.reserve(symbol_bytes.size() + special.size());
  for (const int byte : gpt2_byte_order()) tokens.push_back(unicode_from_bytes(symbol_bytes[byte]));
  for (std::size_t s = 256; s < symbol_bytes.size(); ++s) tokens.push_back(unicode_from_bytes(symbol_bytes[s]));
  for (const auto& name : special) tokens.push_back(name);
  std::vector<Merge> merge_text;
  merge_text.reserve(merges.size());
  for (const auto& [x, y] : merges)
    merge_text.emplace_back(unicode_from_bytes(symbol_bytes[x]), unicode_from_bytes(symbol_bytes[y]));
  return BPETokenizer(std::move(tokens), std::move(merge_text), special);
}

BPETokenizer train_bpe(const std::vector<std::string>& texts, const BPETrainerOptions& options) {
  BPETrainer trainer(options);
  for (const auto& text : texts) trainer.add(text);
  return trainer.train();
}

}  // namespace xgrad::text
