#pragma once
// A scripted stand-in for the rollout engine: every admitted sample needs a
// fixed number of decode steps (from a length function of its id); Step()
// advances all of them by one and returns the ones that finished.

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "loom/dispatch/rollout_port.h"

namespace loom::dispatch {

class FakeEngine : public RolloutPort {
 public:
  explicit FakeEngine(std::function<int(uint64_t)> length) : length_(std::move(length)) {}

  int64_t PolicyVersion() const override { return version_; }
  void Admit(const PromptGroup& group) override {
    admitted_.push_back(group);
    for (const auto& subgroup : group.subgroups) {
      for (const auto& ticket : subgroup.samples)
        remaining_[ticket.sample_id] = length_(ticket.sample_id);
    }
  }

  std::vector<uint64_t> Step() {
    std::vector<uint64_t> finished;
    for (auto it = remaining_.begin(); it != remaining_.end();) {
      if (--it->second <= 0) {
        finished.push_back(it->first);
        it = remaining_.erase(it);
      } else {
        ++it;
      }
    }
    return finished;
  }

  void BumpVersion() { ++version_; }
  size_t active() const { return remaining_.size(); }
  const std::vector<PromptGroup>& admitted() const { return admitted_; }

 private:
  std::function<int(uint64_t)> length_;
  std::map<uint64_t, int> remaining_;
  std::vector<PromptGroup> admitted_;
  int64_t version_ = 0;
};

}  // namespace loom::dispatch
