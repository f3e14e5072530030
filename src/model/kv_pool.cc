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
    keys_.push_back(
        at::zeros({options.num_blocks, options.block_size, options.num_kv_heads, options.head_dim},
                  tensor_options));
    values_.push_back(at::zeros_like(keys_.back()));
  }
  info_.resize(options.num_blocks);
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

namespace {

uint64_t Mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdULL;
}

uint64_t ChainKey(uint64_t parent, const std::vector<int64_t>& tokens, int64_t begin,
                  int64_t count) {
  uint64_t h = Mix(0x6c6f6f6d, parent);
  for (int64_t i = begin; i < begin + count; ++i) h = Mix(h, static_cast<uint64_t>(tokens[i]));
  return h;
}

}  // namespace

int64_t KvBlockPool::BlocksToReserve(const KvSequence& seq, int64_t total_tokens) const {
  const int64_t held = static_cast<int64_t>(seq.blocks.size());
  const int64_t wanted = BlocksFor(total_tokens);
  int64_t need = std::max<int64_t>(0, wanted - held);
  if (total_tokens <= seq.length) return need;
  for (int64_t i = seq.length / block_size(); i < std::min(held, wanted); ++i) {
    if (Shared(seq.blocks[i])) ++need;
  }
  return need;
}

absl::Status KvBlockPool::Reserve(KvSequence& seq, int64_t total_tokens) {
  const int64_t need = BlocksToReserve(seq, total_tokens);
  if (need == 0) return absl::OkStatus();
  if (need > free_blocks()) {
    return absl::ResourceExhaustedError(absl::StrCat("KV pool full: ", need, " blocks needed, ",
                                                     free_blocks(), " free of ", num_blocks()));
  }
  const int64_t held = static_cast<int64_t>(seq.blocks.size());
  const int64_t wanted = BlocksFor(total_tokens);
  if (total_tokens > seq.length) {
    // Copy on write: the blocks the new tokens land in must be this sequence's alone.
    for (int64_t i = seq.length / block_size(); i < std::min(held, wanted); ++i) {
      const int32_t shared = seq.blocks[i];
      if (!Shared(shared)) continue;
      const int32_t own = TakeBlock();
      CopyBlock(shared, own);
      Release(shared);
      seq.blocks[i] = own;
      seq.published = std::min(seq.published, i);
      ++counters_.copies;
    }
  }
  for (int64_t i = held; i < wanted; ++i) seq.blocks.push_back(TakeBlock());
  return absl::OkStatus();
}

void KvBlockPool::Free(KvSequence& seq) {
  // The tail is released first, so it is evicted before the head it extends.
  for (auto it = seq.blocks.rbegin(); it != seq.blocks.rend(); ++it) Release(*it);
  seq.blocks.clear();
  seq.length = 0;
  seq.published = 0;
  seq.version = KvSequence::kUnknownVersion;
}

void KvBlockPool::Truncate(KvSequence& seq, int64_t length) {
  LOOM_CHECK(length >= 0, "negative length");
  seq.length = std::min(seq.length, length);
  seq.published = std::min(seq.published, seq.length / block_size());
  const int64_t keep = BlocksFor(length);
  while (static_cast<int64_t>(seq.blocks.size()) > keep) {
    Release(seq.blocks.back());
    seq.blocks.pop_back();
  }
}

int32_t KvBlockPool::TakeBlock() {
  int32_t block;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else {
    LOOM_CHECK(!idle_.empty(), "KV pool: no block to take");
    block = idle_.front();
    idle_.pop_front();
    Unpublish(block);
    ++counters_.evictions;
  }
  info_[block].refs = 1;
  ++references_;
  return block;
}

void KvBlockPool::Hold(int32_t block) {
  BlockInfo& info = info_[block];
  if (info.refs == 0) idle_.erase(info.idle);
  ++info.refs;
  ++references_;
}

