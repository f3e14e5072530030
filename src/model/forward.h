#pragma once
// The layer stack shared by Transformer::Score and Transformer::Step. Private
// to the model module.

#include <functional>
#include <utility>

#include <ATen/ATen.h>

#include "layout.h"
#include "weights.h"

namespace loom::model {

// Turns one layer's new keys/values ([T, kvh, hd] each) into the padded keys
// and values attention reads ([B, S, kvh, hd] each): padding them (training)
// or writing them to the KV pool and gathering each sample's cache (decode).
using KvSource = std::function<std::pair<at::Tensor, at::Tensor>(
    int64_t layer, const at::Tensor& k, const at::Tensor& v)>;

struct StackInput {
  at::Tensor tokens;     // [T] int64
  at::Tensor positions;  // [T] int64
  const PaddedLayout* layout = nullptr;
  KvSource kv;
  at::Tensor replay;     // [T, n_moe, k] integer, or undefined
};

// Embedding, every decoder layer and the final norm.  -> hidden [T, H].
// `routing` (if not null) receives [T, n_moe, k] kRoutingDtype for MoE models.
at::Tensor RunStack(const ModelConfig& config, const ModelWeights& weights,
                    const StackInput& input, at::Tensor* routing);

}  // namespace loom::model
