#pragma once
// StageOptimizer: the one optimizer step every stage takes — clip the
// gradients' global norm, AdamW at the warm-up + cosine learning rate of the
// stage's step, zero the gradients, bump the policy version. Owns the
// stage's AdamW state (borrowing the model's parameters). Run loop thread only.

#include <cstdint>

#include "loom/config/train_section.h"
#include "loom/model/transformer.h"
#include "loom/train/adamw.h"

namespace loom::train {

class StageOptimizer {
 public:
  StageOptimizer(const model::Transformer& model, const config::OptimizerFields& fields);

  // What one step applied, for the metrics line.
  struct Applied {
    double lr = 0;
    double grad_norm = 0;  // before clipping
  };
  // Steps from the gradients accumulated since the last step, as step `step`
  // (0-based) of the stage; increments `policy_version`.
  Applied Step(int64_t step, int64_t& policy_version);

  AdamW& adamw() { return adamw_; }

 private:
  const config::OptimizerFields& fields_;
  AdamW adamw_;
};

}  // namespace loom::train
