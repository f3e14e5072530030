#pragma once
// OpdTrainer: the opd stage's BatchTrainer. One optimizer step of on-policy
// distillation on a batch of the student's own samples:
//
//  * full (default): at every response token, the exact reverse
//    KL(π_student ‖ π_teacher) over the whole vocabulary at the sampling
//    temperature, token-level mean over the batch; the gradient flows through
//    the student's whole distribution. The teacher side is kept compact — its
//    final hidden state per token (H_t numbers, not V) and its LM head, applied
//    chunk by chunk inside the KL (model::TeacherRows) — so no [T × V] tensor
//    of either model exists for a whole micro-batch.
//  * sampled: the sampled-token form — per-token advantage log π_teacher(y_t)
//    − log π_behaviour(y_t) in the clipped policy loss.
//
// Either way opd.reward_weight > 0 adds the GRPO loss on verifier rewards
// (subgroup advantages), and tokens older than async.mask_lag are masked.
// The batch is grouped by teacher: each teacher is brought onto the device
// (TeacherPool) at most once per step, resident teachers first. A
// micro-batch spans teachers: the student's stack runs once over it, each
// teacher on its own segment, whose KL gradient is taken at once into the
// student's hidden states — so only one teacher at a time is needed and the
// student never runs on a teacher-sized sliver of the batch.

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "loom/algo/teacher_pool.h"
#include "loom/train/async_loop.h"
#include "loom/train/stage_optimizer.h"
#include "loom/train/step_inputs.h"

namespace loom::train {

class ClippedPolicyTerm;  // train/loss_terms.h

class OpdTrainer : public BatchTrainer {
 public:
  // `teachers`: borrowed; every sample's info.teacher is a slot in it.
  OpdTrainer(const StepInputs& run, StageOptimizer& optimizer, algo::TeacherPool& teachers);
  ~OpdTrainer() override;

  // Trains on the batch as its step of the stage. Returns the step's metrics
  // line and batch.policy_version + 1.
  absl::StatusOr<TrainedStep> Train(const Batch& batch) override;

  // The step's internals (opd_step.cc), named here so that its estimators
  // can be defined there.
  struct Micro;      // one micro-batch, packed, with the rows its loss weighs
  struct Segment;    // one teacher's part of it
  struct Distilled;  // what its teacher segments leave for the student's side
  class Distiller;   // the distillation term (opd.estimator): full or sampled KL

 private:
  struct Step;  // what one step accumulates across teachers and micro-batches

  // The distillation (and reward) loss of the samples `indices` (one
  // temperature, grouped by teacher): the student's stack runs once, each
  // teacher once on its segment; accumulates gradients and metrics.
  absl::Status MicroBatchBackward(const std::vector<TrainingSample>& samples,
                                  const std::vector<size_t>& indices, double temperature,
                                  Step& step) const;
  // Each teacher on its contiguous segment of the micro-batch: full KL (its
  // gradient into distilled.hidden at once) or the sampled targets' log-probs.
  absl::Status DistilSegments(const std::vector<TrainingSample>& samples, const Micro& micro,
                              Distilled& distilled, Step& step) const;
  // The teacher segment of the micro-batch from its sample `a` and row `row_begin` on.
  static Segment NextSegment(const std::vector<TrainingSample>& samples, const Micro& micro,
                             size_t a, int64_t row_begin);
  // KL by dataset and by teacher from the rows' KL.
  void RecordKl(const std::vector<TrainingSample>& samples, const Micro& micro,
                const at::Tensor& kl, Step& step) const;
  // The teacher pool's loads and evictions since `before`.
  void AddTeacherFigures(const algo::TeacherPoolStats& before, nlohmann::json& record) const;
  nlohmann::json Record(const Batch& batch, const Step& step,
                        const StageOptimizer::Applied& applied, double train_seconds) const;

  const StepInputs run_;
  StageOptimizer& optimizer_;
  algo::TeacherPool& teachers_;
  std::unique_ptr<const ClippedPolicyTerm> policy_term_;  // the sampled KL's and the reward's
  std::unique_ptr<const Distiller> distiller_;
};

}  // namespace loom::train
