#include "train/grpo_step.h"

#include <algorithm>
#include <map>

#include <ATen/core/grad_mode.h>

#include "loom/algo/advantages.h"
#include "loom/algo/policy_loss.h"
#include "loom/config/check.h"
#include "loom/metrics/progress.h"
#include "train/grpo_stage.h"
#include "train/micro_batch.h"

namespace loom::train {

// Which samples the step scores, with their advantages.
struct GrpoTrainer::Selection {
  at::Tensor advantages;       // [n] float32, centred within subgroups
  std::vector<size_t> scored;  // indices into the batch
  int64_t informative = 0;     // subgroups whose rewards differ
  int64_t subgroups = 0;
  double weighted_tokens = 0;  // the token-level mean's normaliser
};

GrpoTrainer::Selection GrpoTrainer::Select(const std::vector<TrainingSample>& samples,
                                           const std::vector<float>& rewards) const {
  const config::RunConfig& config = run_.config;
  const size_t n = samples.size();
  // Subgroups whose rewards all agree carry no gradient (advantage 0).
  std::map<uint64_t, std::pair<float, float>> reward_range;
  std::vector<int64_t> subgroup_ids;
  for (size_t i = 0; i < n; ++i) {
    auto it =
        reward_range.emplace(samples[i].info.subgroup_id, std::make_pair(rewards[i], rewards[i]))
            .first;
    it->second.first = std::min(it->second.first, rewards[i]);
    it->second.second = std::max(it->second.second, rewards[i]);
    subgroup_ids.push_back(static_cast<int64_t>(samples[i].info.subgroup_id));
  }
  Selection selection;
  if (n == 0) return selection;
  selection.subgroups = static_cast<int64_t>(reward_range.size());
  for (const auto& [id, range] : reward_range) selection.informative += range.first < range.second;
  selection.advantages =
      algo::SubgroupAdvantages(at::tensor(rewards, at::kFloat), at::tensor(subgroup_ids, at::kLong),
                               config.grpo.scale_by_std);
  // The samples the step scores: all, or only those of informative subgroups.
  for (size_t i = 0; i < n; ++i) {
    const auto& range = reward_range.at(samples[i].info.subgroup_id);
    if (!config.grpo.SkipsUninformative() || range.first < range.second) {
      selection.scored.push_back(i);
    }
  }
  return selection;
}

bool GrpoTrainer::SplitSequences(const std::vector<TrainingSample>& samples, Selection& selection,
                                 std::vector<TrainingSample>& split) {
  const bool any = std::any_of(samples.begin(), samples.end(), [](const TrainingSample& s) {
    return !s.info.sequences.empty() || s.state.length() == 0;
  });
  if (!any) return false;
  std::vector<int64_t> owner;  // each sequence's sample
  std::vector<size_t> scored;
  size_t next_scored = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    const bool is_scored =
        next_scored < selection.scored.size() && selection.scored[next_scored] == i;
    next_scored += is_scored;
    const SampleEntry& info = samples[i].info;
    for (size_t k = 0; k <= info.sequences.size(); ++k) {
      TrainingSample sequence;
      sequence.state = k == 0 ? samples[i].state : info.sequences[k - 1];
      if (sequence.state.length() == 0) continue;  // an episode that made no call
      sequence.info = info;
      sequence.info.sequences.clear();
      if (is_scored) scored.push_back(split.size());
      owner.push_back(static_cast<int64_t>(i));
      split.push_back(std::move(sequence));
    }
  }
  selection.scored = std::move(scored);
  if (selection.advantages.defined()) {
    selection.advantages = selection.advantages.index_select(0, at::tensor(owner, at::kLong));
  }
  return true;
}

