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
  for (size_t i = 0; i < waiting_.size() && num_running() < options_.max_batch;) {
    Sample& sample = *waiting_[i];
    if (WaitsForPrefix(sample)) {
      ++i;  // its prefix is being computed; the samples behind it may go first
      continue;
    }
    if (!TryAdmit(sample)) return;  // first come, first served: the queue waits
    waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(i));
    sample.state.phase = SamplePhase::kRunning;
    auto pos = std::find_if(running_.begin(), running_.end(),
                            [&](const Sample* s) { return s->arrival > sample.arrival; });
    running_.insert(pos, &sample);
  }
}

bool RolloutEngine::TryAdmit(Sample& sample) {
  const bool fresh = options_.prefix_cache && !sample.HasDeviceKv() && !sample.HasHostKv();
  const bool restore = options_.prefix_cache && sample.HasHostKv();
  if (fresh) AcquirePrefix(sample);
  if (restore) pool_->AcquireSnapshotPrefix(sample.kv, sample.state.kv, sample.state.tokens);
  const int64_t needed = pool_->BlocksToReserve(sample.kv, sample.state.length());
  if (needed > pool_->free_blocks() && !(running_.empty() && MakeRoomForWaiting(needed))) {
    if (fresh || restore) pool_->Free(sample.kv);  // the prefix goes back
    return false;
  }
  if (fresh) counters_.prefix_hit_tokens += sample.kv.length;
  if (sample.HasHostKv()) {
    const absl::Status status = pool_->Import(sample.state.kv, sample.kv);
    LOOM_CHECK(status.ok(), "KV swap-in of sample " << sample.state.id << ": " << status);
    // What it had published is published again (or found published, above).
    if (restore) {
      pool_->Publish(sample.kv, sample.state.tokens, &sample.state.routing,
                     sample.state.routing_width(), sample.state.kv.published);
    }
    sample.state.kv = model::KvSnapshot();
  }
  // Reserve the whole sequence now so later admissions see the true free count.
  const absl::Status status = pool_->Reserve(sample.kv, sample.state.length());
  LOOM_CHECK(status.ok(), "KV reserve at admission of sample " << sample.state.id);
  return true;
}

void RolloutEngine::AcquirePrefix(Sample& sample) {
  SampleState& state = sample.state;
  const int64_t matched = pool_->AcquirePrefix(sample.kv, state.tokens, MinPrefixVersion());
  const int64_t width = state.routing_width();
  if (width > 0) {
    // Routing rows of the taken tokens come with their blocks; a block
    // published without them ends the match.
    const int64_t bs = pool_->block_size();
    for (int64_t b = 0; b * bs < matched; ++b) {
      const std::vector<int16_t>& rows = pool_->PublishedRows(sample.kv.blocks[b]);
      if (static_cast<int64_t>(rows.size()) != bs * width) {
        pool_->Truncate(sample.kv, b * bs);
        break;
      }
      const int64_t have = state.routing_rows();
      if (have >= (b + 1) * bs) continue;
      const int64_t skip = std::max<int64_t>(0, have - b * bs);
      state.routing.insert(state.routing.end(), rows.begin() + skip * width, rows.end());
    }
  }
  if (sample.kv.length == 0) sample.kv.version = version_;  // its KV will all be computed now
  // The last token is fed again for its logits: its block is copied on write.
  if (sample.kv.length >= state.length()) pool_->Truncate(sample.kv, state.length() - 1);
}

bool RolloutEngine::WaitsForPrefix(const Sample& sample) const {
  if (!options_.prefix_cache || sample.HasDeviceKv() || sample.HasHostKv()) return false;
  const std::vector<int64_t>& tokens = sample.state.tokens;
  const int64_t bs = pool_->block_size();
  int64_t cached = -1;  // computed on the first running sample worth asking about
  for (const Sample* leader : running_) {
    // Only a sample still prefilling, and publishing what this one could take.
    if (leader->Pending() <= 1 || leader->kv.version < MinPrefixVersion()) continue;
    const std::vector<int64_t>& other = leader->state.tokens;
    const auto limit = std::min(tokens.size(), other.size());
    const int64_t common =
        std::mismatch(tokens.begin(), tokens.begin() + limit, other.begin()).first - tokens.begin();
    const int64_t shared = common / bs * bs;    // full blocks in common
    if (leader->kv.length >= shared) continue;  // already published (or never will be)
    if (cached < 0) cached = pool_->MatchPrefix(tokens, MinPrefixVersion());
    if (shared > cached) return true;
  }
  return false;
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
  const bool changed = policy_version != version_;
  const bool recompute =
      changed && policy.value_or(options_.on_weight_update) == WeightUpdatePolicy::kRecompute;
  version_ = policy_version;
  parked_ = false;
  if (recompute) {
    for (auto& [id, sample] : samples_) {
      pool_->Free(sample->kv);  // finished samples hold none
      sample->state.kv = model::KvSnapshot();
    }
  }
  // Cached prefixes too old for the lag can never be taken again.
  if (changed) pool_->DropCached(MinPrefixVersion());
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
