#pragma once
// Small pieces the async stages' trainers (grpo_step.cc, opd_step.cc) share:
// micro-batching a step's samples and the metrics lines' helpers. Private to
// the train module.

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/rollout/sample_state.h"
#include "loom/train/async_loop.h"
#include "loom/train/batching.h"
#include "loom/train/sample_table.h"

namespace loom::train {

// Samples scored together: one temperature (each sample is scored at the one
// it was drawn with), at most max_tokens tokens unless a sample alone is longer.
struct MicroBatch {
  double temperature = 1.0;
  std::vector<size_t> samples;  // indices into the step's samples
};

inline std::vector<MicroBatch> MicroBatches(const std::vector<TrainingSample>& samples,
                                            const std::vector<size_t>& chosen, int64_t max_tokens) {
  std::map<double, std::vector<size_t>> by_temperature;
  for (size_t i : chosen) {
    by_temperature[samples[i].state.sampling.LogprobTemperature()].push_back(i);
  }
  std::vector<MicroBatch> out;
  for (const auto& [temperature, indices] : by_temperature) {
    std::vector<int64_t> lengths;
    for (size_t i : indices) lengths.push_back(samples[i].state.length());
    for (const auto& group : SplitByTokens(lengths, max_tokens)) {
      MicroBatch micro{temperature, {}};
      for (size_t k : group) micro.samples.push_back(indices[k]);
      out.push_back(std::move(micro));
    }
  }
  return out;
}

// A micro-batch's samples packed for teacher forcing: the batch (with the
// samples' MoE routing to replay) and, in its shifted [T] layout, the
// weight of each target, the recorded behaviour log-probs and versions.
struct PackedSamples {
  ShiftedBatch shifted;
  at::Tensor behaviour;          // [T] float32
  at::Tensor versions;           // [T] int64
  std::vector<int64_t> lengths;  // per sample
  at::Tensor index;              // [n] int64: each sample's index in the step
};

inline PackedSamples PackSamples(const std::vector<TrainingSample>& samples,
                                 const std::vector<size_t>& indices) {
  std::vector<const std::vector<int64_t>*> tokens, versions;
  std::vector<const std::vector<uint8_t>*> masks;
  std::vector<const std::vector<float>*> behaviour;
  std::vector<at::Tensor> routing;
  std::vector<int64_t> index;
  PackedSamples packed;
  for (size_t i : indices) {
    const auto& state = samples[i].state;
    tokens.push_back(&state.tokens);
    versions.push_back(&state.versions);
    masks.push_back(&state.loss_mask);
    behaviour.push_back(&state.logprobs);
    if (state.moe_layers > 0) routing.push_back(state.RoutingTensor());
    packed.lengths.push_back(state.length());
    index.push_back(static_cast<int64_t>(i));
  }
  packed.shifted = TeacherForcing(tokens, masks);
  if (!routing.empty()) packed.shifted.batch.replay_routing = at::cat(routing, 0);
  packed.behaviour = ShiftedValues(behaviour);
  packed.versions = ShiftedValues(versions);
  packed.index = at::tensor(index, at::kLong);
  return packed;
}

// The metrics every async trainer's line carries about the loop: dispatch
// concurrency and failures, rollout and training throughput and time.
inline nlohmann::json LoopMetrics(const Batch& batch, int64_t trained_tokens,
                                  double train_seconds) {
  const RolloutTotals& rollout = batch.rollout;
  const double rollout_tokens = static_cast<double>(rollout.decode_tokens + rollout.prefill_tokens);
  return {
      {"samples_failed", batch.dispatch.samples_failed},
      {"inflight_mean", batch.dispatch.inflight_mean},
      {"inflight_min", batch.dispatch.inflight_min},
      {"inflight_max", batch.dispatch.inflight_max},
      {"rollout_tokens_per_s", rollout.seconds > 0 ? rollout_tokens / rollout.seconds : 0.0},
      {"train_tokens_per_s", static_cast<double>(trained_tokens) / std::max(train_seconds, 1e-9)},
      {"time_rollout_s", rollout.seconds},
      {"time_train_s", train_seconds}};
}

// Tokens of `state` a loss at policy version `version` weighs: model tokens
// (loss mask 1) not older than `mask_lag` versions (-1: none is stale) —
// the count behind the token-level mean.
inline int64_t FreshLossTokens(const rollout::SampleState& state, int64_t version,
                               int64_t mask_lag) {
  int64_t count = 0;
  for (int64_t t = 1; t < state.length(); ++t) {
    const bool fresh = mask_lag < 0 || version - state.versions[t] <= mask_lag;
    count += (state.loss_mask[t] && fresh) ? 1 : 0;
  }
  return count;
}

// Running (weighted) mean keyed by name, for "by dataset" / "by effort" metrics.
class MeanBy {
 public:
  void Add(const std::string& key, double value, double weight = 1) {
    auto& [sum, total] = sums_[key];
    sum += value * weight;
    total += weight;
  }
  nlohmann::json Json() const {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [key, sum_total] : sums_) {
      if (sum_total.second > 0) out[key] = sum_total.first / sum_total.second;
    }
    return out;
  }

 private:
  std::map<std::string, std::pair<double, double>> sums_;
};

// The policy version of the oldest generated token (`version` when none is older).
inline int64_t OldestVersion(const rollout::SampleState& state, int64_t version) {
  int64_t oldest = version;
  for (int64_t t = state.prompt_length; t < state.length(); ++t) {
    if (state.loss_mask[t]) oldest = std::min(oldest, state.versions[t]);
  }
  return oldest;
}

inline double Mean(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

}  // namespace loom::train
