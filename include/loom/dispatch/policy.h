#pragma once
// Dispatch policies: when finished samples turn into room for new prompts.
//
// Every policy speaks one currency: a budget of sample slots. The dispatcher
// starts a prompt whenever the budget covers its whole group (and the caps,
// max_inflight and the staleness bound allow it), then spends the group's
// size. Policies only decide how finishes refill the budget:
//   sample  +1 per finished sample: as soon as the samples finished since
//           the last dispatch reach the next group's size, it goes out,
//           whichever groups they came from. In-flight stays near max.
//   prompt  +group size when the last sample of a prompt finishes.
//   batch   +batch_samples each time that many samples have finished (at
//           most max_inflight: a batch larger than the working set refills what fits).
//   sync    one batch (rounded up to whole groups) when the engine is empty
//           and every finished sample was trained on; the trainer only
//           trains when nothing is in flight.
//
// Policies are owned by one Dispatcher and called from the run loop only.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace loom::dispatch {

// What a policy may look at.
struct PolicyView {
  int64_t inflight = 0;       // samples admitted and not finished
  int64_t ready_samples = 0;  // finished samples of complete subgroups, not yet trained on
  int64_t budget = 0;         // unspent slots
  int group_size = 1;         // samples per prompt
  int max_inflight = 1;
  int batch_samples = 1;
};

class DispatchPolicy {
 public:
  virtual ~DispatchPolicy() = default;
  virtual const char* name() const = 0;

  // Slots available before anything finished.
  virtual int64_t InitialBudget(const PolicyView& view) const;

  // Slots released by one finished sample (`prompt_done`: it was the last of its prompt).
  virtual int64_t OnSampleFinished(bool prompt_done, const PolicyView& view) = 0;

  // Slots released at a refill regardless of finishes (sync's next wave).
  virtual int64_t OnRefill(const PolicyView& view) {
    (void)view;
    return 0;
  }

  // True when training may only happen with nothing in flight.
  virtual bool TrainsOnlyWhenIdle() const { return false; }

  // The policy's own counter, for checkpoints (0 for stateless policies).
  virtual int64_t State() const { return 0; }
  virtual void SetState(int64_t state) { (void)state; }
};

// "sample" | "prompt" | "batch" | "sync"; anything else is INVALID_ARGUMENT.
absl::StatusOr<std::unique_ptr<DispatchPolicy>> MakePolicy(const std::string& name);

// sync's wave: batch_samples rounded up to whole groups.
int64_t SyncWaveSamples(int batch_samples, int group_size);

}  // namespace loom::dispatch
