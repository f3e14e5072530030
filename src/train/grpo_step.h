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
#include "loom/algo/judge.h"
#include "loom/algo/length_reward.h"
#include "loom/algo/policy_loss.h"
#include "loom/model/transformer.h"
#include "loom/train/async_loop.h"
#include "loom/train/stage_optimizer.h"
#include "loom/train/step_inputs.h"
#include "train/loss_terms.h"
#include "train/step_figures.h"

namespace loom::train {

class GrpoTrainer : public BatchTrainer {
 public:
  // `think_end_id`: the `</think>` token (-1 when the tokenizer lacks it:
  // every generated token then counts as reasoning). `reference`: the frozen
  // model of the KL penalty (grpo.kl_coef > 0), or null; borrowed.
  GrpoTrainer(const StepInputs& run, StageOptimizer& optimizer,
              algo::EffortLengthReward length_reward, int64_t think_end_id,
              const model::Transformer* reference = nullptr)
      : run_(run),
        optimizer_(optimizer),
        length_reward_(std::move(length_reward)),
        think_end_id_(think_end_id),
        reference_(reference),
        policy_term_({run.config.grpo.clip_low, run.config.grpo.clip_high,
                      run.config.async.mask_lag, run.config.grpo.kl_coef}) {}

  // Trains on the batch's samples (complete subgroups) as its step of the
  // stage. Returns the step's metrics line and batch.policy_version + 1.
  absl::StatusOr<TrainedStep> Train(const Batch& batch) override;

 private:
  struct Selection;  // the samples scored, their advantages, the normaliser

  // Subgroup advantages of `rewards` and the samples to score (informative
  // subgroups only under grpo.skip_uninformative).
  Selection Select(const std::vector<TrainingSample>& samples,
                   const std::vector<float>& rewards) const;
  // An external harness's episode trains as each of its sequences, all with
  // the episode's advantage: when some sample has further sequences, `split`
  // gets every sequence as a sample of its own (an episode that made no call
  // has none), `selection` is re-indexed to it, and it returns true.
  static bool SplitSequences(const std::vector<TrainingSample>& samples, Selection& selection,
                             std::vector<TrainingSample>& split);
  // Scores the selected samples micro-batch by micro-batch, each at its
  // sampling temperature, accumulates the policy loss's gradients and adds
  // what it reports to `figures`.
  absl::Status Backward(const std::vector<TrainingSample>& samples, const Selection& selection,
                        int64_t version, StepFigures& figures) const;
  absl::StatusOr<algo::PolicyLossResult> MicroBatchLoss(const std::vector<TrainingSample>& samples,
                                                        const std::vector<size_t>& indices,
                                                        double temperature,
                                                        const Selection& selection,
                                                        int64_t version) const;
  // The GRPO figures of the step line (task and length rewards, parses,
  // subgroups, the policy loss's ratios over `weighted_tokens`).
  void AddOwnFigures(const StepFigures& figures, double weighted_tokens,
                     nlohmann::json& record) const;
  // With agent datasets: this rank's rewards and lengths by harness
  // (`builtin` for loom's own loop).
  void AddHarnessBreakdown(const std::vector<algo::Verdict>& verdicts, const algo::Rewards& rewards,
                           nlohmann::json& record) const;
  // This rank's rewards and lengths by dataset and by effort.
  static nlohmann::json Breakdowns(const std::vector<algo::Verdict>& verdicts,
                                   const algo::Rewards& rewards);

  const StepInputs run_;
  StageOptimizer& optimizer_;
  algo::EffortLengthReward length_reward_;
  int64_t think_end_id_;
  const model::Transformer* reference_;
  const ClippedPolicyTerm policy_term_;
};

}  // namespace loom::train
