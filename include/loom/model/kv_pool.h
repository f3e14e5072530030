#pragma once
// KvBlockPool: the paged key/value cache of one model. For every layer it
// holds K and V in fixed-size blocks,
//   key(layer), value(layer): [num_blocks, block_size, num_kv_heads, head_dim]
// and hands blocks out to sequences. A sequence (one sample) owns a
// KvSequence: its block table and how many tokens of it are filled. Token t of
// a sequence lives in block blocks[t / block_size], slot t % block_size, in
// every layer.
//
// Accounting is exact: AllocatedBytes() is blocks in use × BytesPerBlock(),
// where BytesPerBlock() = 2 (K and V) · layers · block_size · kv_heads ·
// head_dim · element size. A full pool is a RESOURCE_EXHAUSTED status, never
// an abort, and a failed Reserve allocates nothing.
//
// Prefix sharing: blocks are reference-counted. A full block whose K/V are
// written can be published to the prefix index (Publish), keyed by a hash
// chain — its parent block's node id and its own tokens — and stamped with
// the policy version its KV was computed under. A new sequence then takes
// the longest published chain that matches its tokens (AcquirePrefix) instead
// of computing it again. A block that more than one sequence holds, or that
// is published, is never written: Reserve first copies it to a private block
// (copy on write), whether the write starts at its first slot or inside it.
// A published block no sequence holds stays cached, its memory still counted
// in the pool's capacity, and is evicted least recently released first when a
// block is needed: free_blocks() counts both free and cached-idle blocks, so
// a caller sees the same capacity as without sharing and a held block is
// never evicted. Blocks a sequence releases together are queued leaf first,
// so a chain's tail is evicted before its head.
//
// Ownership: the rollout engine owns the pool and the KvSequences; the model
// borrows the pool for one Transformer::Step call, which reserves room for the
// new tokens, writes their K/V and advances `length`. Not thread-safe: one
// thread (the run loop) uses a pool.

#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include <ATen/ATen.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace loom::model {

struct KvPoolOptions {
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t block_size = 16;  // tokens per block
  int64_t num_blocks = 0;   // capacity of the pool
  at::ScalarType dtype = at::kFloat;
  at::Device device = at::kCPU;
};

// One sequence's view of the pool.
struct KvSequence {
  std::vector<int32_t> blocks;  // block table: block ids in token order
  int64_t length = 0;           // tokens whose K/V are stored
  // Prefix sharing. The oldest policy version whose computation the KV holds
  // (its blocks are published with this stamp); kUnknownVersion: KV of
  // unknown provenance (copied in from a snapshot), never published.
  int64_t version = kUnknownVersion;
  int64_t published = 0;  // leading blocks that are in the prefix index
  static constexpr int64_t kUnknownVersion = -1;
};

// Counters of the prefix index since the pool was made.
struct PrefixCounters {
  int64_t hit_tokens = 0;  // tokens AcquirePrefix handed out instead of recomputing
  int64_t published = 0;   // blocks published
  int64_t evictions = 0;   // cached blocks evicted to make room
  int64_t copies = 0;      // copies on write
};

// A sequence's K/V copied out of the pool (for offload to host or disk).
struct KvSnapshot {
  at::Tensor key;    // [num_layers, length, num_kv_heads, head_dim], pool dtype
  at::Tensor value;  // [num_layers, length, num_kv_heads, head_dim]
  int64_t length = 0;
  // The sequence's KvSequence::version and ::published when it was copied,
  // so that sharing can be restored (AcquireSnapshotPrefix).
  int64_t version = KvSequence::kUnknownVersion;
  int64_t published = 0;
};

class KvBlockPool {
 public:
  // Allocates every block up front (zeroed) on options.device.
  explicit KvBlockPool(const KvPoolOptions& options);

  KvBlockPool(const KvBlockPool&) = delete;
  KvBlockPool& operator=(const KvBlockPool&) = delete;

  // Grows `seq.blocks` so it can hold `total_tokens` tokens. All or nothing:
  // RESOURCE_EXHAUSTED (and `seq` unchanged) when too few blocks are free.
  absl::Status Reserve(KvSequence& seq, int64_t total_tokens);

