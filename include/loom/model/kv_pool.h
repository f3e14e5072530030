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
// Ownership: the rollout engine owns the pool and the KvSequences; the model
// borrows the pool for one Transformer::Step call, which reserves room for the
// new tokens, writes their K/V and advances `length`. Not thread-safe: one
// thread (the run loop) uses a pool.

#include <cstdint>
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
};

// A sequence's K/V copied out of the pool (for offload to host or disk).
struct KvSnapshot {
  at::Tensor key;    // [num_layers, length, num_kv_heads, head_dim], pool dtype
  at::Tensor value;  // [num_layers, length, num_kv_heads, head_dim]
  int64_t length = 0;
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

  // Returns every block of `seq` to the pool and resets it to empty.
  void Free(KvSequence& seq);

  // Drops tokens past `length` (freeing whole blocks no longer needed).
  void Truncate(KvSequence& seq, int64_t length);

  // Copies the first seq.length tokens of K/V out to `device` (e.g. CPU).
  KvSnapshot Export(const KvSequence& seq, at::Device device = at::kCPU) const;

  // Reserves blocks for `snapshot` into the empty `seq` and copies it in.
  // INVALID_ARGUMENT when shapes or dtype do not match this pool.
  absl::Status Import(const KvSnapshot& snapshot, KvSequence& seq);

  const KvPoolOptions& options() const { return options_; }
  int64_t num_blocks() const { return options_.num_blocks; }
  int64_t block_size() const { return options_.block_size; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t used_blocks() const { return num_blocks() - free_blocks(); }
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
  KvPoolOptions options_;
  std::vector<at::Tensor> keys_;    // per layer
  std::vector<at::Tensor> values_;  // per layer
  std::vector<int32_t> free_;       // free block ids (a stack)
};

// Options sized for `config` (layers, kv heads, head dim) holding `max_tokens`.
struct ModelConfig;
KvPoolOptions KvPoolOptionsFor(const ModelConfig& config, int64_t max_tokens,
                               int64_t block_size, at::ScalarType dtype, at::Device device);

}  // namespace loom::model
