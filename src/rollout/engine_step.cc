// RolloutEngine::Step: plan the batch under the token budget, make room in
// the KV pool, run the model once, then record and sample.

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "loom/config/check.h"
#include "rollout/engine_internal.h"
#include "rollout/stop_rules.h"

namespace loom::rollout {

absl::StatusOr<StepStats> RolloutEngine::Step() {
  StepStats stats;
  if (interrupt_requested_.load()) ParkAll();
  if (parked_) {
    stats.parked = true;
    return stats;
  }
  const int64_t hits_before = counters_.prefix_hit_tokens;
  Admit();
  stats.prefix_hit_tokens = counters_.prefix_hit_tokens - hits_before;
  std::vector<Plan> plan = PlanBatch();
  stats.preempted = ReserveOrPreempt(plan);
  // Decoding samples and prompt chunks go to the model separately: its batch
  // is padded to the longest input, so one 1k-token chunk would otherwise make
  // every decoding sample cost 1k query rows.
  std::vector<Plan> decode, prefill;
  for (const Plan& p : plan) (p.count == 1 ? decode : prefill).push_back(p);
  for (const std::vector<Plan>* group : {&decode, &prefill}) {
    if (group->empty()) continue;
    if (auto status = RunModel(*group, stats); !status.ok()) return status;
  }
  if (!plan.empty()) {
    ++counters_.steps;
    std::lock_guard<std::mutex> lock(interrupt_mu_);
    steps_done_.fetch_add(1);
  }
  counters_.prefill_tokens += stats.prefill_tokens;
  counters_.decode_tokens += stats.decode_tokens;
  if (interrupt_requested_.load()) ParkAll();
  stats.parked = parked_;
  return stats;
}

absl::Status RolloutEngine::RunModel(const std::vector<Plan>& plan, StepStats& stats) {
  std::vector<model::StepInput> inputs;
  inputs.reserve(plan.size());
  for (const Plan& p : plan) {
    const auto& tokens = p.sample->state.tokens;
    const int64_t begin = p.sample->kv.length;
    inputs.push_back({&p.sample->kv, std::vector<int64_t>(tokens.begin() + begin,
                                                          tokens.begin() + begin + p.count)});
  }
  absl::StatusOr<model::StepResult> result;
  try {
    result = model_.Step(inputs, *pool_);
  } catch (const c10::Error& e) {
    result = absl::InternalError(absl::StrCat("model step: ", e.what_without_backtrace()));
  }
  if (!result.ok()) return result.status();
  ApplyResults(plan, *result, stats);
  return absl::OkStatus();
}

std::vector<RolloutEngine::Plan> RolloutEngine::PlanBatch() {
  std::vector<Plan> plan;
  int64_t budget = options_.step_token_budget;
  // Decoding samples first (one token each), so prompts never stall decoding.
  for (Sample* s : running_) {
    LOOM_CHECK(s->Pending() >= 1, "running sample " << s->state.id << " has nothing to feed");
    if (s->Pending() == 1 && budget > 0) {
      plan.push_back({s, 1});
      --budget;
    }
  }
  for (Sample* s : running_) {
    if (s->Pending() > 1 && budget > 0) {
      const int64_t chunk = std::min(s->Pending(), budget);
      plan.push_back({s, chunk});
      budget -= chunk;
    }
  }
  std::sort(plan.begin(), plan.end(),
            [](const Plan& a, const Plan& b) { return a.sample->arrival < b.sample->arrival; });
  return plan;
}

int64_t RolloutEngine::ReserveOrPreempt(std::vector<Plan>& plan) {
  int64_t preempted = 0;
  for (size_t i = 0; i < plan.size();) {
    Sample& s = *plan[i].sample;
    if (pool_->Reserve(s.kv, s.kv.length + plan[i].count).ok()) {
      ++i;
      continue;
    }
    // The youngest running sample gives way; plan is in arrival order, so a
    // victim other than `s` sits after i.
    Sample* victim = running_.back();
    Preempt(*victim);
    ++preempted;
    auto it = std::find_if(plan.begin() + i, plan.end(),
                           [&](const Plan& p) { return p.sample == victim; });
    if (it != plan.end()) plan.erase(it);
  }
  counters_.preemptions += preempted;
  return preempted;
}

void RolloutEngine::ApplyResults(const std::vector<Plan>& plan, const model::StepResult& result,
                                 StepStats& stats) {
  const at::Tensor logits = result.logits.to(at::kCPU, at::kFloat).contiguous();  // [B, vocab]
  const at::Tensor routing = result.routing.defined()
                                 ? result.routing.to(at::kCPU, at::kShort).contiguous()
                                 : at::Tensor();  // [sum new, moe, k]
  const int64_t vocab = logits.size(1);
  stats.batch += static_cast<int64_t>(plan.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    Sample& s = *plan[i].sample;
    const int64_t count = plan[i].count;
    if (routing.defined()) {
      RecordRouting(s, s.kv.length - count, count, routing, result.routing_offsets[i]);
    }
    (count == 1 ? stats.decode_tokens : stats.prefill_tokens) += count;
    if (options_.prefix_cache) {
      pool_->Publish(s.kv, s.state.tokens, &s.state.routing, s.state.routing_width());
    }
    if (s.kv.length < s.state.length()) continue;  // mid-prompt chunk: no token yet
    SampleState& state = s.state;
    const SampledToken next =
        SampleToken(logits.data_ptr<float>() + i * vocab, vocab, state.sampling, state.rng);
    if (state.segments.empty() || state.segments.back().version != version_) {
      state.segments.push_back({state.length(), version_});
    }
    state.tokens.push_back(next.token);
    state.loss_mask.push_back(1);
    state.logprobs.push_back(next.logprob);
    state.versions.push_back(version_);
    ++state.generated;
    AfterToken(s, stats);
  }
}

void RolloutEngine::RecordRouting(Sample& sample, int64_t begin, int64_t count,
                                  const at::Tensor& routing, int64_t first_row) {
  SampleState& state = sample.state;
  const int64_t width = state.routing_width();
  LOOM_CHECK(width == routing.size(1) * routing.size(2), "routing width mismatch");
  const int64_t have = state.routing_rows();
  LOOM_CHECK(have >= begin, "routing rows missing before token " << begin);
  const int64_t skip = std::min(count, have - begin);  // rows already recorded are kept
  const int16_t* src = routing.data_ptr<int16_t>() + (first_row + skip) * width;
  state.routing.insert(state.routing.end(), src, src + (count - skip) * width);
}

void RolloutEngine::AfterToken(Sample& sample, StepStats& stats) {
  const FinishReason reason = CheckStop(sample.state, ContextLimit(sample.state));
  if (reason == FinishReason::kNone) return;
  if (reason == FinishReason::kToolCall) {
    running_.erase(std::find(running_.begin(), running_.end(), &sample));
    sample.state.phase = SamplePhase::kToolWait;
    sample.state.finish = reason;
    stats.tool_wait.push_back(sample.state.id);
    return;
  }
  Finish(sample, reason, stats);
}

void RolloutEngine::Finish(Sample& sample, FinishReason reason, StepStats& stats) {
  RemoveFromQueues(sample);
  pool_->Free(sample.kv);  // sample-grained GC: the blocks are reusable right away
  sample.state.kv = model::KvSnapshot();
  sample.state.phase = SamplePhase::kFinished;
  sample.state.finish = reason;
  finished_order_.push_back(sample.state.id);
  stats.finished.push_back(sample.state.id);
}

}  // namespace loom::rollout
