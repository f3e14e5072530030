#include "autocast.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace loom::model {
namespace {

// LibTorch 2.4 made autocast's switches per device type; before, CPU and
// CUDA had functions of their own.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool Enabled(at::DeviceType d) { return at::autocast::is_autocast_enabled(d); }
at::ScalarType Dtype(at::DeviceType d) { return at::autocast::get_autocast_dtype(d); }
void Set(at::DeviceType d, bool on, at::ScalarType dtype) {
  at::autocast::set_autocast_enabled(d, on);
  at::autocast::set_autocast_dtype(d, dtype);
}
#else
bool Enabled(at::DeviceType d) {
  return d == at::kCUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
}
at::ScalarType Dtype(at::DeviceType d) {
  return d == at::kCUDA ? at::autocast::get_autocast_gpu_dtype()
                        : at::autocast::get_autocast_cpu_dtype();
}
void Set(at::DeviceType d, bool on, at::ScalarType dtype) {
  if (d == at::kCUDA) {
    at::autocast::set_enabled(on);
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_cpu_enabled(on);
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
}
#endif

}  // namespace

AutocastGuard::AutocastGuard(bool enabled, at::DeviceType device)
    : enabled_(enabled), device_(device) {
  if (!enabled_) return;
  was_enabled_ = Enabled(device_);
  was_dtype_ = Dtype(device_);
  Set(device_, true, at::kBFloat16);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!enabled_) return;
  // The weights' bfloat16 copies are cached for the region; they must not
  // outlive it, since the optimizer changes the weights between calls.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  Set(device_, was_enabled_, was_dtype_);
}

}  // namespace loom::model
