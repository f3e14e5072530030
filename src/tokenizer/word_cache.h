#pragma once
// A bounded, thread-safe cache from pre-tokenized word (raw bytes) to ids.
// Sharded so concurrent encoders rarely wait on one another; a full shard
// stops accepting entries (like Hugging Face's cache) rather than evicting.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "tokenizer/string_view_compat.h"

namespace loom::tokenizer {

class WordCache {
 public:
  // Appends the cached ids of `word` to `out`; false when not cached.
  bool Lookup(std::string_view word, std::vector<int32_t>* out) const;
  void Insert(std::string_view word, const int32_t* ids, size_t count);

 private:
  static constexpr int kShards = 16;
  static constexpr size_t kMaxEntriesPerShard = 1 << 14;
  static constexpr size_t kMaxWordBytes = 256;
  struct Shard {
    mutable absl::Mutex mu;
    absl::flat_hash_map<std::string, std::vector<int32_t>> map ABSL_GUARDED_BY(mu);
  };
  Shard& ShardOf(std::string_view word) const;
  mutable Shard shards_[kShards];
};

}  // namespace loom::tokenizer
