#pragma once
// The building blocks of the forward pass, written from the Hugging Face
// equations. Private to the model module. All take and return tensors in the
// parameter dtype unless said otherwise; autograd flows through all of them.

#include <ATen/ATen.h>

#include "weights.h"

namespace loom::model {

// at::linear (y = x w^T + b). x: [T, in], w: [out, in] -> [T, out]. A single
// row without autograd on the CPU runs as a matrix-vector product: BLAS gemv
// streams the weight once, where gemm with one row runs several times slower
// (batch-1 decode is all such rows).
at::Tensor Linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {});

// RMSNorm computed in float32, cast back, then scaled: w * (x / rms(x)).
// x: [..., D], weight: [D] -> [..., D]
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);

// Rotary tables for `positions` [T] int64 -> cos, sin: [T, head_dim] in `dtype`.
std::pair<at::Tensor, at::Tensor> RopeTables(const at::Tensor& positions, int64_t head_dim,
                                             double theta, at::ScalarType dtype);

// Rotate-half RoPE. x: [T, heads, hd], cos/sin: [T, hd] -> [T, heads, hd]
at::Tensor ApplyRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// Grouped-query attention over padded batches.
//   q: [B, Nq, nh, hd]; k, v: [B, S, kvh, hd]
//   mask: [B, Nq, S] float32 additive mask (0 visible, -inf hidden; see
//         PaddedLayout::mask); every query must see at least one key
// Softmax in float32.  -> [B, Nq, nh, hd]
at::Tensor Attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& mask);

// SwiGLU MLP: down(silu(gate x) * up x). x: [T, H] -> [T, H]
at::Tensor Mlp(const MlpWeights& w, const at::Tensor& x);

// Qwen3-MoE block. x: [T, H]. `replay` [T, k] int64 expert ids to use instead
// of the top-k (undefined = route fresh). Writes the chosen ids to `chosen`
// ([T, k] int64).  -> [T, H]
at::Tensor MoeBlock(const LayerWeights& w, const ModelConfig& config, const at::Tensor& x,
                    const at::Tensor& replay, at::Tensor* chosen);

}  // namespace loom::model
