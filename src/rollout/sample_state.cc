// SampleState helpers: enum names and construction.

#include "loom/rollout/sample_state.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "loom/model/batch.h"

namespace loom::rollout {
namespace {

constexpr FinishReason kReasons[] = {FinishReason::kNone,         FinishReason::kEos,
                                     FinishReason::kStopSequence, FinishReason::kToolCall,
                                     FinishReason::kMaxNewTokens, FinishReason::kContextLimit,
                                     FinishReason::kDropped};
constexpr SamplePhase kPhases[] = {SamplePhase::kWaiting, SamplePhase::kRunning,
                                   SamplePhase::kParked, SamplePhase::kToolWait,
                                   SamplePhase::kFinished};

}  // namespace

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kStopSequence:
      return "stop_sequence";
    case FinishReason::kToolCall:
      return "tool_call";
    case FinishReason::kMaxNewTokens:
      return "max_new_tokens";
    case FinishReason::kContextLimit:
      return "context_limit";
    case FinishReason::kDropped:
      return "dropped";
  }
  return "?";
}

absl::StatusOr<FinishReason> ParseFinishReason(const std::string& name) {
  for (FinishReason reason : kReasons) {
    if (name == FinishReasonName(reason)) return reason;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown finish reason '", name, "'"));
}

const char* SamplePhaseName(SamplePhase phase) {
  switch (phase) {
    case SamplePhase::kWaiting:
      return "waiting";
    case SamplePhase::kRunning:
      return "running";
    case SamplePhase::kParked:
      return "parked";
    case SamplePhase::kToolWait:
      return "tool_wait";
    case SamplePhase::kFinished:
      return "finished";
  }
  return "?";
}

absl::StatusOr<SamplePhase> ParseSamplePhase(const std::string& name) {
  for (SamplePhase phase : kPhases) {
    if (name == SamplePhaseName(phase)) return phase;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown sample phase '", name, "'"));
}

int64_t SampleState::routing_rows() const {
  const int64_t width = routing_width();
  return width == 0 ? 0 : static_cast<int64_t>(routing.size()) / width;
}

at::Tensor SampleState::RoutingTensor() const {
  if (routing_width() == 0) return at::Tensor();
  at::Tensor out = at::zeros({length(), moe_layers, top_k}, at::kShort);
  static_assert(sizeof(int16_t) == 2, "int16");
  std::memcpy(out.data_ptr(), routing.data(), routing.size() * sizeof(int16_t));
  return out.to(model::kRoutingDtype);
}

SampleState NewSampleState(const SampleRequest& request, uint64_t run_seed, int64_t moe_layers,
                           int64_t top_k) {
  SampleState state;
  state.id = request.id;
  state.prompt_length = static_cast<int64_t>(request.prompt.size());
  state.tokens = request.prompt;
  state.loss_mask.assign(request.prompt.size(), 0);
  state.logprobs.assign(request.prompt.size(), 0.0f);
  state.versions.assign(request.prompt.size(), -1);
  state.moe_layers = moe_layers;
  state.top_k = top_k;
  state.turn_start = state.prompt_length;
  state.sampling = request.sampling;
  state.stop = request.stop;
  state.rng = SampleRng(run_seed, request.id);
  return state;
}

}  // namespace loom::rollout
