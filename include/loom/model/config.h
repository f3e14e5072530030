#pragma once
// ModelConfig: the architecture of a decoder-only transformer, read from and
// written to a Hugging Face `config.json`. Supported `model_type`s: llama,
// qwen2 (q/k/v biases), qwen3 (per-head RMSNorm on q and k) and qwen3_moe
// (softmax router over all experts, top-k, optional norm_topk_prob).
//
// Keys that change the computation but are not implemented (a rope_scaling
// type, a non-SiLU activation, sliding windows, ...) are INVALID_ARGUMENT
// errors naming the key, never silently ignored. Keys with no effect on the
// math (architectures, transformers_version, bos_token_id, ...) are kept in
// `extra` and written back unchanged. A plain value type: copy freely.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace loom::model {

struct ModelConfig {
  std::string arch = "llama";  // model_type: llama | qwen2 | qwen3 | qwen3_moe
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // dense SwiGLU width
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // GQA: divides num_attention_heads
  int64_t head_dim = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  int64_t max_position_embeddings = 2048;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v/o biases (llama, qwen3); qwen2 always has q/k/v biases
  std::string torch_dtype = "float32";  // written for HF loaders; loading chooses its own dtype

  // Mixture of experts (qwen3_moe only).
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = false;
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;

  // config.json keys loom does not interpret, as their JSON text (name, value).
  std::vector<std::pair<std::string, std::string>> extra;

  // True when layer `layer` uses the MoE block (HF Qwen3-MoE rule).
  bool IsMoeLayer(int64_t layer) const;
  // Number of MoE layers; routing tensors have this many columns.
  int64_t NumMoeLayers() const;
  // q/k/v projections carry a bias.
  bool HasQkvBias() const { return arch == "qwen2" || attention_bias; }
  bool HasOBias() const { return arch != "qwen2" && attention_bias; }
  bool HasQkNorm() const { return arch == "qwen3" || arch == "qwen3_moe"; }
};

// Parses config.json text. `source` (a path) prefixes every error message.
// Validates shapes (heads divide, sizes positive) and rejects unsupported keys.
absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text,
                                             const std::string& source);

// Reads and parses DIR/config.json.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& dir);

// The config.json text (pretty-printed, HF key names, `extra` included).
std::string ModelConfigToJson(const ModelConfig& config);

// Small defaults for `loom init-model`: a model that runs in milliseconds on a
// CPU. `vocab_size` is left 0 for the caller to fill in.
absl::StatusOr<ModelConfig> DefaultModelConfig(const std::string& arch);

// The ~18M-parameter Llama of the speed targets (hidden 512, 6 layers, 8
// heads, 4 KV heads, head_dim 64, intermediate 1408, vocab 512): what
// `loom bench model` and the GPU check measure.
ModelConfig SpeedBenchmarkConfig();

// Applies one override `key=value` (any config.json key; the value is parsed
// as JSON, falling back to a string) and re-validates. Unknown-but-harmless
// keys land in `extra`.
absl::Status ApplyConfigOverride(ModelConfig& config, const std::string& assignment);

}  // namespace loom::model