absl::StatusOr<algo::PolicyLossResult> GrpoTrainer::MicroBatchLoss(
    const std::vector<TrainingSample>& samples, const std::vector<size_t>& indices,
    double temperature, const Selection& selection, int64_t version) const {
  const PackedSamples packed = PackSamples(samples, indices);
  // Score at the temperature of the samples' behaviour log-probs.
  model::ScoreOptions score_options;
  score_options.temperature = temperature;
  auto scored = run_.model.Score(packed.shifted.batch, score_options);
  if (!scored.ok()) return scored.status();
  at::Tensor reference;
  if (reference_ != nullptr) {
    at::NoGradGuard no_grad;
    auto scored_reference = reference_->Score(packed.shifted.batch, score_options);
    if (!scored_reference.ok()) return scored_reference.status();
    reference = scored_reference->logprobs;
  }
  const at::Tensor advantages =
      algo::ExpandToTokens(selection.advantages.index_select(0, packed.index), packed.lengths);
  return policy_term_.Loss(packed, scored->logprobs, advantages, version,
                           std::max(selection.weighted_tokens, 1.0), reference);
}

absl::Status GrpoTrainer::Backward(const std::vector<TrainingSample>& samples,
                                   const Selection& selection, int64_t version,
                                   StepFigures& figures) const {
  for (const char* name : {"loss", "clip_weighted", "ratio_weighted", "kl_weighted",
                           "masked_weighted", "loss_tokens", "trained_tokens"}) {
    figures.Add(name, 0);  // every rank brings every name, even with nothing to score
  }
  for (const MicroBatch& micro :
       MicroBatches(samples, selection.scored, run_.config.train.micro_batch_tokens)) {
    for (size_t i : micro.samples) {
      figures.Add("trained_tokens", static_cast<double>(samples[i].state.length()));
    }
    auto loss = MicroBatchLoss(samples, micro.samples, micro.temperature, selection, version);
    if (!loss.ok()) return loss.status();
    loss->loss.backward();
    const auto weighted = static_cast<double>(loss->weighted_tokens);
    figures.Add("loss", loss->loss.item<double>());
    figures.Add("clip_weighted", loss->clip_fraction * weighted);
    figures.Add("ratio_weighted", loss->mean_ratio * weighted);
    figures.Add("kl_weighted", loss->kl * weighted);
    figures.Add("masked_weighted", loss->masked_fraction * static_cast<double>(loss->loss_tokens));
    figures.Add("loss_tokens", static_cast<double>(loss->loss_tokens));
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainedStep> GrpoTrainer::Train(const Batch& batch) {
  const double start = metrics::ProgressLine::SteadySeconds();
  const int64_t version = batch.policy_version;
  // Empty only on a rank whose samples were all lost to infrastructure: it
  // still takes part in the step's collectives.
  LOOM_CHECK(!batch.samples.empty() || run_.group != nullptr, "empty GRPO batch");
  const std::vector<algo::Verdict> verdicts =
      JudgeSamples(batch.samples, run_.tokenizer, think_end_id_, version);
  const algo::Rewards rewards = algo::RewardBatch(verdicts, &length_reward_);
  Selection selection = Select(batch.samples, rewards.total);
  const size_t skipped = batch.samples.size() - selection.scored.size();
  std::vector<TrainingSample> split;
  const std::vector<TrainingSample>& sequences =
      SplitSequences(batch.samples, selection, split) ? split : batch.samples;
  // One token-level mean over every rank's scored samples.
  auto weighted = WeightedTokensOverRanks(sequences, selection.scored, version,
                                          run_.config.async.mask_lag, run_.group);
  if (!weighted.ok()) return weighted.status();
  selection.weighted_tokens = *weighted;
  StepFigures figures;
  AddVerdicts(verdicts, rewards, figures);
  if (absl::Status s = Backward(sequences, selection, version, figures); !s.ok()) return s;
  auto applied = optimizer_.Step(batch.step);
  if (!applied.ok()) return applied.status();
  const double train_seconds = metrics::ProgressLine::SteadySeconds() - start;
  figures.Add("skipped", static_cast<double>(skipped));
  figures.Add("informative", static_cast<double>(selection.informative));
  figures.Add("subgroups", static_cast<double>(selection.subgroups));
  if (run_.group != nullptr) {
    if (absl::Status s = figures.SumOverRanks(*run_.group); !s.ok()) return s;
  }
  nlohmann::json record = StepLine(kGrpoStage, batch, *applied, figures, train_seconds);
  AddOwnFigures(figures, selection.weighted_tokens, record);
  record.update(Breakdowns(verdicts, rewards));
  AddHarnessBreakdown(verdicts, rewards, record);
  optimizer_.AddRankFigures(*applied, record);
  return TrainedStep{std::move(record), version + 1};
}

void GrpoTrainer::AddOwnFigures(const StepFigures& figures, double weighted_tokens,
                                nlohmann::json& record) const {
  record["reward_task_mean"] = figures.Per("reward_task", "samples");
  record["reward_length_mean"] = figures.Per("reward_length", "samples");
  record["reasoning_length_mean"] = figures.Per("reasoning_tokens", "samples");
  record["parse_rate"] = figures.Per("parsed", "samples");
  record["skipped_samples"] = static_cast<int64_t>(figures["skipped"]);
  record["informative_subgroup_fraction"] =
      figures["informative"] / std::max(figures["subgroups"], 1.0);
  record["masked_token_fraction"] = figures.Per("masked_weighted", "loss_tokens");
  // Ratios exist only for scored tokens: a step whose subgroups were all
  // uninformative (and skipped) has none.
  if (weighted_tokens > 0) {
    record["clip_fraction"] = figures["clip_weighted"] / weighted_tokens;
    record["ratio_mean"] = figures["ratio_weighted"] / weighted_tokens;
    if (reference_ != nullptr) record["kl"] = figures["kl_weighted"] / weighted_tokens;
  }
}

void GrpoTrainer::AddHarnessBreakdown(const std::vector<algo::Verdict>& verdicts,
                                      const algo::Rewards& rewards, nlohmann::json& record) const {
  std::map<std::string, std::string> harness;  // by dataset name
  for (const config::DatasetSection& dataset : run_.config.tasks.datasets) {
    if (dataset.environment == "sandbox") harness[dataset.name] = dataset.harness;
  }
  if (harness.empty()) return;
  MeanBy reward, length;
  for (size_t i = 0; i < verdicts.size(); ++i) {
    const auto it = harness.find(verdicts[i].dataset);
    if (it == harness.end()) continue;
    reward.Add(it->second, rewards.total[i]);
    length.Add(it->second, static_cast<double>(verdicts[i].response_tokens));
  }
  record["reward_by_harness"] = reward.Json();
  record["response_length_by_harness"] = length.Json();
}

nlohmann::json GrpoTrainer::Breakdowns(const std::vector<algo::Verdict>& verdicts,
                                       const algo::Rewards& rewards) {
  MeanBy reward_by_dataset, reward_by_effort, task_reward_by_effort;
  MeanBy length_by_dataset, length_by_effort, reasoning_by_effort;
  for (size_t i = 0; i < verdicts.size(); ++i) {
    const algo::Verdict& verdict = verdicts[i];
    const std::string effort = std::to_string(verdict.effort);
    reward_by_dataset.Add(verdict.dataset, rewards.total[i]);
    reward_by_effort.Add(effort, rewards.total[i]);
    task_reward_by_effort.Add(effort, rewards.task[i]);
    length_by_dataset.Add(verdict.dataset, static_cast<double>(verdict.response_tokens));
    length_by_effort.Add(effort, static_cast<double>(verdict.response_tokens));
    reasoning_by_effort.Add(effort, static_cast<double>(verdict.reasoning_tokens));
  }
  return {{"reward_by_dataset", reward_by_dataset.Json()},
          {"reward_by_effort", reward_by_effort.Json()},
          {"reward_task_by_effort", task_reward_by_effort.Json()},
          {"response_length_by_dataset", length_by_dataset.Json()},
          {"response_length_by_effort", length_by_effort.Json()},
          {"reasoning_length_by_effort", reasoning_by_effort.Json()}};
}

}  // namespace loom::train
