#include "train/micro_batch.h"

#include <map>

namespace loom::train {

std::vector<MicroBatch> MicroBatches(const std::vector<TrainingSample>& samples,
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

PackedSamples PackSamples(const std::vector<TrainingSample>& samples,
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

}  // namespace loom::train
