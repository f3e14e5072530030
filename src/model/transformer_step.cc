// Transformer::Step: the incremental forward over a paged KV cache.

#include <ATen/core/grad_mode.h>

#include "absl/strings/str_cat.h"
#include "forward.h"
#include "loom/config/check.h"
#include "loom/model/transformer.h"
#include "ops.h"
#include "paged_attention.h"

namespace loom::model {
namespace {

absl::Status CheckPool(const KvBlockPool& pool, const ModelConfig& c, at::ScalarType dtype,
                       at::Device device) {
  const KvPoolOptions& o = pool.options();
  if (o.num_layers != c.num_hidden_layers || o.num_kv_heads != c.num_key_value_heads ||
      o.head_dim != c.head_dim || o.dtype != dtype || o.device != device) {
    return absl::InvalidArgumentError(
        "KV pool shape, dtype or device does not match the model (use PoolOptions)");
  }
  return absl::OkStatus();
}

absl::Status CheckInputs(const std::vector<StepInput>& batch, const ModelConfig& c,
                         const KvBlockPool& pool) {
  int64_t blocks_needed = 0;
  for (size_t b = 0; b < batch.size(); ++b) {
    const StepInput& in = batch[b];
    if (in.seq == nullptr || in.tokens.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("step input ", b, ": no sequence or tokens"));
    }
    for (int64_t id : in.tokens) {
      if (id < 0 || id >= c.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat("step input ", b, ": token id ", id,
                                                       " out of range [0, ", c.vocab_size, ")"));
      }
    }
    blocks_needed +=
        pool.BlocksToReserve(*in.seq, in.seq->length + static_cast<int64_t>(in.tokens.size()));
  }
  if (blocks_needed > pool.free_blocks()) {
    return absl::ResourceExhaustedError(absl::StrCat("KV pool full: the step needs ", blocks_needed,
                                                     " blocks, ", pool.free_blocks(), " free"));
  }
  return absl::OkStatus();
}

// The slots attention reads: [B, S] with S the longest sequence after the
// step; padding repeats slot 0 of the sample (masked out anyway).
at::Tensor ReadSlots(const std::vector<StepInput>& batch, const KvBlockPool& pool) {
  int64_t s = 0;
  for (const auto& in : batch) s = std::max<int64_t>(s, in.seq->length + in.tokens.size());
  const int64_t bs = pool.block_size();
  std::vector<int64_t> slots(batch.size() * s);
  for (size_t b = 0; b < batch.size(); ++b) {
    const KvSequence& seq = *batch[b].seq;
    const int64_t len = seq.length + static_cast<int64_t>(batch[b].tokens.size());
    for (int64_t t = 0; t < s; ++t) {
      const int64_t u = t < len ? t : 0;
      slots[b * s + t] = seq.blocks[u / bs] * bs + u % bs;
    }
  }
  return at::tensor(slots, at::kLong).view({static_cast<int64_t>(batch.size()), s});
}

// Each sample's block table, padded with block 0 to the longest: [B, max_blocks] int32.
at::Tensor BlockTable(const std::vector<StepInput>& batch) {
  size_t width = 0;
  for (const auto& in : batch) width = std::max(width, in.seq->blocks.size());
  at::Tensor table =
      at::zeros({static_cast<int64_t>(batch.size()), static_cast<int64_t>(width)}, at::kInt);
  int32_t* rows = table.data_ptr<int32_t>();
  for (size_t b = 0; b < batch.size(); ++b) {
    const std::vector<int32_t>& blocks = batch[b].seq->blocks;
    std::copy(blocks.begin(), blocks.end(), rows + b * width);
  }
  return table;
}

}  // namespace

absl::StatusOr<StepResult> Transformer::Step(const std::vector<StepInput>& batch,
                                             KvBlockPool& pool) const {
  if (batch.empty()) return absl::InvalidArgumentError("empty step batch");
  if (auto s = CheckPool(pool, config_, options_.dtype, options_.device); !s.ok()) return s;
  if (auto s = CheckInputs(batch, config_, pool); !s.ok()) return s;
  for (const StepInput& in : batch) {
    auto reserved = pool.Reserve(*in.seq, in.seq->length + in.tokens.size());
    LOOM_CHECK(reserved.ok(), << reserved.message());  // counted in CheckInputs
  }
  try {
    at::NoGradGuard no_grad;
    const at::Device device = options_.device;
    std::vector<int64_t> tokens, positions, counts, cached;
    std::vector<at::Tensor> write_slots;
    for (const StepInput& in : batch) {
      const int64_t n = static_cast<int64_t>(in.tokens.size());
      tokens.insert(tokens.end(), in.tokens.begin(), in.tokens.end());
      for (int64_t i = 0; i < n; ++i) positions.push_back(in.seq->length + i);
      write_slots.push_back(pool.Slots(*in.seq, in.seq->length, in.seq->length + n));
      counts.push_back(n);
      cached.push_back(in.seq->length);
    }
    PaddedLayout layout = MakeLayout(counts, cached, device);
    at::Tensor writes = at::cat(write_slots).to(device);
    StackInput input;
    input.tokens = at::tensor(tokens, at::kLong).to(device);
    input.positions = at::tensor(positions, at::kLong).to(device);
    // Pure decode steps read the pool in place; others gather a padded copy.
    const bool paged = layout.max_q == 1 && PagedDecodeAttentionSupports(device, options_.dtype);
    at::Tensor table = paged ? BlockTable(batch) : at::Tensor();
    at::Tensor reads = paged ? at::Tensor() : ReadSlots(batch, pool).to(device);
    input.attention = [&](int64_t layer, const at::Tensor& q, const at::Tensor& k,
                          const at::Tensor& v) {
      at::Tensor& keys = pool.key(layer);
      at::Tensor& values = pool.value(layer);
      keys.flatten(0, 1).index_copy_(0, writes, k);
      values.flatten(0, 1).index_copy_(0, writes, v);
      if (paged) return PagedDecodeAttention(q, keys, values, table, layout.key_len);
      std::vector<int64_t> shape = {reads.size(0), reads.size(1), k.size(1), k.size(2)};
      return PaddedAttention(q, keys.flatten(0, 1).index_select(0, reads.view(-1)).view(shape),
                             values.flatten(0, 1).index_select(0, reads.view(-1)).view(shape),
                             layout);
    };
    StepResult result;
    at::Tensor hidden = RunStack(config_, *weights_, input, &result.routing);
    std::vector<int64_t> last;
    result.routing_offsets.push_back(0);
    for (int64_t n : counts) {
      result.routing_offsets.push_back(result.routing_offsets.back() + n);
      last.push_back(result.routing_offsets.back() - 1);
    }
    at::Tensor rows = hidden.index_select(0, at::tensor(last, at::kLong).to(device));
    result.logits = Linear(rows, weights_->lm_head).to(at::kFloat);
    for (size_t b = 0; b < batch.size(); ++b) batch[b].seq->length += counts[b];
    return result;
  } catch (const c10::Error& e) {
    for (const StepInput& in : batch) pool.Truncate(*in.seq, in.seq->length);
    return absl::InternalError(absl::StrCat("Step: ", e.what_without_backtrace()));
  }
}

}  // namespace loom::model
