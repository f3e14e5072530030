// Hugging Face parameter names and shapes.

#include "weights.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace loom::model {
namespace {

void AddMlp(std::vector<ParamSlot>& slots, const std::string& prefix, MlpWeights& mlp,
            int64_t hidden, int64_t inter) {
  slots.push_back({prefix + "gate_proj.weight", &mlp.gate, {inter, hidden}, InitKind::kNormal});
  slots.push_back({prefix + "up_proj.weight", &mlp.up, {inter, hidden}, InitKind::kNormal});
  slots.push_back({prefix + "down_proj.weight", &mlp.down, {hidden, inter}, InitKind::kNormal});
}

void AddAttention(std::vector<ParamSlot>& slots, const std::string& p, const ModelConfig& c,
                  LayerWeights& w) {
  const int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim;
  const int64_t kv = c.num_key_value_heads * c.head_dim;
  slots.push_back({p + "q_proj.weight", &w.q, {q, h}, InitKind::kNormal});
  slots.push_back({p + "k_proj.weight", &w.k, {kv, h}, InitKind::kNormal});
  slots.push_back({p + "v_proj.weight", &w.v, {kv, h}, InitKind::kNormal});
  slots.push_back({p + "o_proj.weight", &w.o, {h, q}, InitKind::kNormal});
  if (c.HasQkvBias()) {
    slots.push_back({p + "q_proj.bias", &w.q_bias, {q}, InitKind::kZeros});
    slots.push_back({p + "k_proj.bias", &w.k_bias, {kv}, InitKind::kZeros});
    slots.push_back({p + "v_proj.bias", &w.v_bias, {kv}, InitKind::kZeros});
  }
  if (c.HasOBias()) slots.push_back({p + "o_proj.bias", &w.o_bias, {h}, InitKind::kZeros});
  if (c.HasQkNorm()) {
    slots.push_back({p + "q_norm.weight", &w.q_norm, {c.head_dim}, InitKind::kOnes});
    slots.push_back({p + "k_norm.weight", &w.k_norm, {c.head_dim}, InitKind::kOnes});
  }
}

}  // namespace

std::vector<ParamSlot> ParamSlots(const ModelConfig& c, ModelWeights& w) {
  std::vector<ParamSlot> slots;
  const int64_t h = c.hidden_size;
  slots.push_back({"model.embed_tokens.weight", &w.embed, {c.vocab_size, h}, InitKind::kNormal});
  w.layers.resize(c.num_hidden_layers);
  int64_t moe_index = 0;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    LayerWeights& layer = w.layers[i];
    std::string p = absl::StrCat("model.layers.", i, ".");
    slots.push_back({p + "input_layernorm.weight", &layer.input_norm, {h}, InitKind::kOnes});
    AddAttention(slots, p + "self_attn.", c, layer);
    slots.push_back(
        {p + "post_attention_layernorm.weight", &layer.post_norm, {h}, InitKind::kOnes});
    if (c.IsMoeLayer(i)) {
      layer.moe_index = moe_index++;
      slots.push_back(
          {p + "mlp.gate.weight", &layer.router, {c.num_experts, h}, InitKind::kNormal});
      layer.experts.resize(c.num_experts);
      for (int64_t e = 0; e < c.num_experts; ++e) {
        AddMlp(slots, absl::StrCat(p, "mlp.experts.", e, "."), layer.experts[e], h,
               c.moe_intermediate_size);
      }
    } else {
      AddMlp(slots, p + "mlp.", layer.mlp, h, c.intermediate_size);
    }
  }
  slots.push_back({"model.norm.weight", &w.norm, {h}, InitKind::kOnes});
  if (!c.tie_word_embeddings) {
    slots.push_back({"lm_head.weight", &w.lm_head, {c.vocab_size, h}, InitKind::kNormal});
  }
  return slots;
}

bool IsIgnoredTensorName(const std::string& name) {
  return absl::EndsWith(name, ".rotary_emb.inv_freq");
}

}  // namespace loom::model
