// RolloutEngine: construction, adding and removing samples, queries.
// Stepping is in engine_step.cc, KV memory (admission, preemption, offload,
// park/resume) in engine_memory.cc.

#include "loom/rollout/engine.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "loom/config/check.h"
#include "loom/config/rollout_section.h"
#include "rollout/engine_internal.h"

namespace loom::rollout {
namespace {

absl::Status ValidateRequestParams(const SampleRequest& request) {
  const SamplingParams& s = request.sampling;
  const StopParams& stop = request.stop;
  const std::string who = absl::StrCat("sample ", request.id, ": ");
  if (!std::isfinite(s.temperature) || s.temperature < 0) {
    return absl::InvalidArgumentError(absl::StrCat(who, "temperature must be >= 0"));
  }
  if (!(s.top_p > 0.0 && s.top_p <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(who, "top_p must be in (0, 1]"));
  }
  if (s.top_k < 0) return absl::InvalidArgumentError(absl::StrCat(who, "top_k must be >= 0"));
  if (stop.max_new_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat(who, "max_new_tokens must be >= 1"));
  }
  if (stop.max_context < 0) {
    return absl::InvalidArgumentError(absl::StrCat(who, "max_context must be >= 0"));
  }
  for (const auto* list : {&stop.stop_sequences, &stop.tool_call_end}) {
    for (const auto& sequence : *list) {
      if (sequence.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(who, "empty stop sequence"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

EngineOptions EngineOptionsFromConfig(const config::RolloutSection& section, uint64_t seed) {
  EngineOptions options;
  options.max_batch = section.max_batch;
  options.step_token_budget = section.step_token_budget;
  options.block_size = section.block_size;
  options.pool_tokens = section.pool_tokens;
  options.seed = seed;
  options.on_weight_update = section.on_weight_update == "recompute"
                                 ? WeightUpdatePolicy::kRecompute
                                 : WeightUpdatePolicy::kKeep;
  options.preemption =
      section.preemption == "swap" ? PreemptionPolicy::kSwap : PreemptionPolicy::kRecompute;
  options.prefix_cache = section.prefix_cache.enabled;
  options.prefix_max_version_lag = section.prefix_cache.max_version_lag;
  options.prefix_keep_released = section.prefix_cache.keep_released;
  return options;
}

absl::StatusOr<std::unique_ptr<RolloutEngine>> RolloutEngine::Create(
    const model::Transformer& model, const EngineOptions& options) {
  if (options.max_batch < 1 || options.step_token_budget < 1 || options.block_size < 1 ||
      options.pool_tokens < options.block_size || options.prefix_max_version_lag < 0) {
    return absl::InvalidArgumentError(
        "rollout engine: max_batch, step_token_budget and block_size must be >= 1, "
        "pool_tokens >= block_size and prefix_max_version_lag >= 0");
  }
  try {
    return std::unique_ptr<RolloutEngine>(new RolloutEngine(model, options));
  } catch (const c10::Error& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("rollout engine: cannot allocate the KV pool: ", e.what_without_backtrace()));
  }
}

RolloutEngine::RolloutEngine(const model::Transformer& model, const EngineOptions& options)
    : model_(model), options_(options), version_(options.initial_version) {
  pool_ = std::make_unique<model::KvBlockPool>(
      model.PoolOptions(options.pool_tokens, options.block_size));
  pool_->set_keep_released(options.prefix_keep_released);
}

RolloutEngine::~RolloutEngine() = default;

int64_t RolloutEngine::ContextLimit(const SampleState& state) const {
  int64_t limit =
      std::min(model_.config().max_position_embeddings, pool_->num_blocks() * pool_->block_size());
  if (state.stop.max_context > 0) limit = std::min(limit, state.stop.max_context);
  return limit;
}

absl::Status RolloutEngine::ValidateTokens(const std::vector<int64_t>& tokens,
                                           const char* what) const {
  const int64_t vocab = model_.config().vocab_size;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat(what, " token ", i, " is ", tokens[i],
                                                     ", outside the vocabulary [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status RolloutEngine::Add(const SampleRequest& request) {
  if (samples_.count(request.id)) {
    return absl::AlreadyExistsError(
        absl::StrCat("sample ", request.id, " is already in the engine"));
  }
  if (request.prompt.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("sample ", request.id, ": empty prompt"));
  }
  if (auto status = ValidateRequestParams(request); !status.ok()) return status;
  const std::string what = absl::StrCat("sample ", request.id, ": prompt");
  if (auto status = ValidateTokens(request.prompt, what.c_str()); !status.ok()) return status;
  auto sample = std::make_unique<Sample>();
  sample->state = NewSampleState(request, options_.seed, model_.config().NumMoeLayers(),
                                 model_.config().num_experts_per_tok);
  if (sample->state.length() >= ContextLimit(sample->state)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sample ", request.id, ": prompt of ", sample->state.length(),
        " tokens leaves no room under the context limit of ", ContextLimit(sample->state)));
  }
  sample->arrival = next_arrival_++;
  Sample* raw = sample.get();
  samples_.emplace(request.id, std::move(sample));
  Enqueue(*raw);
  return absl::OkStatus();
}

std::vector<SampleState> RolloutEngine::TakeFinished() {
  std::vector<SampleState> out;
  out.reserve(finished_order_.size());
  for (uint64_t id : finished_order_) {
    auto it = samples_.find(id);
    LOOM_CHECK(it != samples_.end(), "finished sample " << id << " missing");
    out.push_back(std::move(it->second->state));
    samples_.erase(it);
  }
  finished_order_.clear();
  return out;
}

absl::Status RolloutEngine::Append(uint64_t id, const std::vector<int64_t>& tokens) {
  auto it = samples_.find(id);
  if (it == samples_.end()) return absl::NotFoundError(absl::StrCat("no sample ", id));
  Sample& sample = *it->second;
  if (sample.state.phase != SamplePhase::kToolWait) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sample ", id, " is ", SamplePhaseName(sample.state.phase), ", not waiting for a tool"));
  }
  if (tokens.empty()) return absl::InvalidArgumentError("Append: no tokens");
  const std::string what = absl::StrCat("sample ", id, ": appended");
  if (auto status = ValidateTokens(tokens, what.c_str()); !status.ok()) return status;
  SampleState& state = sample.state;
  const int64_t new_length = state.length() + static_cast<int64_t>(tokens.size());
  if (new_length >= ContextLimit(state)) {
    return absl::OutOfRangeError(absl::StrCat("sample ", id, ": appending ", tokens.size(),
                                              " tokens reaches the context limit of ",
                                              ContextLimit(state)));
  }
  for (int64_t token : tokens) {
    state.tokens.push_back(token);
    state.loss_mask.push_back(0);
    state.logprobs.push_back(0.0f);
    state.versions.push_back(-1);
  }
  state.turn_start = state.length();
  state.finish = FinishReason::kNone;
  Enqueue(sample);
  return absl::OkStatus();
}

absl::StatusOr<SampleState> RolloutEngine::Drop(uint64_t id) {
  auto it = samples_.find(id);
  if (it == samples_.end()) return absl::NotFoundError(absl::StrCat("no sample ", id));
  Sample& sample = *it->second;
  RemoveFromQueues(sample);
  pool_->Free(sample.kv);
  sample.state.kv = model::KvSnapshot();
  if (sample.state.phase != SamplePhase::kFinished) sample.state.finish = FinishReason::kDropped;
  sample.state.phase = SamplePhase::kFinished;
  SampleState state = std::move(sample.state);
  samples_.erase(it);
  return state;
}

const SampleState* RolloutEngine::Find(uint64_t id) const {
  auto it = samples_.find(id);
  return it == samples_.end() ? nullptr : &it->second->state;
}

int64_t RolloutEngine::CachedTokens(uint64_t id) const {
  auto it = samples_.find(id);
  return it == samples_.end() ? -1 : it->second->kv.length;
}

std::vector<int32_t> RolloutEngine::BlockTable(uint64_t id) const {
  auto it = samples_.find(id);
  return it == samples_.end() ? std::vector<int32_t>() : it->second->kv.blocks;
}

int64_t RolloutEngine::CachedTokensTotal() const {
  int64_t total = 0;
  for (const auto& [id, sample] : samples_) total += sample->kv.length;
  return total;
}

void RolloutEngine::Enqueue(Sample& sample) {
  sample.state.phase = SamplePhase::kWaiting;
  auto pos = std::find_if(waiting_.begin(), waiting_.end(),
                          [&](const Sample* s) { return s->arrival > sample.arrival; });
  waiting_.insert(pos, &sample);
}

void RolloutEngine::RemoveFromQueues(Sample& sample) {
  running_.erase(std::remove(running_.begin(), running_.end(), &sample), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), &sample), waiting_.end());
  finished_order_.erase(
      std::remove(finished_order_.begin(), finished_order_.end(), sample.state.id),
      finished_order_.end());
}

}  // namespace loom::rollout
