#pragma once
// StageOptimizer: the one optimizer step every stage takes — clip the
// gradients' global norm, AdamW at the warm-up + cosine learning rate of the
// stage's step, zero the gradients. Owns the
// stage's AdamW state (borrowing the model's parameters). In a multi-rank
// run the gradients are first summed across ranks (each rank's loss is
// already divided by the global normaliser), so every rank takes the same
// step and keeps identical weights. Run loop thread only.

#include <cstdint>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "loom/config/train_section.h"
#include "loom/dist/group.h"
#include "loom/model/transformer.h"
#include "loom/train/adamw.h"

namespace loom::train {

class StageOptimizer {
 public:
  // `group`: the run's ranks (borrowed; null for one rank).
  StageOptimizer(const model::Transformer& model, const config::OptimizerFields& fields,
                 dist::Group* group = nullptr, int64_t bucket_bytes = int64_t{32} << 20);

  // What one step applied, for the metrics line.
  struct Applied {
    double lr = 0;
    double grad_norm = 0;          // before clipping
    double allreduce_seconds = 0;  // summing the gradients across ranks (waits for the slowest)
  };
  // Steps from the gradients accumulated since the last step, as step `step`
  // (0-based) of the stage: the weights it leaves are the next policy
  // version, which the caller counts. UNAVAILABLE when the gradient
  // all-reduce fails (a peer rank is gone); nothing is applied.
  absl::StatusOr<Applied> Step(int64_t step);

  // Several ranks: what every trainer's step line adds after the step —
  // `ranks`, `allreduce_seconds` and `weights_checksum` (equal on every rank
  // while they hold the same weights). Nothing with one rank.
  void AddRankFigures(const Applied& applied, nlohmann::json& record) const;

  AdamW& adamw() { return adamw_; }

 private:
  const config::OptimizerFields& fields_;
  AdamW adamw_;
  std::vector<at::Tensor> parameters_;  // what the all-reduce sums the gradients of
  dist::Group* group_;
  int64_t bucket_bytes_;
};

}  // namespace loom::train
