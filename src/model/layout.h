#pragma once
// How a packed run of tokens (several sequences back to back) maps onto the
// padded [B, Nq] batch that attention works on. Private to the model module.

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

namespace loom::model {

struct PaddedLayout {
  int64_t batch = 0;
  int64_t max_q = 0;       // Nq: longest run of new tokens
  at::Tensor pad_index;    // [B * Nq] int64 packed row of each padded slot; T = a zero row
  at::Tensor unpad_index;  // [T] int64 padded slot of each packed row
  at::Tensor q_start;      // [B] int64 key index of each sample's first query
  at::Tensor key_len;      // [B] int64 keys visible to each sample
  // Additive attention mask, built once and shared by every layer: query i of
  // sample b sees key j iff q_start[b] + i >= j and j < key_len[b].
  at::Tensor mask;  // [B, Nq, S] float32, 0 or -inf; S = max key_len
};

// `new_tokens[b]` packed rows for sample b, which already has `cached[b]`
// keys before them (all zeros for training). Tensors on `device`.
PaddedLayout MakeLayout(const std::vector<int64_t>& new_tokens, const std::vector<int64_t>& cached,
                        at::Device device);

// rows: [T, ...] -> [B, Nq, ...] (padding rows are zeros).
at::Tensor Pad(const at::Tensor& rows, const PaddedLayout& layout);

// padded: [B, Nq, ...] -> [T, ...].
at::Tensor Unpad(const at::Tensor& padded, const PaddedLayout& layout);

}  // namespace loom::model
