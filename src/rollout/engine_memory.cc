// RolloutEngine: admission, preemption and offload of KV memory, and the
// parked state (interrupt, resume).

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "loom/config/check.h"
#include "rollout/engine_internal.h"

namespace loom::rollout {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void RolloutEngine::Admit() {
  while (!waiting_.empty() && num_running() < options_.max_batch) {
    Sample& sample = *waiting_.front();
    if (!TryAdmit(sample)) return;  // first come, first served: the queue waits
    waiting_.pop_front();
    sample.state.phase = SamplePhase::kRunning;
    auto pos = std::find_if(running_.begin(), running_.end(),
                            [&](const Sample* s) { return s->arrival > sample.arrival; });
    running_.insert(pos, &sample);
  }
}

bool RolloutEngine::TryAdmit(Sample& sample) {
  const int64_t held = static_cast<int64_t>(sample.kv.blocks.size());
  const int64_t needed = pool_->BlocksFor(sample.state.length()) - held;
  if (needed > pool_->free_blocks() && !(running_.empty() && MakeRoomForWaiting(needed))) {
    return false;
  }
  if (sample.HasHostKv()) {
    const absl::Status status = pool_->Import(sample.state.kv, sample.kv);
    LOOM_CHECK(status.ok(), "KV swap-in of sample " << sample.state.id << ": " << status);
    sample.state.kv = model::KvSnapshot();
  }
  // Reserve the whole sequence now so later admissions see the true free count.
  const absl::Status status = pool_->Reserve(sample.kv, sample.state.length());
  LOOM_CHECK(status.ok(), "KV reserve at admission of sample " << sample.state.id);
  return true;
}

bool RolloutEngine::MakeRoomForWaiting(int64_t blocks_needed) {
  // Nothing runs, so only samples waiting for tool results can hold blocks.
  for (auto& [id, sample] : samples_) {
    if (pool_->free_blocks() >= blocks_needed) break;
    if (sample->state.phase == SamplePhase::kToolWait && sample->HasDeviceKv()) {
      EvictKv(*sample, options_.preemption);
      ++counters_.preemptions;
    }
  }
  // The context limit is at most the pool size, so an empty pool always fits.
  LOOM_CHECK(pool_->free_blocks() >= blocks_needed,
             "KV pool cannot hold a waiting sample even when empty");
  return true;
}

void RolloutEngine::Preempt(Sample& sample) {
  EvictKv(sample, options_.preemption);
  running_.erase(std::find(running_.begin(), running_.end(), &sample));
  Enqueue(sample);
}

void RolloutEngine::EvictKv(Sample& sample, PreemptionPolicy policy) {
  if (policy == PreemptionPolicy::kSwap && sample.kv.length > 0) {
    sample.state.kv = pool_->Export(sample.kv, at::kCPU);
  }
  pool_->Free(sample.kv);
}

void RolloutEngine::OffloadParked() {
  for (auto& [id, sample] : samples_) {
    const SamplePhase phase = sample->state.phase;
    if ((phase == SamplePhase::kParked || phase == SamplePhase::kToolWait) &&
        sample->HasDeviceKv()) {
      EvictKv(*sample, PreemptionPolicy::kSwap);
    }
  }
}

void RolloutEngine::RequestInterrupt() {
  std::lock_guard<std::mutex> lock(interrupt_mu_);
  interrupt_step_.store(steps_done_.load());
  interrupt_time_ns_.store(NowNs());
  interrupt_requested_.store(true);
}

void RolloutEngine::ParkAll() {
  if (interrupt_requested_.exchange(false)) {
    ++counters_.interrupts;
    counters_.last_interrupt_steps = steps_done_.load() - interrupt_step_.load();
    counters_.last_interrupt_ms = (NowNs() - interrupt_time_ns_.load()) / 1e6;
  }
  for (Sample* s : running_) s->state.phase = SamplePhase::kParked;
  parked_ = true;
}

absl::Status RolloutEngine::Resume(int64_t policy_version,
                                   std::optional<WeightUpdatePolicy> policy) {
  if (policy_version < version_) {
    return absl::InvalidArgumentError(absl::StrCat("Resume: policy version ", policy_version,
                                                   " is older than the current ", version_));
  }
  const bool recompute =
      policy_version != version_ &&
      policy.value_or(options_.on_weight_update) == WeightUpdatePolicy::kRecompute;
  version_ = policy_version;
  parked_ = false;
  if (recompute) {
    for (auto& [id, sample] : samples_) {
      pool_->Free(sample->kv);  // finished samples hold none
      sample->state.kv = model::KvSnapshot();
    }
  }
  // Offloaded samples go back through admission, which copies their KV in.
  std::vector<Sample*> offloaded;
  for (Sample* s : running_) {
    s->state.phase = SamplePhase::kRunning;
    if (s->HasHostKv()) offloaded.push_back(s);
  }
  for (Sample* s : offloaded) {
    running_.erase(std::find(running_.begin(), running_.end(), s));
    Enqueue(*s);
  }
  return absl::OkStatus();
}

absl::StatusOr<SampleState> RolloutEngine::Export(uint64_t id) {
  auto it = samples_.find(id);
  if (it == samples_.end()) return absl::NotFoundError(absl::StrCat("no sample ", id));
  Sample& sample = *it->second;
  if (sample.state.phase == SamplePhase::kRunning) {
    return absl::FailedPreconditionError(
        absl::StrCat("sample ", id, " is running: park the engine before exporting it"));
  }
  RemoveFromQueues(sample);
  EvictKv(sample, PreemptionPolicy::kSwap);
  SampleState state = std::move(sample.state);
  samples_.erase(it);
  return state;
}

}  // namespace loom::rollout