  // Returns every block of `seq` to the pool (a shared block stays with its
  // other holders, a published one stays cached) and resets it to empty.
  void Free(KvSequence& seq);

  // Drops tokens past `length` (releasing whole blocks no longer needed).
  void Truncate(KvSequence& seq, int64_t length);

  // Blocks Reserve(seq, total_tokens) would take from free_blocks(): new ones
  // plus copies on write of shared blocks from seq.length on.
  int64_t BlocksToReserve(const KvSequence& seq, int64_t total_tokens) const;

  // Prefix sharing (see the file comment). Gives the empty `seq` the longest
  // chain of published blocks matching the full blocks of `tokens` whose
  // version is >= `min_version` (the newest such block at each position) and
  // returns the tokens it covers; seq.version becomes the oldest stamp taken.
  int64_t AcquirePrefix(KvSequence& seq, const std::vector<int64_t>& tokens, int64_t min_version);
  // Restoring sharing after a snapshot (swap, offload, checkpoint): gives the
  // empty `seq` the published blocks along `tokens` that hold exactly the
  // snapshot's first blocks — bit for bit, of its version, at most
  // snapshot.published of them — and returns the tokens they cover.
  int64_t AcquireSnapshotPrefix(KvSequence& seq, const KvSnapshot& snapshot,
                                const std::vector<int64_t>& tokens);
  // The tokens AcquirePrefix would cover, without taking anything.
  int64_t MatchPrefix(const std::vector<int64_t>& tokens, int64_t min_version) const;
  // Publishes the full blocks of `seq` not yet published, up to `limit`
  // blocks (-1: all; tokens[0, length) of it must be `tokens`). Stops at a
  // block whose twin (same parent, tokens and version) is published already:
  // one entry per chain position, so which copy a later sample takes never
  // depends on history. `rows`, if given, holds `width` int16 values per
  // token of tokens (MoE routing) and is kept with each block for samples
  // that acquire it. Does nothing for a sequence of unknown version.
  void Publish(KvSequence& seq, const std::vector<int64_t>& tokens,
               const std::vector<int16_t>* rows = nullptr, int64_t width = 0, int64_t limit = -1);
  // Whether a published block no sequence holds stays cached (true, the
  // default) or leaves the index and is freed at once.
  void set_keep_released(bool keep) { keep_released_ = keep; }
  // The rows published with `block` (empty when none were given).
  const std::vector<int16_t>& PublishedRows(int32_t block) const { return info_[block].rows; }
  // Evicts the cached blocks no sequence holds whose version is below
  // `min_version`: after a weight update no new sequence can take them.
  void DropCached(int64_t min_version);

  // Copies the first seq.length tokens of K/V out to `device` (e.g. CPU).
  KvSnapshot Export(const KvSequence& seq, at::Device device = at::kCPU) const;

  // Reserves blocks for `snapshot` into `seq` and copies it in: all of it
  // into an empty `seq`, or the tokens after the whole blocks `seq` already
  // holds (AcquireSnapshotPrefix). seq.version becomes the snapshot's.
  // INVALID_ARGUMENT when shapes or dtype do not match this pool.
  absl::Status Import(const KvSnapshot& snapshot, KvSequence& seq);

