#include "tokenizer/bpe.h"

#include <limits>
#include <queue>

#include "absl/strings/str_cat.h"
#include "tokenizer/byte_level.h"

namespace loom::tokenizer {
namespace {

constexpr int32_t kNoRank = std::numeric_limits<int32_t>::max();
// Words longer than this use the heap-based merge loop (O(n log n)).
constexpr size_t kSmallWord = 64;

}  // namespace

void Bpe::AddToken(const std::string& token, int32_t id) { vocab_[token] = id; }

absl::Status Bpe::AddMerge(const std::string& left, const std::string& right, int32_t rank) {
  auto l = vocab_.find(left), r = vocab_.find(right);
  auto m = vocab_.find(left + right);
  if (l == vocab_.end() || r == vocab_.end() || m == vocab_.end()) {
    return absl::InvalidArgumentError(absl::StrCat("model.merges[", rank, "] \"", left, " ", right,
                                                   "\" uses a token missing from model.vocab"));
  }
  merges_.try_emplace(PairKey(l->second, r->second), Merge{rank, m->second});
  return absl::OkStatus();
}

void Bpe::Finish(bool ignore_merges) {
  ignore_merges_ = ignore_merges;
  for (int b = 0; b < 256; ++b) {
    auto it = vocab_.find(ByteToUnicode(static_cast<uint8_t>(b)));
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }
}

const Bpe::Merge* Bpe::FindMerge(int32_t left, int32_t right) const {
  auto it = merges_.find(PairKey(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void Bpe::EncodeWord(std::string_view word, std::vector<int32_t>* out) const {
  if (ignore_merges_) {
    std::string text;
    for (char c : word) text += ByteToUnicode(static_cast<uint8_t>(c));
    auto it = vocab_.find(text);
    if (it != vocab_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> symbols;
  symbols.reserve(word.size());
  for (char c : word) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
    if (id >= 0) symbols.push_back(id);  // HF drops characters missing from the vocabulary.
  }
  if (symbols.size() <= kSmallWord) {
    MergeSmall(&symbols);
  } else {
    MergeLarge(&symbols);
  }
  out->insert(out->end(), symbols.begin(), symbols.end());
}

// Repeatedly merges the lowest-ranked adjacent pair, leftmost first.
void Bpe::MergeSmall(std::vector<int32_t>* symbols) const {
  std::vector<int32_t>& s = *symbols;
  if (s.size() < 2) return;
  std::vector<int32_t> ranks(s.size() - 1), ids(s.size() - 1);
  auto rank_at = [&](size_t i) {
    const Merge* m = FindMerge(s[i], s[i + 1]);
    ranks[i] = m ? m->rank : kNoRank;
    ids[i] = m ? m->id : -1;
  };
  for (size_t i = 0; i + 1 < s.size(); ++i) rank_at(i);
  while (!ranks.empty()) {
    size_t best = 0;
    for (size_t i = 1; i < ranks.size(); ++i) {
      if (ranks[i] < ranks[best]) best = i;
    }
    if (ranks[best] == kNoRank) break;
    s[best] = ids[best];
    s.erase(s.begin() + best + 1);
    ranks.erase(ranks.begin() + best);
    ids.erase(ids.begin() + best);
    if (best > 0) rank_at(best - 1);
    if (best < ranks.size()) rank_at(best);
  }
}

// The same result as MergeSmall with a priority queue over (rank, position)
// and a linked list of symbols; stale queue entries are skipped.
void Bpe::MergeLarge(std::vector<int32_t>* symbols) const {
  std::vector<int32_t>& s = *symbols;
  const int n = static_cast<int>(s.size());
  std::vector<int> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Entry {
    int32_t rank;
    int pos;
    int32_t left, right;  // the pair the entry was made for, to detect staleness
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
  auto push = [&](int i) {
    if (i < 0 || next[i] < 0) return;
    const Merge* m = FindMerge(s[i], s[next[i]]);
    if (m) queue.push({m->rank, i, s[i], s[next[i]]});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!queue.empty()) {
    const Entry e = queue.top();
    queue.pop();
    const int j = next[e.pos];
    if (!alive[e.pos] || j < 0 || s[e.pos] != e.left || s[j] != e.right) continue;
    s[e.pos] = FindMerge(e.left, e.right)->id;
    alive[j] = false;
    next[e.pos] = next[j];
    if (next[j] >= 0) prev[next[j]] = e.pos;
    push(prev[e.pos]);
    push(e.pos);
  }
  std::vector<int32_t> merged;
  for (int i = 0; i >= 0 && i < n; i = next[i]) merged.push_back(s[i]);
  s.swap(merged);
}

}  // namespace loom::tokenizer
