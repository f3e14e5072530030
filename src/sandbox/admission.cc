#include "sandbox/admission.h"

#include <algorithm>

namespace loom::sandbox {

int Admission::Acquire() {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < used_.size(); ++i) {
    if (!used_[i]) {
      used_[i] = true;
      ++live_;
      ++served_;
      return static_cast<int>(i);
    }
  }
  ++refused_;
  return -1;
}

void Admission::Release(int slot) {
  std::lock_guard<std::mutex> lock(mu_);
  used_[slot] = false;
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
    load.capacity = static_cast<int>(used_.size());
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