  const KvPoolOptions& options() const { return options_; }
  int64_t num_blocks() const { return options_.num_blocks; }
  int64_t block_size() const { return options_.block_size; }
  // Blocks a Reserve may take: free ones and cached ones no sequence holds.
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size() + idle_.size()); }
  // Blocks some sequence holds (each counted once however many share it).
  int64_t used_blocks() const { return num_blocks() - free_blocks(); }
  // Published blocks no sequence holds (kept for reuse until evicted).
  int64_t cached_blocks() const { return static_cast<int64_t>(idle_.size()); }
  // Block references held beyond one per block: the blocks sharing saves.
  int64_t shared_references() const { return references_ - used_blocks(); }
  int32_t references(int32_t block) const { return info_[block].refs; }
  bool published(int32_t block) const { return info_[block].node != 0; }
  const PrefixCounters& prefix_counters() const { return counters_; }
  // Blocks needed to hold `tokens` tokens.
  int64_t BlocksFor(int64_t tokens) const;

  int64_t BytesPerBlock() const;
  // 2 · layers · kv_heads · head_dim · element size.
  int64_t BytesPerToken() const;
  int64_t AllocatedBytes() const { return used_blocks() * BytesPerBlock(); }
  int64_t CapacityBytes() const { return num_blocks() * BytesPerBlock(); }

  // The storage of one layer; the model writes and reads through these.
  at::Tensor& key(int64_t layer) { return keys_[layer]; }      // [blocks, bs, kvh, hd]
  at::Tensor& value(int64_t layer) { return values_[layer]; }  // [blocks, bs, kvh, hd]
  const at::Tensor& key(int64_t layer) const { return keys_[layer]; }
  const at::Tensor& value(int64_t layer) const { return values_[layer]; }

  // Flat slot index (block * block_size + offset) of tokens [begin, end) of
  // `seq`, which must already be reserved.  -> [end - begin] int64
  at::Tensor Slots(const KvSequence& seq, int64_t begin, int64_t end) const;

 private:
  // What the pool knows of one block. A published block has a node id (never
  // reused, so a child keyed by an evicted parent can never match again).
  struct BlockInfo {
    int32_t refs = 0;
    uint64_t node = 0;    // 0 = not published
    uint64_t parent = 0;  // parent's node id; 0 = first block of a sequence
    uint64_t key = 0;     // hash of (parent, tokens)
    int64_t version = 0;
    std::vector<int64_t> tokens;
    std::vector<int16_t> rows;
    std::list<int32_t>::iterator idle;  // position in idle_ while refs == 0
  };

  int32_t TakeBlock();            // a free block, evicting a cached one if needed
  void Hold(int32_t block);       // one more reference to a published block
  void Release(int32_t block);    // drops one reference
  void Unpublish(int32_t block);  // out of the index (the caller took it off idle_)
  bool Shared(int32_t block) const { return info_[block].refs > 1 || info_[block].node != 0; }
  void CopyBlock(int32_t from, int32_t to);
  // The chain of published blocks from the root, one per full block of
  // [0, limit), as far as `find(parent node, begin)` finds a child (-1: none).
  template <class Find>
  std::vector<int32_t> Walk(int64_t limit, Find find) const;
  std::vector<int32_t> MatchChain(const std::vector<int64_t>& tokens, int64_t min_version) const;
  // Gives the empty `seq` the blocks of `chain` (one more reference each).
  void Take(KvSequence& seq, const std::vector<int32_t>& chain);
  // Whether `block` holds tokens [begin, begin + block_size) of `snapshot`, bit for bit.
  bool HoldsSnapshot(int32_t block, const KvSnapshot& snapshot, int64_t begin) const;
  // The published child of `parent` holding tokens[begin, begin + block_size)
  // with the newest version >= min_version (exact: == min_version); -1 when none.
  int32_t FindChild(uint64_t parent, const std::vector<int64_t>& tokens, int64_t begin,
                    int64_t min_version, bool exact = false) const;

  KvPoolOptions options_;
  std::vector<at::Tensor> keys_;    // per layer
  std::vector<at::Tensor> values_;  // per layer
  std::vector<int32_t> free_;       // free block ids (a stack)
  std::vector<BlockInfo> info_;     // per block
  std::list<int32_t> idle_;         // cached blocks no sequence holds, least recent first
  std::unordered_multimap<uint64_t, int32_t> index_;  // key -> published block
  uint64_t next_node_ = 1;
  bool keep_released_ = true;
  int64_t references_ = 0;  // sum of refs
  PrefixCounters counters_;
};

// Options sized for `config` (layers, kv heads, head dim) holding `max_tokens`.
struct ModelConfig;
KvPoolOptions KvPoolOptionsFor(const ModelConfig& config, int64_t max_tokens, int64_t block_size,
                               at::ScalarType dtype, at::Device device);

}  // namespace loom::model
