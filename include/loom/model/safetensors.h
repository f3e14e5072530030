#pragma once
// Reading and writing the safetensors format (https://github.com/huggingface/safetensors):
// an 8-byte little-endian header length, a JSON header mapping tensor names to
// {dtype, shape, data_offsets}, then the raw little-endian data.
//
// Reading memory-maps the file; the returned tensors are read-only views that
// keep the mapping alive (copy before writing to them). Every size in the
// header is checked against the file before anything is mapped or allocated:
// a truncated or corrupt file, or a header that lies, is an INVALID_ARGUMENT
// (or NOT_FOUND) status naming the file and tensor, never a crash.
// Supported dtypes: F32, F16, BF16 (plus I64, I32, I16, U8 for loom's own
// state files). Thread-safe: no shared state.

#include <map>
#include <string>

#include <ATen/ATen.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace loom::model {

using TensorMap = std::map<std::string, at::Tensor>;  // name -> CPU tensor

// Reads one .safetensors file.
absl::StatusOr<TensorMap> ReadSafetensors(const std::string& path);

// Reads every tensor of a model directory: DIR/model.safetensors.index.json
// (sharded; every listed tensor must be in the file it names) or else
// DIR/model.safetensors.
absl::StatusOr<TensorMap> ReadModelTensors(const std::string& dir);

// Writes `tensors` (any device; made contiguous on the CPU) to `path`
// atomically, with metadata {"format": "pt"} as HF transformers expects.
absl::Status WriteSafetensors(const std::string& path, const TensorMap& tensors);

// Hugging Face's default max_shard_size ("5GB", decimal as HF counts it).
inline constexpr int64_t kDefaultMaxShardBytes = 5'000'000'000;

// Writes every tensor of a model directory in the layout ReadModelTensors and
// HF transformers read: DIR/model.safetensors when the tensor data fits in
// `max_shard_bytes`, else DIR/model-0000i-of-0000N.safetensors filled in
// name order up to `max_shard_bytes` each (a larger tensor gets a shard of
// its own) plus DIR/model.safetensors.index.json
// ({"metadata": {"total_size": bytes}, "weight_map": {name: file}}). Each
// file is written atomically, the index last; then the files of the other
// layout and shards of an earlier save that the new one does not name are
// removed, so neither reader can pick up stale weights.
absl::Status WriteModelTensors(const std::string& dir, const TensorMap& tensors,
                               int64_t max_shard_bytes = kDefaultMaxShardBytes);

}  // namespace loom::model
