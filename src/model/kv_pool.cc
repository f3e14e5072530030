// KvBlockPool: block allocation, slot arithmetic and export/import.

#include "loom/model/kv_pool.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "loom/config/check.h"
#include "loom/model/config.h"

namespace loom::model {

KvBlockPool::KvBlockPool(const KvPoolOptions& options) : options_(options) {
  LOOM_CHECK(options.num_layers > 0 && options.num_kv_heads > 0 && options.head_dim > 0 &&
                 options.block_size > 0 && options.num_blocks >= 0,
             "bad KvPoolOptions");
  LOOM_CHECK(options.num_blocks <= INT32_MAX, "too many blocks: " << options.num_blocks);
  auto tensor_options = at::TensorOptions().dtype(options.dtype).device(options.device);
  for (int64_t l = 0; l < options.num_layers; ++l) {
    keys_.push_back(at::zeros(
        {options.num_blocks, options.block_size, options.num_kv_heads, options.head_dim},
        tensor_options));
    values_.push_back(at::zeros_like(keys_.back()));
  }
  free_.reserve(options.num_blocks);
  // Stack order hands out low block ids first.
  for (int64_t b = options.num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

int64_t KvBlockPool::BlocksFor(int64_t tokens) const {
  return (tokens + options_.block_size - 1) / options_.block_size;
}

int64_t KvBlockPool::BytesPerToken() const {
  return 2 * options_.num_layers * options_.num_kv_heads * options_.head_dim *
         static_cast<int64_t>(c10::elementSize(options_.dtype));
}

int64_t KvBlockPool::BytesPerBlock() const { return BytesPerToken() * options_.block_size; }

absl::Status KvBlockPool::Reserve(KvSequence& seq, int64_t total_tokens) {
  int64_t need = BlocksFor(total_tokens) - static_cast<int64_t>(seq.blocks.size());
  if (need <= 0) return absl::OkStatus();
  if (need > free_blocks()) {
    return absl::ResourceExhaustedError(absl::StrCat("KV pool full: ", need,
                                                     " blocks needed, ", free_blocks(),
                                                     " free of ", num_blocks()));
  }
  for (int64_t i = 0; i < need; ++i) {
    seq.blocks.push_back(free_.back());
    free_.pop_back();
  }
  return absl::OkStatus();
}

void KvBlockPool::Free(KvSequence& seq) {
  for (auto it = seq.blocks.rbegin(); it != seq.blocks.rend(); ++it) free_.push_back(*it);
  seq.blocks.clear();
  seq.length = 0;
}

void KvBlockPool::Truncate(KvSequence& seq, int64_t length) {
  LOOM_CHECK(length >= 0, "negative length");
  seq.length = std::min(seq.length, length);
  int64_t keep = BlocksFor(length);
  while (static_cast<int64_t>(seq.blocks.size()) > keep) {
    free_.push_back(seq.blocks.back());
    seq.blocks.pop_back();
  }
}

at::Tensor KvBlockPool::Slots(const KvSequence& seq, int64_t begin, int64_t end) const {
  LOOM_CHECK(0 <= begin && begin <= end && BlocksFor(end) <= (int64_t)seq.blocks.size(),
             "slots [" << begin << ", " << end << ") not reserved");
  std::vector<int64_t> slots(end - begin);
  const int64_t bs = options_.block_size;
  for (int64_t t = begin; t < end; ++t) slots[t - begin] = seq.blocks[t / bs] * bs + t % bs;
  return at::tensor(slots, at::kLong);
}

KvSnapshot KvBlockPool::Export(const KvSequence& seq, at::Device device) const {
  KvSnapshot snap;
  snap.length = seq.length;
  at::Tensor slots = Slots(seq, 0, seq.length).to(options_.device);
  std::vector<at::Tensor> ks, vs;
  for (int64_t l = 0; l < options_.num_layers; ++l) {
    ks.push_back(keys_[l].flatten(0, 1).index_select(0, slots));
    vs.push_back(values_[l].flatten(0, 1).index_select(0, slots));
  }
  snap.key = at::stack(ks).to(device);
  snap.value = at::stack(vs).to(device);
  return snap;
}

absl::Status KvBlockPool::Import(const KvSnapshot& snapshot, KvSequence& seq) {
  const auto& o = options_;
  std::vector<int64_t> want = {o.num_layers, snapshot.length, o.num_kv_heads, o.head_dim};
  if (!seq.blocks.empty() || seq.length != 0) {
    return absl::FailedPreconditionError("KV import into a non-empty sequence");
  }
  if (!snapshot.key.defined() || !snapshot.value.defined() || snapshot.key.sizes() != want ||
      snapshot.value.sizes() != want || snapshot.key.scalar_type() != o.dtype ||
      snapshot.value.scalar_type() != o.dtype) {
    return absl::InvalidArgumentError("KV snapshot does not match the pool's shape or dtype");
  }
  if (auto status = Reserve(seq, snapshot.length); !status.ok()) return status;
  at::Tensor slots = Slots(seq, 0, snapshot.length).to(o.device);
  for (int64_t l = 0; l < o.num_layers; ++l) {
    keys_[l].flatten(0, 1).index_copy_(0, slots, snapshot.key[l].to(o.device));
    values_[l].flatten(0, 1).index_copy_(0, slots, snapshot.value[l].to(o.device));
  }
  seq.length = snapshot.length;
  return absl::OkStatus();
}

KvPoolOptions KvPoolOptionsFor(const ModelConfig& config, int64_t max_tokens, int64_t block_size,
                               at::ScalarType dtype, at::Device device) {
  KvPoolOptions o;
  o.num_layers = config.num_hidden_layers;
  o.num_kv_heads = config.num_key_value_heads;
  o.head_dim = config.head_dim;
  o.block_size = block_size;
  o.num_blocks = (max_tokens + block_size - 1) / block_size;
  o.dtype = dtype;
  o.device = device;
  return o;
}

}  // namespace loom::model