void KvBlockPool::Release(int32_t block) {
  BlockInfo& info = info_[block];
  LOOM_CHECK(info.refs > 0, "KV block " << block << " released more often than taken");
  --info.refs;
  --references_;
  if (info.refs > 0) return;
  if (info.node != 0 && keep_released_) {
    info.idle = idle_.insert(idle_.end(), block);
    return;
  }
  if (info.node != 0) Unpublish(block);
  free_.push_back(block);
}

void KvBlockPool::Unpublish(int32_t block) {
  BlockInfo& info = info_[block];
  auto [begin, end] = index_.equal_range(info.key);
  for (auto it = begin; it != end; ++it) {
    if (it->second == block) {
      index_.erase(it);
      break;
    }
  }
  info = BlockInfo();
}

void KvBlockPool::CopyBlock(int32_t from, int32_t to) {
  for (int64_t l = 0; l < options_.num_layers; ++l) {
    keys_[l][to].copy_(keys_[l][from]);
    values_[l][to].copy_(values_[l][from]);
  }
}

int32_t KvBlockPool::FindChild(uint64_t parent, const std::vector<int64_t>& tokens, int64_t begin,
                               int64_t min_version, bool exact) const {
  const int64_t bs = block_size();
  int32_t best = -1;
  auto [first, last] = index_.equal_range(ChainKey(parent, tokens, begin, bs));
  for (auto it = first; it != last; ++it) {
    const BlockInfo& info = info_[it->second];
    if (info.parent != parent || info.version < min_version ||
        (exact && info.version != min_version) ||
        !std::equal(info.tokens.begin(), info.tokens.end(), tokens.begin() + begin)) {
      continue;
    }
    if (best < 0 || info.version > info_[best].version) best = it->second;
  }
  return best;
}

template <class Find>
std::vector<int32_t> KvBlockPool::Walk(int64_t limit, Find find) const {
  const int64_t bs = block_size();
  std::vector<int32_t> chain;
  uint64_t parent = 0;
  for (int64_t begin = 0; begin + bs <= limit; begin += bs) {
    const int32_t block = find(parent, begin);
    if (block < 0) break;
    chain.push_back(block);
    parent = info_[block].node;
  }
  return chain;
}

void KvBlockPool::Take(KvSequence& seq, const std::vector<int32_t>& chain) {
  LOOM_CHECK(seq.blocks.empty() && seq.length == 0, "a prefix taken into a non-empty sequence");
  for (int32_t block : chain) Hold(block);
  seq.blocks = chain;
  seq.length = static_cast<int64_t>(chain.size()) * block_size();
  seq.published = static_cast<int64_t>(chain.size());
}

std::vector<int32_t> KvBlockPool::MatchChain(const std::vector<int64_t>& tokens,
                                             int64_t min_version) const {
  return Walk(static_cast<int64_t>(tokens.size()), [&](uint64_t parent, int64_t begin) {
    return FindChild(parent, tokens, begin, min_version);
  });
}

int64_t KvBlockPool::MatchPrefix(const std::vector<int64_t>& tokens, int64_t min_version) const {
  return static_cast<int64_t>(MatchChain(tokens, min_version).size()) * block_size();
}

int64_t KvBlockPool::AcquirePrefix(KvSequence& seq, const std::vector<int64_t>& tokens,
                                   int64_t min_version) {
  const std::vector<int32_t> chain = MatchChain(tokens, min_version);
  Take(seq, chain);
  if (chain.empty()) return 0;
  seq.version = info_[chain.front()].version;
  for (int32_t block : chain) seq.version = std::min(seq.version, info_[block].version);
  return seq.length;
}

bool KvBlockPool::HoldsSnapshot(int32_t block, const KvSnapshot& snapshot, int64_t begin) const {
  const int64_t bs = block_size();
  for (int64_t l = 0; l < options_.num_layers; ++l) {
    if (!at::equal(keys_[l][block], snapshot.key[l].narrow(0, begin, bs).to(options_.device)) ||
        !at::equal(values_[l][block], snapshot.value[l].narrow(0, begin, bs).to(options_.device))) {
      return false;
    }
  }
  return true;
}

