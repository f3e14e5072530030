#pragma once
// Log-probabilities from final hidden states without materialising the full
// [T, vocab] logits: forward and backward both walk the rows in chunks.
// Private to the model module.

#include <ATen/ATen.h>

namespace loom::model {

// log softmax(hidden @ weight^T)[t, targets[t]], 0 where targets[t] < 0.
//   hidden: [T, H]; weight: [V, H] (same dtype); targets: [T] int64
//   -> [T] float32, differentiable w.r.t. hidden and weight.
at::Tensor ChunkedTargetLogprobs(const at::Tensor& hidden, const at::Tensor& weight,
                                 const at::Tensor& targets, int64_t chunk_rows);

// Reverse KL(p ‖ q) per row over the full vocabulary, p = softmax(hidden @
// weight^T), q = softmax(teacher_hidden @ teacher_head^T) — or q given as
// `teacher_logprobs` [N, V] when teacher_head is undefined. Both sides are
// computed chunk by chunk in float32, forward and backward.
//   hidden: [N, H]; weight: [V, H]; teacher_hidden: [N, H_t]; teacher_head: [V, H_t]
//   -> [N] float32, differentiable w.r.t. hidden and weight (q is a constant).
at::Tensor ChunkedReverseKl(const at::Tensor& hidden, const at::Tensor& weight,
                            const at::Tensor& teacher_hidden, const at::Tensor& teacher_head,
                            const at::Tensor& teacher_logprobs, int64_t chunk_rows);

// Full-vocabulary log-probs for a few rows, in chunks. -> [N, V] float32
at::Tensor FullLogprobs(const at::Tensor& hidden, const at::Tensor& weight, int64_t chunk_rows);

}  // namespace loom::model
