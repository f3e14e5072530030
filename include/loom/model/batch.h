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

struct ScoreOptions {
  int64_t chunk_tokens = 256;  // rows of [chunk, vocab] logits alive at once
  double temperature = 1.0;    // log-probs of softmax(logits / temperature), > 0
  at::Tensor full_vocab_rows;  // [N] int64 rows of T to return full-vocab log-probs for
};

struct ScoreResult {
  at::Tensor logprobs;       // [T] float32 log p(targets[t] | tokens[..t]); 0 where target -1
  at::Tensor full_logprobs;  // [N, vocab] float32 for ScoreOptions::full_vocab_rows
  at::Tensor routing;        // [T, n_moe_layers, k] kRoutingDtype (chosen or replayed);
                             // undefined for dense models
};

// One sample's part of an incremental step.
struct StepInput {
  KvSequence* seq = nullptr;    // borrowed; its first seq->length tokens are cached
  std::vector<int64_t> tokens;  // new tokens (>= 1): a prompt chunk or one decoded token
};

struct StepResult {
  at::Tensor logits;    // [B, vocab] float32 after each sample's last new token
  at::Tensor routing;   // [sum of new tokens, n_moe_layers, k] kRoutingDtype, samples in
                        // input order; undefined for dense models
  std::vector<int64_t> routing_offsets;  // [B + 1] first routing row of each sample
};

}  // namespace loom::model
