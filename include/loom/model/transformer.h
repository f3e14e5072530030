#pragma once
// Transformer: a decoder-only LLM (llama, qwen2, qwen3, qwen3_moe) with its
// parameters, named as in Hugging Face (model.layers.N.self_attn.q_proj.weight,
// ...), and its two forward paths:
//
//  * Score: training and scoring. A packed batch of sequences -> per-token
//    log-probs of given targets, computed chunk by chunk so [T, vocab] logits
//    never exist at once (also in backward). Autograd flows through all of it
//    when the parameters require grad. MoE layers can replay recorded routing:
//    the expert choice is the recorded one, the gate weights come from the
//    current router (so the router is trained).
//  * Step: incremental generation over a paged KV cache. One call takes a batch
//    of samples at different lengths, each adding one or more tokens (prefill
//    and decode mixed), reserves room in the pool, writes the new K/V, advances
//    each KvSequence and returns each sample's last-token logits and routing.
//
// Numerics follow HF: RMSNorm in float32, rotate-half RoPE with float32
// frequencies, GQA, SwiGLU, softmax router in float32. Parameters are float32
// or bfloat16, on the CPU or a CUDA device.
//
// Thread safety: Score and Step are const and may run concurrently with each
// other, but not with anything that changes the parameters (an optimizer step,
// LoadStateDict). Expected failures (bad token ids, a full KV pool, malformed
// files) are Status values; a Step that fails leaves every KvSequence as it was.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "loom/model/batch.h"
#include "loom/model/config.h"
#include "loom/model/kv_pool.h"
#include "loom/model/safetensors.h"

namespace loom::model {

struct ModelWeights;  // the parameters; defined privately in src/model/weights.h

struct LoadOptions {
  at::ScalarType dtype = at::kFloat;  // kFloat or kBFloat16
  at::Device device = at::kCPU;
  bool requires_grad = false;  // parameters are autograd leaves (for training)
  // Score runs the layers' matrix products in bfloat16 (autocast); the
  // parameters stay in `dtype`, and the norms, softmaxes and the LM head's
  // log-probs in float32. Step (decoding) is unaffected.
  bool autocast = false;
};

// Parses "float32" / "bfloat16" (INVALID_ARGUMENT otherwise).
absl::StatusOr<at::ScalarType> ParseDtype(const std::string& name);

class Transformer {
 public:
  // Loads DIR/config.json and DIR/model.safetensors (or the sharded index).
  static absl::StatusOr<std::unique_ptr<Transformer>> Load(const std::string& dir,
                                                           const LoadOptions& options);
  // Builds from tensors with HF names. Missing, unexpected and misshapen
  // tensors are reported together in one INVALID_ARGUMENT status.
  static absl::StatusOr<std::unique_ptr<Transformer>> FromTensors(const ModelConfig& config,
                                                                  const TensorMap& tensors,
                                                                  const LoadOptions& options);
  // Seeded random init (normal(0, 0.02) matrices, unit norms, zero biases).
  static std::unique_ptr<Transformer> RandomInit(const ModelConfig& config, uint64_t seed,
                                                 const LoadOptions& options);

  // Writes DIR/config.json and the parameters in their own dtype: one
  // DIR/model.safetensors, or shards of at most `max_shard_bytes` plus
  // model.safetensors.index.json when they do not fit in one (see
  // WriteModelTensors). The directory is created if missing; tokenizer.json
  // is not touched.
  absl::Status Save(const std::string& dir, int64_t max_shard_bytes = kDefaultMaxShardBytes) const;

  // Every parameter under its HF name, sharing storage with the model (an
  // optimizer updating these updates the model). Tied lm_head is not listed.
  std::vector<std::pair<std::string, at::Tensor>> NamedParameters() const;
  std::vector<at::Tensor> Parameters() const;
  TensorMap StateDict() const;
  // Copies `tensors` into the parameters (converted to the model's dtype and
  // device); the same checks as FromTensors, nothing changed on error.
  absl::Status LoadStateDict(const TensorMap& tensors);
  void SetRequiresGrad(bool requires_grad);

  // Training / scoring forward (see the file comment).
  absl::StatusOr<ScoreResult> Score(const PackedBatch& batch,
                                    const ScoreOptions& options = {}) const;

  // Incremental forward over `pool` (see the file comment). No autograd.
  absl::StatusOr<StepResult> Step(const std::vector<StepInput>& batch, KvBlockPool& pool) const;

  // A pool shaped for this model holding `max_tokens` tokens, in its dtype and device.
  KvPoolOptions PoolOptions(int64_t max_tokens, int64_t block_size = 16) const;

  const ModelConfig& config() const { return config_; }
  at::ScalarType dtype() const { return options_.dtype; }
  at::Device device() const { return options_.device; }
  int64_t NumParameters() const;
  // Parameters a model of `config` has (from the shapes alone, nothing allocated).
  static int64_t ParameterCount(const ModelConfig& config);
  // Bytes of the parameters in their dtype (what the model holds on its device).
  int64_t ParameterBytes() const;
  // The LM head [vocab, hidden] (the embedding when tied), sharing storage.
  const at::Tensor& LmHead() const;

  ~Transformer();

 private:
  Transformer(ModelConfig config, LoadOptions options);

  ModelConfig config_;
  LoadOptions options_;
  std::unique_ptr<ModelWeights> weights_;
};

}  // namespace loom::model