int64_t KvBlockPool::AcquireSnapshotPrefix(KvSequence& seq, const KvSnapshot& snapshot,
                                           const std::vector<int64_t>& tokens) {
  std::vector<int32_t> chain;
  const bool known = snapshot.version != KvSequence::kUnknownVersion;
  if (known) {
    const int64_t limit = std::min(snapshot.published * block_size(), snapshot.length);
    chain = Walk(limit, [&](uint64_t parent, int64_t begin) {
      const int32_t block = FindChild(parent, tokens, begin, snapshot.version, /*exact=*/true);
      return block >= 0 && HoldsSnapshot(block, snapshot, begin) ? block : -1;
    });
  }
  Take(seq, chain);
  if (known) seq.version = snapshot.version;
  return seq.length;
}

void KvBlockPool::Publish(KvSequence& seq, const std::vector<int64_t>& tokens,
                          const std::vector<int16_t>* rows, int64_t width, int64_t limit) {
  if (seq.version == KvSequence::kUnknownVersion) return;
  const int64_t bs = block_size();
  const int64_t full = limit < 0 ? seq.length / bs : std::min(limit, seq.length / bs);
  LOOM_CHECK(static_cast<int64_t>(tokens.size()) >= seq.length, "Publish: too few tokens");
  uint64_t parent = seq.published > 0 ? info_[seq.blocks[seq.published - 1]].node : 0;
  for (int64_t i = seq.published; i < full; ++i) {
    if (FindChild(parent, tokens, i * bs, seq.version, /*exact=*/true) >= 0) return;
    BlockInfo& info = info_[seq.blocks[i]];
    LOOM_CHECK(info.node == 0 && info.refs == 1, "Publish: block " << seq.blocks[i] << " shared");
    info.node = next_node_++;
    info.parent = parent;
    info.key = ChainKey(parent, tokens, i * bs, bs);
    info.version = seq.version;
    info.tokens.assign(tokens.begin() + i * bs, tokens.begin() + (i + 1) * bs);
    if (rows != nullptr && static_cast<int64_t>(rows->size()) >= (i + 1) * bs * width) {
      info.rows.assign(rows->begin() + i * bs * width, rows->begin() + (i + 1) * bs * width);
    }
    index_.emplace(info.key, seq.blocks[i]);
    parent = info.node;
    ++counters_.published;
    seq.published = i + 1;
  }
}

void KvBlockPool::DropCached(int64_t min_version) {
  for (auto it = idle_.begin(); it != idle_.end();) {
    const int32_t block = *it;
    if (info_[block].version >= min_version) {
      ++it;
      continue;
    }
    it = idle_.erase(it);
    Unpublish(block);
    free_.push_back(block);
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
  snap.version = seq.version;
  snap.published = seq.published;
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
  const int64_t begin = seq.length;
  if (begin % o.block_size != 0 || static_cast<int64_t>(seq.blocks.size()) != BlocksFor(begin) ||
      begin > snapshot.length) {
    return absl::FailedPreconditionError(
        "KV import into a sequence that holds more than whole blocks of the snapshot");
  }
  if (!snapshot.key.defined() || !snapshot.value.defined() || snapshot.key.sizes() != want ||
      snapshot.value.sizes() != want || snapshot.key.scalar_type() != o.dtype ||
      snapshot.value.scalar_type() != o.dtype) {
    return absl::InvalidArgumentError("KV snapshot does not match the pool's shape or dtype");
  }
  if (auto status = Reserve(seq, snapshot.length); !status.ok()) return status;
  at::Tensor slots = Slots(seq, begin, snapshot.length).to(o.device);
  for (int64_t l = 0; l < o.num_layers; ++l) {
    const int64_t rest = snapshot.length - begin;
    keys_[l].flatten(0, 1).index_copy_(0, slots,
                                       snapshot.key[l].narrow(0, begin, rest).to(o.device));
    values_[l].flatten(0, 1).index_copy_(0, slots,
                                         snapshot.value[l].narrow(0, begin, rest).to(o.device));
  }
  seq.length = snapshot.length;
  seq.version = snapshot.version;
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
