#pragma once
// GrpoTrainer: the GRPO stage's BatchTrainer. One optimizer step on a batch
// of finished samples — verifier and length rewards, subgroup advantages, the
// clipped policy loss against the recorded behaviour log-probs (with MoE
// routing replay), the stage's optimizer step — and the metrics line that
// describes it.

#include <cstdint>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "loom/algo/length_reward.h"
#include "loom/algo/policy_loss.h"
#include "loom/model/transformer.h"
#include "loom/train/async_loop.h"
#include "loom/train/context.h"
#include "loom/train/encoding.h"
#include "loom/train/stage_optimizer.h"

namespace loom::train {

// The task reward of a finished sample: the verifier's on its completion, or
// its agent episode's verdict. Episodes that failed for infrastructure
// reasons never get here (MaskInfrastructureFailures).
Judgement JudgeTrainingSample(const TrainContext& context, const TrainingSample& sample);

class GrpoTrainer : public BatchTrainer {
 public:
  // `think_end_id`: the `</think>` token (-1 when the tokenizer lacks it:
  // every generated token then counts as reasoning). `reference`: the frozen
  // model of the KL penalty (grpo.kl_coef > 0), or null; borrowed.
  GrpoTrainer(TrainContext& context, StageOptimizer& optimizer,
              algo::EffortLengthReward length_reward, int64_t think_end_id,
              const model::Transformer* reference = nullptr)
      : context_(context),
        optimizer_(optimizer),
        length_reward_(std::move(length_reward)),
        think_end_id_(think_end_id),
        reference_(reference) {}

  // Trains on the batch's samples (complete subgroups) as its step of the
  // stage; bumps context.policy_version. Returns the step's metrics line.
  absl::StatusOr<TrainedStep> Train(const Batch& batch) override;

 private:
  struct Judged;      // rewards and the metrics kept alongside them
  struct Selection;   // the samples scored, their advantages, the normaliser
  struct LossTotals;  // what the loss reported, summed over micro-batches

  // The task reward of one sample (the verifier's, or its episode's), its
  // reasoning length and its generated tokens.
  Judgement JudgeSample(const TrainingSample& sample, int64_t* reasoning,
                        int64_t* response_tokens) const;
  // Rewards (verifier + length), lag and per-dataset / per-effort metrics.
  Judged JudgeBatch(const std::vector<TrainingSample>& samples, int64_t version) const;
  // Subgroup advantages, the samples to score (informative subgroups only
  // under grpo.skip_uninformative) and the token normaliser.
  Selection Select(const std::vector<TrainingSample>& samples, const Judged& judged,
                   int64_t version) const;
  // Scores the selected samples micro-batch by micro-batch, each at its
  // sampling temperature, and accumulates the policy loss's gradients.
  absl::StatusOr<LossTotals> Backward(const std::vector<TrainingSample>& samples,
                                      const Selection& selection, int64_t version) const;
  absl::StatusOr<algo::PolicyLossResult> MicroBatchLoss(const std::vector<TrainingSample>& samples,
                                                        const std::vector<size_t>& indices,
                                                        double temperature,
                                                        const Selection& selection,
                                                        int64_t version) const;
  // Several ranks: the step line's batch-wide figures (samples, rewards,
  // lengths, loss, ratios) over every rank's samples; the by-dataset and
  // by-effort breakdowns stay this rank's.
  absl::Status AddGlobalFigures(const Batch& batch, const Judged& judged,
                                const Selection& selection, const LossTotals& totals,
                                nlohmann::json& record) const;
  // The step's metrics line.
  nlohmann::json Record(const Batch& batch, const Judged& judged, const Selection& selection,
                        const LossTotals& totals, const StageOptimizer::Applied& applied,
                        double train_seconds) const;

  TrainContext& context_;
  StageOptimizer& optimizer_;
  algo::EffortLengthReward length_reward_;
  int64_t think_end_id_;
  const model::Transformer* reference_;
};

}  // namespace loom::train
