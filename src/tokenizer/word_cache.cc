#include "tokenizer/word_cache.h"

#include "absl/hash/hash.h"

namespace loom::tokenizer {

WordCache::Shard& WordCache::ShardOf(std::string_view word) const {
  return shards_[absl::Hash<absl::string_view>{}(AsAbsl(word)) % kShards];
}

bool WordCache::Lookup(std::string_view word, std::vector<int32_t>* out) const {
  Shard& shard = ShardOf(word);
  absl::ReaderMutexLock lock(&shard.mu);
  auto it = shard.map.find(AsAbsl(word));
  if (it == shard.map.end()) return false;
  out->insert(out->end(), it->second.begin(), it->second.end());
  return true;
}

void WordCache::Insert(std::string_view word, const int32_t* ids, size_t count) {
  if (word.size() > kMaxWordBytes) return;
  Shard& shard = ShardOf(word);
  absl::MutexLock lock(&shard.mu);
  if (shard.map.size() >= kMaxEntriesPerShard) return;
  shard.map.try_emplace(std::string(word), ids, ids + count);
}

}  // namespace loom::tokenizer
