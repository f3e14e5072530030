#pragma once
// Inputs and outputs of the two forward paths of Transformer (transformer.h).
// Plain structs of tensors; shapes and dtypes are beside each field.

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "loom/model/kv_pool.h"

namespace loom::model {

// Expert ids chosen per token and MoE layer are stored in this type.
inline constexpr at::ScalarType kRoutingDtype = at::kShort;  // int16: up to 32767 experts

// Training / scoring input: sequences packed one after another. Each sequence
// attends causally to itself only.
struct PackedBatch {
  at::Tensor tokens;             // [T] int64, the sequences concatenated
  std::vector<int64_t> lengths;  // tokens per sequence; sums to T
  at::Tensor positions;          // [T] int64 rotary positions; undefined = 0..len-1 per sequence
  at::Tensor targets;            // [T] int64 token to score after each position; -1 = none (0)
  at::Tensor replay_routing;     // [T, n_moe_layers, k] kRoutingDtype; undefined = route fresh
};

// Teacher forcing over `sequences`: targets[t] = the next token of the same
// sequence, -1 on each sequence's last token.
PackedBatch TeacherForcingBatch(const std::vector<std::vector<int64_t>>& sequences);

// Another model's next-token distribution at some rows of a batch, for
// distillation: its final hidden states and LM head (the compact form: H_t
// numbers per row, the head applied chunk by chunk inside the KL), or its
// log-probs. Both at the same temperature as the Score call (hidden states
// unscaled: Score divides them by the temperature).
struct TeacherRows {
  at::Tensor rows;      // [N] int64 rows of T
  at::Tensor hidden;    // [N, H_t] final hidden states (after the last norm)
  at::Tensor head;      // [V, H_t] the LM head, same dtype as `hidden`
  at::Tensor logprobs;  // [N, V] float32 log-probs at the temperature; instead of hidden + head
};

struct ScoreOptions {
  int64_t chunk_tokens = 256;  // rows of [chunk, vocab] logits alive at once
  double temperature = 1.0;    // log-probs of softmax(logits / temperature), > 0
  at::Tensor full_vocab_rows;  // [N] int64 rows of T to return full-vocab log-probs for
  at::Tensor hidden_rows;      // [N] int64 rows of T to return final hidden states for
  // Rows at which to return the full-vocabulary reverse KL(this model ‖
  // teacher) at `temperature`; borrowed, null = none.
  const TeacherRows* teacher = nullptr;
};

struct ScoreResult {
  at::Tensor logprobs;       // [T] float32 log p(targets[t] | tokens[..t]); 0 where target -1
                             // (all 0, without autograd, when the batch has no targets)
  at::Tensor full_logprobs;  // [N, vocab] float32 for ScoreOptions::full_vocab_rows
  at::Tensor hidden;         // [N, H] final hidden states (unscaled) at ScoreOptions::hidden_rows
  at::Tensor kl;             // [N] float32 KL(this ‖ teacher) at the teacher's rows; autograd
                             // flows through this model's side only
  at::Tensor routing;        // [T, n_moe_layers, k] kRoutingDtype (chosen or replayed);
                             // undefined for dense models
};

// One sample's part of an incremental step.
struct StepInput {
  KvSequence* seq = nullptr;    // borrowed; its first seq->length tokens are cached
  std::vector<int64_t> tokens;  // new tokens (>= 1): a prompt chunk or one decoded token
};

struct StepResult {
  at::Tensor logits;   // [B, vocab] float32 after each sample's last new token
  at::Tensor routing;  // [sum of new tokens, n_moe_layers, k] kRoutingDtype, samples in
                       // input order; undefined for dense models
  std::vector<int64_t> routing_offsets;  // [B + 1] first routing row of each sample
};

}  // namespace loom::model
