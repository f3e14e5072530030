#include "sandbox/admission.h"

#include <algorithm>

namespace loom::sandbox {

Admission::Admission(int capacity) : capacity_(capacity) {
  for (int slot = 0; slot < capacity; ++slot) free_.push_back(slot);
}

int Admission::Acquire() {
  std::lock_guard<std::mutex> lock(mu_);
  if (free_.empty()) {
    ++refused_;
    return -1;
  }
  const int slot = free_.front();
  free_.pop_front();
  ++live_;
  ++served_;
  return slot;
}

void Admission::Release(int slot) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(slot);
  --live_;
}

void Admission::RecordLatency(double ms) {
  std::lock_guard<std::mutex> lock(mu_);
  if (latencies_.size() < kWindow) {
    latencies_.push_back(ms);
  } else {
    latencies_[next_latency_] = ms;
  }
  next_latency_ = (next_latency_ + 1) % kWindow;
}

Admission::Load Admission::Snapshot() const {
  std::vector<double> sorted;
  Load load;
  {
    std::lock_guard<std::mutex> lock(mu_);
    sorted = latencies_;
    load.live = live_;
    load.capacity = capacity_;
    load.served = served_;
    load.refused = refused_;
  }
  if (!sorted.empty()) {
    std::sort(sorted.begin(), sorted.end());
    load.p50_ms = sorted[sorted.size() / 2];
    load.p99_ms = sorted[std::min(sorted.size() - 1, sorted.size() * 99 / 100)];
  }
  return load;
}

}  // namespace loom::sandbox
