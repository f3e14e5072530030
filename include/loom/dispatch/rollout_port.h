#pragma once
// RolloutPort: the narrow view of the rollout engine the dispatcher needs.
// The trainer adapts the real engine to it; tests script a fake one. The
// dispatcher does its own bookkeeping of what is in flight (it admitted every
// sample, and the run loop reports every finish), so the port only answers
// the policy version and takes admissions.

#include <cstdint>

#include "loom/dispatch/types.h"

namespace loom::dispatch {

class RolloutPort {
 public:
  virtual ~RolloutPort() = default;

  // Version of the weights new tokens are generated with.
  virtual int64_t PolicyVersion() const = 0;

  // Starts every sample of `group` (prefill at the engine's next step).
  virtual void Admit(const PromptGroup& group) = 0;
};

}  // namespace loom::dispatch
