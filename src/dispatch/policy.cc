#include "loom/dispatch/policy.h"

#include <algorithm>

#include "absl/status/status.h"

namespace loom::dispatch {
namespace {

class SampleLevelPolicy : public DispatchPolicy {
 public:
  const char* name() const override { return "sample"; }
  int64_t OnSampleFinished(bool, const PolicyView&) override { return 1; }
};

class PromptLevelPolicy : public DispatchPolicy {
 public:
  const char* name() const override { return "prompt"; }
  int64_t OnSampleFinished(bool prompt_done, const PolicyView& view) override {
    return prompt_done ? view.group_size : 0;
  }
};

class BatchLevelPolicy : public DispatchPolicy {
 public:
  const char* name() const override { return "batch"; }
  int64_t OnSampleFinished(bool, const PolicyView& view) override {
    // A batch larger than the engine's working set refills what fits.
    const int64_t refill = std::min(view.batch_samples, view.max_inflight);
    if (++finished_ < refill) return 0;
    finished_ = 0;
    return refill;
  }
  int64_t State() const override { return finished_; }
  void SetState(int64_t state) override { finished_ = state; }

 private:
  int64_t finished_ = 0;  // since the last refill
};

class SyncPolicy : public DispatchPolicy {
 public:
  const char* name() const override { return "sync"; }
  int64_t InitialBudget(const PolicyView& view) const override {
    return SyncWaveSamples(view.batch_samples, view.group_size);
  }
  int64_t OnSampleFinished(bool, const PolicyView&) override { return 0; }
  int64_t OnRefill(const PolicyView& view) override {
    const bool idle = view.inflight == 0 && view.ready_samples == 0;
    if (!idle || view.budget >= view.group_size) return 0;
    return SyncWaveSamples(view.batch_samples, view.group_size) - view.budget;
  }
  bool TrainsOnlyWhenIdle() const override { return true; }
};

}  // namespace

int64_t DispatchPolicy::InitialBudget(const PolicyView& view) const { return view.max_inflight; }

int64_t SyncWaveSamples(int batch_samples, int group_size) {
  return (batch_samples + group_size - 1) / group_size * static_cast<int64_t>(group_size);
}

absl::StatusOr<std::unique_ptr<DispatchPolicy>> MakePolicy(const std::string& name) {
  if (name == "sample") return std::make_unique<SampleLevelPolicy>();
  if (name == "prompt") return std::make_unique<PromptLevelPolicy>();
  if (name == "batch") return std::make_unique<BatchLevelPolicy>();
  if (name == "sync") return std::make_unique<SyncPolicy>();
  return absl::InvalidArgumentError("unknown dispatch policy '" + name +
                                    "' (expected sample, prompt, batch or sync)");
}

}  // namespace loom::dispatch
