#pragma once
// The parameters of a Transformer and their Hugging Face names. Private to
// the model module.

#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "loom/model/config.h"
#include "loom/model/transformer.h"

namespace loom::model {

struct MlpWeights {
  at::Tensor gate;  // [I, H]
  at::Tensor up;    // [I, H]
  at::Tensor down;  // [H, I]
};

struct LayerWeights {
  at::Tensor input_norm;  // [H]
  at::Tensor post_norm;   // [H] post_attention_layernorm
  at::Tensor q, k, v, o;  // [nh*hd, H], [kvh*hd, H], [kvh*hd, H], [H, nh*hd]
  at::Tensor q_bias, k_bias, v_bias, o_bias;  // undefined when the arch has none
  at::Tensor q_norm, k_norm;                  // [hd], qwen3 only
  MlpWeights mlp;                             // dense layers
  at::Tensor router;                          // [E, H], MoE layers
  std::vector<MlpWeights> experts;            // [E], MoE layers
  int64_t moe_index = -1;                     // column in routing tensors; -1 = dense
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

// True for checkpoint tensors that are derived buffers, not parameters
// (old HF checkpoints store rotary inv_freq).
bool IsIgnoredTensorName(const std::string& name);

}  // namespace loom::model
