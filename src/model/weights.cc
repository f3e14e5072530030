// Hugging Face parameter names and shapes, and the fused projection storage.

#include "weights.h"

#include <ATen/core/grad_mode.h>

#include "ops.h"

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

namespace {

// Concatenates `parts` into new storage and rebinds each to a leaf view of it.
at::Tensor Fuse(std::vector<at::Tensor*> parts) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> values;
  for (at::Tensor* part : parts) values.push_back(*part);
  at::Tensor fused = at::cat(values);
  int64_t row = 0;
  for (at::Tensor* part : parts) {
    const bool requires_grad = part->requires_grad();
    const int64_t rows = part->size(0);
    // detach(): a leaf that shares storage with `fused`, not an autograd view of it.
    *part = fused.narrow(0, row, rows).detach().set_requires_grad(requires_grad);
    row += rows;
  }
  return fused;
}

void FuseMlp(MlpWeights& mlp) { mlp.gate_up = Fuse({&mlp.gate, &mlp.up}); }

// True when a forward must build graph edges to `leaf`.
bool NeedsGrad(const at::Tensor& leaf) {
  return at::GradMode::is_enabled() && leaf.requires_grad();
}

}  // namespace

void FuseProjections(ModelWeights& weights) {
  for (LayerWeights& layer : weights.layers) {
    layer.qkv = Fuse({&layer.q, &layer.k, &layer.v});
    if (layer.q_bias.defined())
      layer.qkv_bias = Fuse({&layer.q_bias, &layer.k_bias, &layer.v_bias});
    if (layer.mlp.gate.defined()) FuseMlp(layer.mlp);
    for (MlpWeights& expert : layer.experts) FuseMlp(expert);
  }
}

std::vector<at::Tensor> ProjectQkv(const LayerWeights& w, const at::Tensor& x) {
  if (NeedsGrad(w.q) || NeedsGrad(w.k) || NeedsGrad(w.v)) {
    return {at::linear(x, w.q, w.q_bias), at::linear(x, w.k, w.k_bias),
            at::linear(x, w.v, w.v_bias)};
  }
  return Linear(x, w.qkv, w.qkv_bias).split_with_sizes({w.q.size(0), w.k.size(0), w.v.size(0)}, 1);
}

std::vector<at::Tensor> ProjectGateUp(const MlpWeights& w, const at::Tensor& x) {
  if (NeedsGrad(w.gate) || NeedsGrad(w.up)) return {at::linear(x, w.gate), at::linear(x, w.up)};
  return Linear(x, w.gate_up).chunk(2, -1);
}

bool IsIgnoredTensorName(const std::string& name) {
  return absl::EndsWith(name, ".rotary_emb.inv_freq");
}

}  // namespace loom::model
