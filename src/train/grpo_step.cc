#include "loom/train/grpo_step.h"

#include <algorithm>
#include <map>

#include <ATen/core/grad_mode.h>

#include "loom/algo/advantages.h"
#include "loom/algo/policy_loss.h"
#include "loom/config/check.h"
#include "loom/metrics/progress.h"
#include "loom/rollout/sampling.h"
#include "loom/train/batching.h"
#include "loom/train/encoding.h"
#include "loom/v1/sandbox.pb.h"
#include "train/grpo_stage.h"
#include "train/trainer_util.h"

namespace loom::train {
namespace {

// Reasoning tokens of a multi-turn sample: in each stretch of generated
// tokens (a turn), those before its `</think>` (all of them when
// `think_end_id` is -1).
int64_t MultiTurnReasoningLength(const rollout::SampleState& state, int64_t think_end_id) {
  int64_t count = 0;
  bool in_turn = false, reasoning = false;
  for (int64_t t = state.prompt_length; t < state.length(); ++t) {
    if (!state.loss_mask[t]) {
      in_turn = false;
      continue;
    }
    if (!in_turn) in_turn = reasoning = true;
    if (state.tokens[t] == think_end_id) {
      reasoning = false;
    } else if (reasoning) {
      ++count;
    }
  }
  return count;
}

}  // namespace

// What judging a batch found: per-sample rewards and the metrics kept
// alongside them.
struct GrpoTrainer::Judged {
  std::vector<float> total, task, length;  // [n] rewards
  std::vector<int64_t> response_tokens;    // [n]
  std::vector<int64_t> subgroup_ids;       // [n]
  int64_t parsed = 0;
  int64_t episodes = 0, episode_steps = 0;
  int64_t episodes_broken = 0;       // ended because the agent broke its environment
  int64_t lag_sum = 0, lag_max = 0;  // policy versions behind, oldest token
  MeanBy reward_by_dataset, reward_by_effort, length_by_dataset, length_by_effort;
  MeanBy task_reward_by_effort;  // the verifier's reward alone: accuracy per effort
  MeanBy reasoning_by_effort;    // reasoning tokens (inside <think>), what r_len is paid on
  double reasoning_sum = 0;
};

// Which samples the step scores, with their advantages.
struct GrpoTrainer::Selection {
  at::Tensor advantages;       // [n] float32, centred within subgroups
  std::vector<size_t> scored;  // indices into the batch
  int64_t informative = 0;     // subgroups whose rewards differ
  int64_t subgroups = 0;
  double weighted_tokens = 0;  // the token-level mean's normaliser
};

// Sums over micro-batches of what the policy loss reports.
struct GrpoTrainer::LossTotals {
  double loss = 0, clip_weighted = 0, ratio_weighted = 0, kl_weighted = 0;
  double masked_weighted = 0, loss_tokens = 0;
  int64_t trained_tokens = 0;
};

Judgement JudgeTrainingSample(const TrainContext& context, const TrainingSample& sample) {
  const rollout::SampleState& state = sample.state;
  if (!sample.info.agent) {
    std::vector<int64_t> completion(state.tokens.begin() + state.prompt_length, state.tokens.end());
    return JudgeCompletion(*sample.info.problem, completion, context.tokenizer);
  }
  LOOM_CHECK(sample.info.trajectory != nullptr, "agent sample " << state.id << " without episode");
  const v1::Trajectory& trajectory = *sample.info.trajectory;
  LOOM_CHECK(!trajectory.penalty(), "agent sample " << state.id << " failed for infrastructure "
                                                    << "reasons; such samples are masked");
  Judgement judgement;
  judgement.parsed = trajectory.format_errors() == 0;
  judgement.content = trajectory.answer();
  judgement.reward = trajectory.verdict().reward();
  return judgement;
}

Judgement GrpoTrainer::JudgeSample(const TrainingSample& sample, int64_t* reasoning,
                                   int64_t* response_tokens) const {
  const rollout::SampleState& state = sample.state;
  if (!sample.info.agent) {
    std::vector<int64_t> completion(state.tokens.begin() + state.prompt_length, state.tokens.end());
    *reasoning = algo::ReasoningLength(completion, think_end_id_);
    *response_tokens = static_cast<int64_t>(completion.size());
  } else {
    *reasoning = MultiTurnReasoningLength(state, think_end_id_);
    *response_tokens = state.generated;
  }
  return JudgeTrainingSample(context_, sample);
}

GrpoTrainer::Judged GrpoTrainer::JudgeBatch(const std::vector<TrainingSample>& samples,
                                            int64_t version) const {
  // Rewards: the verifier's plus the effort-conditioned length reward.
  Judged judged;
  for (const TrainingSample& sample : samples) {
    int64_t reasoning = 0, response_tokens = 0;
    Judgement judgement = JudgeSample(sample, &reasoning, &response_tokens);
    const double r_len = length_reward_.Reward(sample.info.effort, reasoning);
    judged.task.push_back(static_cast<float>(judgement.reward));
    judged.length.push_back(static_cast<float>(r_len));
    judged.total.push_back(static_cast<float>(judgement.reward + r_len));
    judged.response_tokens.push_back(response_tokens);
    judged.parsed += judgement.parsed;
    if (sample.info.agent) {
      ++judged.episodes;
      judged.episode_steps += sample.info.trajectory->steps();
      judged.episodes_broken += !sample.info.trajectory->repercussion().empty();
    }
    judged.subgroup_ids.push_back(static_cast<int64_t>(sample.info.subgroup_id));
    const std::string& dataset = sample.info.problem->dataset;
    const std::string effort = std::to_string(sample.info.effort);
    judged.reward_by_dataset.Add(dataset, judged.total.back());
    judged.reward_by_effort.Add(effort, judged.total.back());
    judged.task_reward_by_effort.Add(effort, judged.task.back());
    judged.length_by_dataset.Add(dataset, static_cast<double>(response_tokens));
    judged.length_by_effort.Add(effort, static_cast<double>(response_tokens));
    judged.reasoning_by_effort.Add(effort, static_cast<double>(reasoning));
    judged.reasoning_sum += static_cast<double>(reasoning);
    const int64_t lag = version - OldestVersion(sample.state, version);
    judged.lag_sum += lag;
    judged.lag_max = std::max(judged.lag_max, lag);
  }
  return judged;
}

GrpoTrainer::Selection GrpoTrainer::Select(const std::vector<TrainingSample>& samples,
                                           const Judged& judged, int64_t version) const {
  const config::RunConfig& config = context_.config;
  const size_t n = samples.size();
  // Subgroups whose rewards all agree carry no gradient (advantage 0).
  std::map<uint64_t, std::pair<float, float>> reward_range;
  for (size_t i = 0; i < n; ++i) {
    auto it =
        reward_range
            .emplace(samples[i].info.subgroup_id, std::make_pair(judged.total[i], judged.total[i]))
            .first;
    it->second.first = std::min(it->second.first, judged.total[i]);
    it->second.second = std::max(it->second.second, judged.total[i]);
  }
  Selection selection;
  if (n == 0) return selection;
  selection.subgroups = static_cast<int64_t>(reward_range.size());
  for (const auto& [id, range] : reward_range) selection.informative += range.first < range.second;
  selection.advantages = algo::SubgroupAdvantages(at::tensor(judged.total, at::kFloat),
                                                  at::tensor(judged.subgroup_ids, at::kLong),
                                                  config.grpo.scale_by_std);
  // The samples the step scores: all, or only those of informative subgroups.
  for (size_t i = 0; i < n; ++i) {
    const auto& range = reward_range.at(samples[i].info.subgroup_id);
    if (!config.grpo.SkipsUninformative() || range.first < range.second) {
      selection.scored.push_back(i);
    }
  }
  // One token-level mean over the scored samples: count the weighted tokens first.
  for (size_t i : selection.scored) {
    selection.weighted_tokens +=
        static_cast<double>(FreshLossTokens(samples[i].state, version, config.async.mask_lag));
  }
  return selection;
}

absl::StatusOr<algo::PolicyLossResult> GrpoTrainer::MicroBatchLoss(
    const std::vector<TrainingSample>& samples, const std::vector<size_t>& indices,
    double temperature, const Selection& selection, int64_t version) const {
  const config::RunConfig& config = context_.config;
  const PackedSamples packed = PackSamples(samples, indices);
  // Score at the temperature of the samples' behaviour log-probs.
  model::ScoreOptions score_options;
  score_options.temperature = temperature;
  auto scored = context_.model.Score(packed.shifted.batch, score_options);
  if (!scored.ok()) return scored.status();
  // Everything but the log-probs is built on the CPU: move it once to where
  // the log-probs are (no copy when that is the CPU).
  const at::Device device = scored->logprobs.device();
  algo::PolicyLossInputs inputs;
  inputs.logprobs = scored->logprobs;
  inputs.behaviour_logprobs = packed.behaviour.to(device);
  inputs.advantages =
      algo::ExpandToTokens(selection.advantages.index_select(0, packed.index), packed.lengths)
          .to(device);
  inputs.loss_mask = packed.shifted.target_weight.to(device);
  inputs.versions = packed.versions.to(device);
  algo::PolicyLossOptions options;
  options.clip_low = config.grpo.clip_low;
  options.clip_high = config.grpo.clip_high;
  options.policy_version = version;
  options.mask_lag = config.async.mask_lag;
  options.normalizer = std::max(selection.weighted_tokens, 1.0);
  if (reference_ != nullptr) {
    at::NoGradGuard no_grad;
    auto reference = reference_->Score(packed.shifted.batch, score_options);
    if (!reference.ok()) return reference.status();
    inputs.ref_logprobs = reference->logprobs;
    options.kl_coef = config.grpo.kl_coef;
  }
  return algo::PolicyLoss(inputs, options);
}

absl::StatusOr<GrpoTrainer::LossTotals> GrpoTrainer::Backward(
    const std::vector<TrainingSample>& samples, const Selection& selection, int64_t version) const {
  LossTotals totals;
  for (const MicroBatch& micro :
       MicroBatches(samples, selection.scored, context_.config.train.micro_batch_tokens)) {
    for (size_t i : micro.samples) totals.trained_tokens += samples[i].state.length();
    auto loss = MicroBatchLoss(samples, micro.samples, micro.temperature, selection, version);
    if (!loss.ok()) return loss.status();
    loss->loss.backward();
    totals.loss += loss->loss.item<double>();
    totals.clip_weighted += loss->clip_fraction * static_cast<double>(loss->weighted_tokens);
    totals.ratio_weighted += loss->mean_ratio * static_cast<double>(loss->weighted_tokens);
    totals.kl_weighted += loss->kl * static_cast<double>(loss->weighted_tokens);
    totals.masked_weighted += loss->masked_fraction * static_cast<double>(loss->loss_tokens);
    totals.loss_tokens += static_cast<double>(loss->loss_tokens);
  }
  return totals;
}

absl::StatusOr<TrainedStep> GrpoTrainer::Train(const Batch& batch) {
  const double start = metrics::ProgressLine::SteadySeconds();
  const int64_t version = context_.policy_version;
  // Empty only on a rank whose samples were all lost to infrastructure: it
  // still takes part in the step's collectives.
  LOOM_CHECK(!batch.samples.empty() || context_.group != nullptr, "empty GRPO batch");
  const Judged judged = JudgeBatch(batch.samples, version);
  Selection selection = Select(batch.samples, judged, version);
  if (context_.group != nullptr) {
    // One token-level mean over every rank's samples.
    auto weighted = context_.group->Sum({selection.weighted_tokens});
    if (!weighted.ok()) return weighted.status();
    selection.weighted_tokens = (*weighted)[0];
  }
  auto totals = Backward(batch.samples, selection, version);
  if (!totals.ok()) return totals.status();
  auto applied = optimizer_.Step(batch.step, context_.policy_version);
  if (!applied.ok()) return applied.status();
  const double train_seconds = metrics::ProgressLine::SteadySeconds() - start;
  nlohmann::json record = Record(batch, judged, selection, *totals, *applied, train_seconds);
  if (context_.group != nullptr) {
    if (absl::Status s = AddGlobalFigures(batch, judged, selection, *totals, record); !s.ok()) {
      return s;
    }
  }
  optimizer_.AddRankFigures(*applied, record);
  return TrainedStep{std::move(record), context_.policy_version};
}

nlohmann::json GrpoTrainer::Record(const Batch& batch, const Judged& judged,
                                   const Selection& selection, const LossTotals& totals,
                                   const StageOptimizer::Applied& applied,
                                   double train_seconds) const {
  const double n = std::max<double>(static_cast<double>(batch.samples.size()), 1);
  double response_mean = 0;
  for (int64_t len : judged.response_tokens) response_mean += static_cast<double>(len);
  response_mean /= n;
  nlohmann::json record{
      {"stage", kGrpoStage},
      {"step", batch.step + 1},
      {"version", context_.policy_version},
      {"loss", totals.loss},
      {"lr", applied.lr},
      {"grad_norm", applied.grad_norm},
      {"samples", batch.samples.size()},
      {"reward_mean", Mean(judged.total)},
      {"reward_task_mean", Mean(judged.task)},
      {"reward_length_mean", Mean(judged.length)},
      {"reward_by_dataset", judged.reward_by_dataset.Json()},
      {"reward_by_effort", judged.reward_by_effort.Json()},
      {"reward_task_by_effort", judged.task_reward_by_effort.Json()},
      {"response_length_mean", response_mean},
      {"response_length_by_dataset", judged.length_by_dataset.Json()},
      {"response_length_by_effort", judged.length_by_effort.Json()},
      {"reasoning_length_mean", judged.reasoning_sum / n},
      {"reasoning_length_by_effort", judged.reasoning_by_effort.Json()},
      {"parse_rate", static_cast<double>(judged.parsed) / n},
      {"skipped_samples", static_cast<int64_t>(batch.samples.size() - selection.scored.size())},
      {"informative_subgroup_fraction",
       static_cast<double>(selection.informative) /
           static_cast<double>(std::max<int64_t>(selection.subgroups, 1))},
      {"staleness_mean", static_cast<double>(judged.lag_sum) / n},
      {"staleness_max", judged.lag_max},
      {"masked_token_fraction",
       totals.loss_tokens > 0 ? totals.masked_weighted / totals.loss_tokens : 0.0}};
  record.update(LoopMetrics(batch, totals.trained_tokens, train_seconds));
  // Ratios exist only for scored tokens: a step whose subgroups were all
  // uninformative (and skipped) has none.
  if (selection.weighted_tokens > 0) {
    const double weighted = selection.weighted_tokens;
    record["clip_fraction"] = totals.clip_weighted / weighted;
    record["ratio_mean"] = totals.ratio_weighted / weighted;
    if (reference_ != nullptr) record["kl"] = totals.kl_weighted / weighted;
  }
  if (judged.episodes > 0) {
    record["episodes"] = judged.episodes;
    record["episodes_broken"] = judged.episodes_broken;
    record["episode_steps_mean"] =
        static_cast<double>(judged.episode_steps) / static_cast<double>(judged.episodes);
  }
  return record;
}

absl::Status GrpoTrainer::AddGlobalFigures(const Batch& batch, const Judged& judged,
                                           const Selection& selection, const LossTotals& totals,
                                           nlohmann::json& record) const {
  double reward = 0, task = 0, length = 0, response = 0;
  for (size_t i = 0; i < judged.total.size(); ++i) {
    reward += judged.total[i];
    task += judged.task[i];
    length += judged.length[i];
    response += static_cast<double>(judged.response_tokens[i]);
  }
  const auto n = static_cast<double>(batch.samples.size());
  auto sums = context_.group->Sum(
      {n, reward, task, length, response, judged.reasoning_sum, static_cast<double>(judged.parsed),
       n - static_cast<double>(selection.scored.size()), static_cast<double>(selection.informative),
       static_cast<double>(selection.subgroups), totals.loss, totals.clip_weighted,
       totals.ratio_weighted, totals.kl_weighted, totals.masked_weighted, totals.loss_tokens,
       static_cast<double>(judged.lag_sum)});
  if (!sums.ok()) return sums.status();
  const std::vector<double>& g = *sums;
  const double samples = std::max(g[0], 1.0);
  record["rank_samples"] = batch.samples.size();
  record["samples"] = static_cast<int64_t>(g[0]);
  record["reward_mean"] = g[1] / samples;
  record["reward_task_mean"] = g[2] / samples;
  record["reward_length_mean"] = g[3] / samples;
  record["response_length_mean"] = g[4] / samples;
  record["reasoning_length_mean"] = g[5] / samples;
  record["parse_rate"] = g[6] / samples;
  record["skipped_samples"] = static_cast<int64_t>(g[7]);
  record["informative_subgroup_fraction"] = g[8] / std::max(g[9], 1.0);
  record["loss"] = g[10];  // each rank's part is already over the global normaliser
  if (selection.weighted_tokens > 0) {
    record["clip_fraction"] = g[11] / selection.weighted_tokens;
    record["ratio_mean"] = g[12] / selection.weighted_tokens;
    if (reference_ != nullptr) record["kl"] = g[13] / selection.weighted_tokens;
  }
  record["masked_token_fraction"] = g[15] > 0 ? g[14] / g[15] : 0.0;
  record["staleness_mean"] = g[16] / samples;
  return absl::OkStatus();
}

}  // namespace loom::train
