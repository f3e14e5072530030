// RolloutEngine::Import: checks that an exported state fits this model and
// pool, then queues it where it was.

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "rollout/engine_internal.h"

namespace loom::rollout {
namespace {

absl::Status CheckConsistent(const SampleState& s) {
  const auto t = static_cast<size_t>(s.length());
  const std::string who = absl::StrCat("sample ", s.id, ": ");
  if (s.loss_mask.size() != t || s.logprobs.size() != t || s.versions.size() != t) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, "tokens, loss_mask, logprobs and versions differ in length"));
  }
  if (s.prompt_length < 1 || s.prompt_length > s.length() || s.turn_start > s.length() ||
      s.turn_start < s.prompt_length) {
    return absl::InvalidArgumentError(absl::StrCat(who, "prompt_length or turn_start out of range"));
  }
  const int64_t generated = std::count(s.loss_mask.begin(), s.loss_mask.end(), 1);
  if (generated != s.generated) {
    return absl::InvalidArgumentError(absl::StrCat(who, "generated count disagrees with loss_mask"));
  }
  if (s.routing_width() > 0 && (s.routing.size() % s.routing_width() != 0 ||
                                s.routing_rows() > s.length())) {
    return absl::InvalidArgumentError(absl::StrCat(who, "routing rows do not match the tokens"));
  }
  if (s.kv.key.defined() && (s.kv.length < 0 || s.kv.length >= s.length())) {
    return absl::InvalidArgumentError(absl::StrCat(who, "KV length out of range"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RolloutEngine::Import(SampleState state) {
  if (samples_.count(state.id)) {
    return absl::AlreadyExistsError(absl::StrCat("sample ", state.id, " is already in the engine"));
  }
  if (auto status = CheckConsistent(state); !status.ok()) return status;
  const std::string what = absl::StrCat("sample ", state.id, ":");
  if (auto status = ValidateTokens(state.tokens, what.c_str()); !status.ok()) return status;
  const auto& config = model_.config();
  if (state.moe_layers != config.NumMoeLayers() ||
      (state.moe_layers > 0 && state.top_k != config.num_experts_per_tok)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sample ", state.id, ": routing shape [", state.moe_layers, ", ", state.top_k,
        "] does not match the model's [", config.NumMoeLayers(), ", ",
        config.num_experts_per_tok, "]"));
  }
  if (state.kv.key.defined()) {
    const auto& o = pool_->options();
    const std::vector<int64_t> want = {o.num_layers, state.kv.length, o.num_kv_heads, o.head_dim};
    if (state.kv.key.sizes() != want || !state.kv.value.defined() ||
        state.kv.value.sizes() != want || state.kv.key.scalar_type() != o.dtype ||
        state.kv.value.scalar_type() != o.dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat("sample ", state.id, ": KV snapshot does not match the pool's shape or dtype"));
    }
  }
  const bool active = state.phase != SamplePhase::kFinished && state.phase != SamplePhase::kToolWait;
  if (active && state.length() >= ContextLimit(state)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sample ", state.id, ": at the context limit of this engine"));
  }
  auto sample = std::make_unique<Sample>();
  sample->state = std::move(state);
  sample->arrival = next_arrival_++;
  Sample& raw = *sample;
  samples_.emplace(raw.state.id, std::move(sample));
  if (raw.state.phase == SamplePhase::kFinished) {
    raw.state.kv = model::KvSnapshot();
    finished_order_.push_back(raw.state.id);
  } else if (raw.state.phase != SamplePhase::kToolWait) {
    Enqueue(raw);
  }
  return absl::OkStatus();
}

}  // namespace loom::rollout
