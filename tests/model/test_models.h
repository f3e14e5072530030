#pragma once
// Small models for the model tests: every architecture, with random norms and
// biases and weights large enough that every detail of the math shows in the
// log-probs.

#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "loom/model/transformer.h"

namespace loom::model::testing {

inline const std::vector<std::string>& AllArchs() {
  static const std::vector<std::string> archs = {"llama", "qwen2", "qwen3", "qwen3_moe"};
  return archs;
}

// A config with GQA (2 query heads per KV head), odd-sized vocab, and for the
// MoE arch a dense layer among the sparse ones.
inline ModelConfig TestConfig(const std::string& arch) {
  ModelConfig c = *DefaultModelConfig(arch);
  c.vocab_size = 97;
  c.hidden_size = 48;
  c.intermediate_size = 80;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.rope_theta = 500.0;
  c.rms_norm_eps = 1e-5;
  if (arch == "llama") c.attention_bias = true;
  if (arch == "qwen3_moe") {
    c.num_experts = 6;
    c.num_experts_per_tok = 2;
    c.moe_intermediate_size = 24;
    c.norm_topk_prob = true;
    c.mlp_only_layers = {1};
  }
  return c;
}

// Random weights at scale 0.15 and norms/biases away from 1/0.
inline std::unique_ptr<Transformer> TestModel(const ModelConfig& config, uint64_t seed,
                                              LoadOptions options = {}) {
  auto model = Transformer::RandomInit(config, seed, options);
  at::NoGradGuard no_grad;
  at::manual_seed(seed);
  for (auto& [name, p] : model->NamedParameters()) {
    if (p.dim() == 1) {
      bool is_norm = name.find("norm") != std::string::npos;
      p.copy_(at::randn(p.sizes()) * 0.2 + (is_norm ? 1.0 : 0.0));
    } else {
      p.copy_(at::randn(p.sizes()) * 0.15);
    }
  }
  return model;
}

}  // namespace loom::model::testing
