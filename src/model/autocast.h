#pragma once
// Mixed precision for the training forward: while an AutocastGuard is alive,
// matrix products on its device run in bfloat16 (LibTorch's autocast), while
// parameters, norms, RoPE and softmax stay in float32. Private to the model
// module.

#include <ATen/ATen.h>

namespace loom::model {

class AutocastGuard {
 public:
  // Does nothing unless `enabled`. Nests: an inner guard leaves the outer
  // one's state as it found it.
  AutocastGuard(bool enabled, at::DeviceType device);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool enabled_;
  at::DeviceType device_;
  bool was_enabled_ = false;
  at::ScalarType was_dtype_ = at::kBFloat16;
};

}  // namespace loom::model
