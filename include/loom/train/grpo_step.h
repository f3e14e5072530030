#pragma once
// GrpoStep: one GRPO optimizer step on a batch of finished samples —
// verifier and length rewards, subgroup advantages, the clipped policy loss
// against the recorded behaviour log-probs (with MoE routing replay), AdamW —
// and the metrics line that describes it.

#include <cstdint>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "loom/algo/length_reward.h"
#include "loom/dispatch/types.h"
#include "loom/model/transformer.h"
#include "loom/rollout/sample_state.h"
#include "loom/tasks/problem.h"
#include "loom/train/adamw.h"
#include "loom/train/context.h"
#include "loom/train/encoding.h"
#include "loom/v1/sandbox.pb.h"

namespace loom::train {

// What the loop remembers about a sample it admitted.
struct SampleInfo {
  std::shared_ptr<const tasks::Problem> problem;
  uint64_t subgroup_id = 0;
  int effort = 0;
  int dataset = 0;  // index into the datasets
  uint64_t problem_index = 0;  // Dataset::Train(problem_index) is `problem` (for checkpoints)
  bool agent = false;          // a multi-turn sandbox episode (environment: sandbox)
  // Agent samples, once the episode ended: its record. The reward is its
  // verdict, or sandbox.failure_reward when it failed for infrastructure reasons.
  std::shared_ptr<const v1::Trajectory> trajectory;
};

struct TrainingSample {
  rollout::SampleState state;
  SampleInfo info;
};

// Rollout work since the previous step, for throughput metrics.
struct RolloutTotals {
  int64_t decode_tokens = 0;
  int64_t prefill_tokens = 0;
  double seconds = 0;
};

class GrpoStep {
 public:
  // `think_end_id`: the `</think>` token (-1 when the tokenizer lacks it:
  // every generated token then counts as reasoning). `reference`: the frozen
  // model of the KL penalty (grpo.kl_coef > 0), or null; borrowed.
  GrpoStep(TrainContext& context, AdamW& optimizer, algo::EffortLengthReward length_reward,
           int64_t think_end_id, const model::Transformer* reference = nullptr)
      : context_(context),
        optimizer_(optimizer),
        length_reward_(std::move(length_reward)),
        think_end_id_(think_end_id),
        reference_(reference) {}

  // Trains on `samples` (complete subgroups) as step `step` (0-based) of the
  // stage; bumps context.policy_version. Returns the step's metrics line.
  absl::StatusOr<nlohmann::json> Train(const std::vector<TrainingSample>& samples, int64_t step,
                                       const dispatch::DispatchStats& dispatch,
                                       const RolloutTotals& rollout);

 private:
  // The task reward of one sample (the verifier's, or its episode's), its
  // reasoning length and its generated tokens.
  Judgement JudgeSample(const TrainingSample& sample, int64_t* reasoning,
                        int64_t* response_tokens) const;

  TrainContext& context_;
  AdamW& optimizer_;
  algo::EffortLengthReward length_reward_;
  int64_t think_end_id_;
  const model::Transformer* reference_;
};

}  // namespace loom::train
