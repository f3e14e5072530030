#pragma once
// The layer stack shared by Transformer::Score and Transformer::Step. Private
// to the model module.

#include <functional>
#include <utility>

#include <ATen/ATen.h>

#include "layout.h"
#include "weights.h"

namespace loom::model {

// One layer's attention given its new queries [T, nh, hd] and new keys and
// values [T, kvh, hd] (RoPE applied): over the batch itself (training) or
// after writing the new K/V to the KV pool, over each sample's cache (decode).
// -> [T, nh, hd]
using AttentionFn = std::function<at::Tensor(int64_t layer, const at::Tensor& q,
                                             const at::Tensor& k, const at::Tensor& v)>;

// Attention of packed rows over padded keys and values [B, S, kvh, hd].
at::Tensor PaddedAttention(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                           const PaddedLayout& layout);

struct StackInput {
  at::Tensor tokens;     // [T] int64
  at::Tensor positions;  // [T] int64
  AttentionFn attention;
  at::Tensor replay;  // [T, n_moe, k] integer, or undefined
};

// Embedding, every decoder layer and the final norm.  -> hidden [T, H].
// `routing` (if not null) receives [T, n_moe, k] kRoutingDtype for MoE models.
at::Tensor RunStack(const ModelConfig& config, const ModelWeights& weights, const StackInput& input,
                    at::Tensor* routing);

}  // namespace loom::model
