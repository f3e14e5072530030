#pragma once
// Admission control and load statistics of one worker. Thread-safe.

#include <cstdint>
#include <mutex>
#include <vector>

#include "absl/base/thread_annotations.h"

namespace loom::sandbox {

class Admission {
 public:
  explicit Admission(int capacity) : used_(capacity, false) {}

  // A free slot index, or -1 (counted as a refusal) when all are taken.
  int Acquire();
  void Release(int slot);

  // Records one tool-call latency (the last kWindow are kept).
  void RecordLatency(double ms);

  struct Load {
    int live = 0;
    int capacity = 0;
    double p50_ms = 0;
    double p99_ms = 0;
    int64_t served = 0;
    int64_t refused = 0;
  };
  Load Snapshot() const;

 private:
  static constexpr size_t kWindow = 512;
  mutable std::mutex mu_;
  std::vector<bool> used_ ABSL_GUARDED_BY(mu_);
  int live_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t served_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<double> latencies_ ABSL_GUARDED_BY(mu_);
  size_t next_latency_ ABSL_GUARDED_BY(mu_) = 0;
};

// RAII slot holder.
class SlotLease {
 public:
  SlotLease(Admission& admission) : admission_(admission), slot_(admission.Acquire()) {}
  ~SlotLease() {
    if (slot_ >= 0) admission_.Release(slot_);
  }
  int slot() const { return slot_; }

 private:
  Admission& admission_;
  int slot_;
};

}  // namespace loom::sandbox
