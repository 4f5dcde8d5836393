// Internal to xgrad/text: the byte-pair merge loop and the cache of merged pieces, shared by GPT-2's
// BPETokenizer (bpe.cpp) and the tokenizer.json BPE model (tokenizer_json_model.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <xgrad/text/bpe.hpp>

namespace xgrad::text {

// Which of two equal-looking loops runs. They agree whenever a merged token's pairs rank after the
// merge that made it (every trained merge list); they can differ on hand-written lists.
enum class MergeOrder {
  // encoder.py's bpe(): all occurrences of the lowest-ranked pair, left to right, then the new pairs.
  all_occurrences,
  // Hugging Face's Word::merge_all: one merge at a time, the lowest (rank, position) first, its new
  // pairs queued at once; a queued pair is stale when its left symbol and right neighbour no longer
  // merge into the same token.
  one_at_a_time,
};

// Merges `symbols` in place. `rank_of(a, b)` gives {rank, merged id}, or rank -1 when (a, b) is no
// merge. The pairs wait in a heap ordered by (rank, position); entries go stale as neighbours merge
// and are checked when taken. Symbols sit in a linked list: O(n log n) for a piece of n symbols.
template <class RankOf>
void merge_symbols(std::vector<std::int32_t>& symbols, MergeOrder order, RankOf&& rank_of) {
  const std::size_t n = symbols.size();
  if (n < 2) return;
  struct Entry {
    std::int64_t rank;
    std::int32_t pos, left, right, merged;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<std::int32_t> next(n), prev(n);
  for (std::size_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? static_cast<std::int32_t>(i + 1) : -1;
    prev[i] = static_cast<std::int32_t>(i) - 1;
  }
  std::vector<char> alive(n, 1);
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto push = [&](std::int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    const std::int32_t a = symbols[pos], b = symbols[next[pos]];
    const detail::MergeRule rule = rank_of(a, b);
    if (rule.rank >= 0) heap.push({rule.rank, pos, a, b, rule.merged});
  };
  auto still_valid = [&](const Entry& e) {
    const std::int32_t p = e.pos;
    if (!alive[p] || next[p] < 0) return false;
    if (order == MergeOrder::all_occurrences) return symbols[p] == e.left && symbols[next[p]] == e.right;
    const detail::MergeRule rule = rank_of(symbols[p], symbols[next[p]]);
    return rule.rank >= 0 && rule.merged == e.merged;
  };
  for (std::size_t i = 0; i + 1 < n; ++i) push(static_cast<std::int32_t>(i));
  std::vector<Entry> batch;
  std::vector<std::int32_t> changed;
  while (!heap.empty()) {
    const std::int64_t rank = heap.top().rank;
    batch.clear();
    do {  // one entry, or every entry of the lowest rank (by position)
      batch.push_back(heap.top());
      heap.pop();
    } while (order == MergeOrder::all_occurrences && !heap.empty() && heap.top().rank == rank);
    changed.clear();
    for (const Entry& e : batch) {
      if (!still_valid(e)) continue;
      const std::int32_t p = e.pos, q = next[p];
      symbols[p] = e.merged;
      alive[q] = 0;
      next[p] = next[q];
      if (next[q] >= 0) prev[next[q]] = p;
      changed.push_back(p);
    }
    for (const std::int32_t p : changed) {
      if (!alive[p]) continue;
      push(prev[p]);
      push(p);
    }
  }
  std::size_t w = 0;
  for (std::int32_t p = 0; p >= 0; p = next[p]) symbols[w++] = symbols[p];
  symbols.resize(w);
}

// Pieces merged before, by their text. Bounded: cleared when full (hostile input of endless
// distinct pieces must not grow it without end). Guarded by a mutex: tokenizers encode on several
// threads at once and their copies share one cache.
struct detail::BPECache {
  static constexpr std::size_t kMaxEntries = std::size_t{1} << 17;
  static constexpr std::size_t kMaxPiece = 128;

  // Appends the ids of `piece` to `out` and returns true when it is cached.
  template <class Id>
  bool find(std::string_view piece, std::vector<Id>& out) {
    if (piece.size() > kMaxPiece) return false;
    std::lock_guard<std::mutex> lock(mutex);
    const auto it = pieces.find(std::string(piece));
    if (it == pieces.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }
  void store(std::string_view piece, const std::vector<std::int32_t>& ids) {
    if (piece.size() > kMaxPiece) return;
    std::lock_guard<std::mutex> lock(mutex);
    if (pieces.size() >= kMaxEntries) pieces.clear();
    pieces.emplace(std::string(piece), ids);
  }

  std::mutex mutex;
  std::unordered_map<std::string, std::vector<std::int32_t>> pieces;
};

}  // namespace xgrad::text
