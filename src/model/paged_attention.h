#pragma once
// Decode attention read straight from the paged KV pool, for steps where every
// sample adds exactly one token. The general path (forward.cc) gathers each
// sample's cache into a padded [B, S, kvh, hd] tensor and runs batched
// matmuls; for one query per sample that gather, the mask and the many tiny
// per-(sample, head) GEMMs cost more than the attention itself. This kernel
// walks each sample's block table once per KV head instead. CPU only, float32
// and bfloat16 (accumulating in float32). Private to the model module.

#include <ATen/ATen.h>

namespace loom::model {

// True when PagedDecodeAttention serves this device and dtype (CPU; float32
// or bfloat16).
bool PagedDecodeAttentionSupports(at::Device device, at::ScalarType dtype);

// q:           [B, nh, hd] the one new query of each sample (RoPE applied)
// key, value:  [num_blocks, block_size, kvh, hd] one layer of the pool, the
//              new token's K/V already written
// block_table: [B, max_blocks] int32 block ids of each sample
// key_len:     [B] int64 keys each sample attends to (its length incl. the new token)
// Softmax in float32, scaled by 1/sqrt(hd), no mask beyond key_len.  -> [B, nh, hd]
at::Tensor PagedDecodeAttention(const at::Tensor& q, const at::Tensor& key, const at::Tensor& value,
                                const at::Tensor& block_table, const at::Tensor& key_len);

}  // namespace loom::model
