#pragma once
// AdamW (decoupled weight decay, Loshchilov & Hutter) over a model's
// parameters, with its state as plain named tensors so a checkpoint can save
// and restore it bit-exactly (TensorMap, written as safetensors).
//
// Weight decay applies to matrices only (2-D and up); norms' scales and
// biases are not decayed. Owned by the run loop; not thread-safe.

#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "absl/status/status.h"
#include "loom/model/safetensors.h"

namespace loom::train {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

class AdamW {
 public:
  // `params` are the model's named parameters (sharing storage with it).
  AdamW(std::vector<std::pair<std::string, at::Tensor>> params, AdamWOptions options);

  // One update with learning rate `lr` from the parameters' current .grad()
  // (parameters without a gradient are skipped, their state untouched).
  void Step(double lr);
  void ZeroGrad();
  // Scales gradients so their global L2 norm is at most `max_norm` (<= 0: no
  // clipping); returns the norm before clipping.
  double ClipGradNorm(double max_norm);

  int64_t steps() const { return steps_; }
  // "step", "<name>.exp_avg", "<name>.exp_avg_sq" for every parameter.
  model::TensorMap StateDict() const;
  // Restores StateDict() output; INVALID_ARGUMENT naming a missing or
  // misshapen entry (nothing changed then).
  absl::Status LoadStateDict(const model::TensorMap& state);

 private:
  struct Slot {
    std::string name;
    at::Tensor param;       // borrowed from the model
    at::Tensor exp_avg;     // like param, float32
    at::Tensor exp_avg_sq;  // like param, float32
    bool decay = false;
  };
  std::vector<Slot> slots_;
  AdamWOptions options_;
  int64_t steps_ = 0;
};

// Learning rate at `step` (0-based) of `total_steps`: linear warm-up from 0
// over `warmup_steps`, then cosine decay to `min_ratio` × `peak`.
double WarmupCosineLr(double peak, int64_t step, int64_t total_steps, int64_t warmup_steps,
                      double min_ratio);

}  // namespace loom::train
