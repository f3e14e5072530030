#pragma once
// Writing and reading a SampleState: the arrays (tokens, loss mask, log-probs,
// versions, routing, KV snapshot) as one safetensors file and the rest (ids,
// sampling and stop parameters, RNG, segments, phase) as JSON.
// Round trips are bit-exact.
//
// The in-memory forms (SampleStateJson / SampleStateTensors /
// SampleStateFromParts) let a checkpoint writer place many samples in its own
// files; WriteSampleState / ReadSampleState use PREFIX.json and
// PREFIX.safetensors, each written atomically. Reading checks every field's
// type and every array's length and dtype: a malformed or truncated file is an
// INVALID_ARGUMENT (or NOT_FOUND) status naming the file and field, never a
// crash. Thread-safe: no shared state.

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "loom/model/safetensors.h"
#include "loom/rollout/sample_state.h"

namespace loom::rollout {

// Everything but the arrays, as pretty-printed JSON.
std::string SampleStateJson(const SampleState& state);
// The arrays: tokens [T] I64, loss_mask [T] U8, logprobs [T] F32, versions
// [T] I64, routing [rows, moe_layers, top_k] I16 (MoE only), kv.key and
// kv.value [layers, kv_length, kv_heads, head_dim] (when the KV is on host).
model::TensorMap SampleStateTensors(const SampleState& state);
// The inverse of the two above; `source` prefixes error messages.
absl::StatusOr<SampleState> SampleStateFromParts(const std::string& json_text,
                                                 const model::TensorMap& tensors,
                                                 const std::string& source);

absl::Status WriteSampleState(const SampleState& state, const std::string& prefix);
absl::StatusOr<SampleState> ReadSampleState(const std::string& prefix);

}  // namespace loom::rollout
