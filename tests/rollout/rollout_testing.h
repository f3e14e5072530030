#pragma once
// Helpers for the rollout tests: small real models (dense and MoE), engines
// over them, and requests.

#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "loom/model/transformer.h"
#include "loom/rollout/engine.h"

namespace loom::rollout::testing {

// A small model whose logits are peaked enough for sampling to matter.
inline std::unique_ptr<model::Transformer> SmallModel(const std::string& arch = "llama",
                                                      uint64_t seed = 1) {
  model::ModelConfig c = *model::DefaultModelConfig(arch);
  c.vocab_size = 61;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 512;
  if (arch == "qwen3_moe") {
    c.num_experts = 4;
    c.num_experts_per_tok = 2;
    c.moe_intermediate_size = 16;
  }
  auto m = model::Transformer::RandomInit(c, seed, {});
  at::NoGradGuard no_grad;
  at::manual_seed(seed);
  for (at::Tensor p : m->Parameters()) {
    if (p.dim() > 1) p.copy_(at::randn(p.sizes()) * 0.3);
  }
  return m;
}

// Changes every matrix of `m` in place, as an optimizer step would.
inline void PerturbWeights(model::Transformer& m, uint64_t seed) {
  at::NoGradGuard no_grad;
  at::manual_seed(seed);
  for (at::Tensor p : m.Parameters()) {
    if (p.dim() > 1) p.add_(at::randn(p.sizes()) * 0.1);
  }
}

inline std::unique_ptr<RolloutEngine> MakeEngine(const model::Transformer& m,
                                                 EngineOptions options = {}) {
  if (options.pool_tokens == EngineOptions{}.pool_tokens) options.pool_tokens = 4096;
  auto engine = RolloutEngine::Create(m, options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return std::move(*engine);
}

inline SampleRequest Request(uint64_t id, std::vector<int64_t> prompt, int64_t max_new = 8,
                             double temperature = 1.0) {
  SampleRequest r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.stop.max_new_tokens = max_new;
  r.sampling.temperature = temperature;
  return r;
}

// A deterministic prompt of `length` tokens for sample `id`.
inline std::vector<int64_t> Prompt(uint64_t id, int64_t length, int64_t vocab = 61) {
  std::vector<int64_t> p;
  for (int64_t i = 0; i < length; ++i) p.push_back(static_cast<int64_t>((id * 7 + i * 13 + 3) % vocab));
  return p;
}

// Steps until nothing is left to run (or `max_steps`); returns finished samples.
inline std::vector<SampleState> RunToEnd(RolloutEngine& engine, int64_t max_steps = 100000) {
  std::vector<SampleState> done;
  for (int64_t i = 0; i < max_steps && (engine.num_running() > 0 || engine.num_waiting() > 0);
       ++i) {
    auto stats = engine.Step();
    EXPECT_TRUE(stats.ok()) << stats.status();
    if (!stats.ok()) break;
    for (auto& s : engine.TakeFinished()) done.push_back(std::move(s));
  }
  for (auto& s : engine.TakeFinished()) done.push_back(std::move(s));
  return done;
}

inline const SampleState* ById(const std::vector<SampleState>& states, uint64_t id) {
  for (const auto& s : states) {
    if (s.id == id) return &s;
  }
  return nullptr;
}

// Teacher-forced log-probs of `tokens` under `m` (the trainer's recomputation):
// out[t] = log p(tokens[t] | tokens[..t]) for t >= 1.
inline std::vector<float> ScoreLogprobs(const model::Transformer& m,
                                        const std::vector<int64_t>& tokens) {
  auto result = m.Score(model::TeacherForcingBatch({tokens}));
  EXPECT_TRUE(result.ok()) << result.status();
  std::vector<float> out(tokens.size(), 0.0f);
  at::Tensor lp = result->logprobs.to(at::kFloat).contiguous();
  for (size_t t = 1; t < tokens.size(); ++t) out[t] = lp[t - 1].item<float>();
  return out;
}

}  // namespace loom::rollout::testing
