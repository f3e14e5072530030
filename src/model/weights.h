#pragma once
// The parameters of a Transformer and their Hugging Face names. Private to
// the model module.

#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "loom/model/config.h"
#include "loom/model/transformer.h"

namespace loom::model {

// The HF-named projection matrices are leaves of their own (the optimizer and
// checkpoints see them under their HF names), but they share storage with one
// fused matrix per layer (FuseProjections): gate and up are rows of gate_up,
// q, k and v rows of qkv. An in-place update of a named parameter (AdamW,
// LoadStateDict) is therefore seen by the fused matrix without a copy, and
// inference runs one GEMM where HF runs two or three.
struct MlpWeights {
  at::Tensor gate;     // [I, H], rows [0, I) of gate_up
  at::Tensor up;       // [I, H], rows [I, 2I) of gate_up
  at::Tensor down;     // [H, I]
  at::Tensor gate_up;  // [2I, H] fused storage of gate and up
};

struct LayerWeights {
  at::Tensor input_norm;                      // [H]
  at::Tensor post_norm;                       // [H] post_attention_layernorm
  at::Tensor q, k, v, o;                      // [nh*hd, H], [kvh*hd, H], [kvh*hd, H], [H, nh*hd]
  at::Tensor q_bias, k_bias, v_bias, o_bias;  // undefined when the arch has none
  at::Tensor qkv;                             // [(nh + 2 kvh) * hd, H] fused storage of q, k, v
  at::Tensor qkv_bias;              // [(nh + 2 kvh) * hd] fused storage of the biases, or undefined
  at::Tensor q_norm, k_norm;        // [hd], qwen3 only
  MlpWeights mlp;                   // dense layers
  at::Tensor router;                // [E, H], MoE layers
  std::vector<MlpWeights> experts;  // [E], MoE layers
  int64_t moe_index = -1;           // column in routing tensors; -1 = dense
};

struct ModelWeights {
  at::Tensor embed;  // [V, H]
  std::vector<LayerWeights> layers;
  at::Tensor norm;     // [H]
  at::Tensor lm_head;  // [V, H]; the same tensor as `embed` when tied
};

enum class InitKind { kNormal, kOnes, kZeros };

// One named parameter: where it lives, its shape, how to init it.
struct ParamSlot {
  std::string name;
  at::Tensor* tensor;
  std::vector<int64_t> shape;
  InitKind init;
};

// Sizes `weights` for `config` (layers, experts) and lists every parameter
// slot in a fixed order. A tied lm_head is not a slot.
std::vector<ParamSlot> ParamSlots(const ModelConfig& config, ModelWeights& weights);

// Moves q/k/v (and their biases) and gate/up of every layer into fused
// storage and rebinds the named tensors as leaf views of it, keeping their
// requires_grad. Call once after the named tensors are set.
void FuseProjections(ModelWeights& weights);

// x: [T, H] through q, k and v -> {[T, nh*hd], [T, kvh*hd], [T, kvh*hd]}.
// Without autograd one GEMM on the fused storage; when autograd must reach the
// named leaves, three GEMMs on them (for the many rows of a training batch
// that costs the same, and spares concatenating weights and gradients).
std::vector<at::Tensor> ProjectQkv(const LayerWeights& w, const at::Tensor& x);

// x: [T, H] through gate and up -> {[T, I], [T, I]}, chosen as ProjectQkv.
std::vector<at::Tensor> ProjectGateUp(const MlpWeights& w, const at::Tensor& x);

// True for checkpoint tensors that are derived buffers, not parameters
// (old HF checkpoints store rotary inv_freq).
bool IsIgnoredTensorName(const std::string& name);

}  // namespace loom::model
