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

}  // namespace loom::model
