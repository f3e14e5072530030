#include "train/step_figures.h"

#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "loom/algo/policy_loss.h"
#include "loom/config/check.h"

namespace loom::train {

void StepFigures::Max(const std::string& name, double value) {
  auto [it, added] = maxima_.emplace(name, value);
  if (!added) it->second = std::max(it->second, value);
}

double StepFigures::operator[](const std::string& name) const {
  auto it = sums_.find(name);
  return it == sums_.end() ? 0.0 : it->second;
}

double StepFigures::Local(const std::string& name) const {
  if (!summed_) return (*this)[name];
  auto it = local_.find(name);
  return it == local_.end() ? 0.0 : it->second;
}

double StepFigures::Per(const std::string& name, const std::string& by) const {
  const double total = (*this)[by];
  return total != 0 ? (*this)[name] / total : 0.0;
}

double StepFigures::Maximum(const std::string& name) const {
  auto it = maxima_.find(name);
  return it == maxima_.end() ? 0.0 : it->second;
}

absl::Status StepFigures::SumOverRanks(dist::Group& group) {
  // Every rank must bring the same names: a sum of vectors of another length
  // or order would mean nothing. Their count and a digest of them, exact in
  // a double, must agree (max == -min of the negated) before the one sum.
  std::string names;
  for (const auto& [name, value] : sums_) names += name + '\n';
  const auto digest = static_cast<double>(std::hash<std::string>()(names) >> 12);
  const auto count = static_cast<double>(sums_.size());
  auto agreed = group.Max({count, -count, digest, -digest});
  if (!agreed.ok()) return agreed.status();
  if ((*agreed)[0] != -(*agreed)[1] || (*agreed)[2] != -(*agreed)[3]) {
    return absl::InternalError(
        absl::StrCat("rank ", group.rank(), ": the ranks' step figures differ in their names"));
  }
  std::vector<double> values;
  for (const auto& [name, value] : sums_) values.push_back(value);
  auto summed = group.Sum(values);
  if (!summed.ok()) return summed.status();
  local_ = sums_;
  size_t i = 0;
  for (auto& [name, value] : sums_) value = (*summed)[i++];
  summed_ = true;
  return absl::OkStatus();
}

void MeanBy::Add(const std::string& key, double value, double weight) {
  auto& [sum, total] = sums_[key];
  sum += value * weight;
  total += weight;
}

nlohmann::json MeanBy::Json() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, sum_total] : sums_) {
    if (sum_total.second > 0) out[key] = sum_total.first / sum_total.second;
  }
  return out;
}

namespace {

// The policy version of the oldest generated token (`version` when none is older).
int64_t OldestVersion(const rollout::SampleState& state, int64_t version) {
  int64_t oldest = version;
  for (int64_t t = state.prompt_length; t < state.length(); ++t) {
    if (state.loss_mask[t]) oldest = std::min(oldest, state.versions[t]);
  }
  return oldest;
}

// An agent sample's task judgement: its episode's verdict. Episodes that
// failed for infrastructure reasons never get here (MaskInfrastructureFailures).
algo::Judgement JudgeEpisode(const rollout::SampleState& state,
                             const std::optional<agent::EpisodeOutcome>& outcome) {
  LOOM_CHECK(outcome.has_value(), "agent sample " << state.id << " without episode");
  LOOM_CHECK(!outcome->infrastructure, "agent sample " << state.id << " failed for infrastructure "
                                                       << "reasons; such samples are masked");
  algo::Judgement judgement;
  judgement.parsed = outcome->parsed();
  judgement.content = outcome->answer;
  judgement.reward = outcome->reward;
  return judgement;
}

}  // namespace

std::vector<algo::Verdict> JudgeSamples(const std::vector<TrainingSample>& samples,
                                        const tokenizer::Tokenizer& tokenizer, int64_t think_end_id,
                                        int64_t version) {
  std::vector<algo::Verdict> verdicts;
  for (const TrainingSample& sample : samples) {
    const rollout::SampleState& state = sample.state;
    algo::Verdict verdict;
    if (!sample.info.agent) {
      const std::vector<int64_t> completion(state.tokens.begin() + state.prompt_length,
                                            state.tokens.end());
      verdict.judgement = algo::JudgeCompletion(*sample.info.problem, completion, tokenizer);
      verdict.reasoning_tokens = algo::ReasoningLength(completion, think_end_id);
      verdict.response_tokens = static_cast<int64_t>(completion.size());
    } else {
      const std::optional<agent::EpisodeOutcome>& outcome = sample.info.outcome;
      verdict.judgement = JudgeEpisode(state, outcome);
      // Every sequence of the episode: a harness's has several.
      for (size_t k = 0; k <= sample.info.sequences.size(); ++k) {
        const rollout::SampleState& part = k == 0 ? state : sample.info.sequences[k - 1];
        verdict.reasoning_tokens += algo::MultiTurnReasoningLength(
            part.tokens, part.loss_mask, part.prompt_length, think_end_id);
        verdict.response_tokens += part.generated;
        verdict.lag = std::max(verdict.lag, version - OldestVersion(part, version));
      }
      verdict.episode = true;
      verdict.episode_steps = outcome->steps;
      verdict.broken = !outcome->repercussion.empty();
    }
    verdict.dataset = sample.info.problem->dataset;
    verdict.effort = sample.info.effort;
    verdict.subgroup = sample.info.subgroup_id;
    if (!sample.info.agent) verdict.lag = version - OldestVersion(state, version);
    verdicts.push_back(std::move(verdict));
  }
  return verdicts;
}

absl::StatusOr<double> WeightedTokensOverRanks(const std::vector<TrainingSample>& samples,
                                               const std::vector<size_t>& chosen, int64_t version,
                                               int64_t mask_lag, dist::Group* group) {
  double weighted = 0;
  for (size_t i : chosen) {
    const rollout::SampleState& state = samples[i].state;
    weighted += static_cast<double>(
        algo::WeightedTokens(state.loss_mask, state.versions, version, mask_lag));
  }
  if (group == nullptr) return weighted;
  auto total = group->Sum({weighted});
  if (!total.ok()) return total.status();
  return (*total)[0];
}

void AddVerdicts(const std::vector<algo::Verdict>& verdicts, const algo::Rewards& rewards,
                 StepFigures& figures) {
  figures.Add("samples", static_cast<double>(verdicts.size()));
  for (const char* name :
       {"reward", "reward_task", "reward_length", "response_tokens", "reasoning_tokens", "parsed",
        "lag", "episodes", "episode_steps", "episodes_broken"}) {
    figures.Add(name, 0);  // every rank brings every name, even with no sample
  }
  for (size_t i = 0; i < verdicts.size(); ++i) {
    const algo::Verdict& verdict = verdicts[i];
    figures.Add("reward", rewards.total[i]);
    figures.Add("reward_task", rewards.task[i]);
    figures.Add("reward_length", rewards.length[i]);
    figures.Add("response_tokens", static_cast<double>(verdict.response_tokens));
    figures.Add("reasoning_tokens", static_cast<double>(verdict.reasoning_tokens));
    figures.Add("parsed", verdict.judgement.parsed ? 1 : 0);
    figures.Add("lag", static_cast<double>(verdict.lag));
    figures.Max("lag", static_cast<double>(verdict.lag));
    if (verdict.episode) {
      figures.Add("episodes", 1);
      figures.Add("episode_steps", static_cast<double>(verdict.episode_steps));
      figures.Add("episodes_broken", verdict.broken ? 1 : 0);
    }
  }
}

nlohmann::json StepLine(const std::string& stage, const Batch& batch,
                        const StageOptimizer::Applied& applied, const StepFigures& figures,
                        double train_seconds) {
  const RolloutTotals& rollout = batch.rollout;
  const double rollout_tokens = static_cast<double>(rollout.decode_tokens + rollout.prefill_tokens);
  const double trained_tokens = figures.Local("trained_tokens");
  nlohmann::json line{
      {"stage", stage},
      {"step", batch.step + 1},
      {"version", batch.policy_version + 1},
      {"loss", figures["loss"]},  // each rank's part is already over the global normaliser
      {"lr", applied.lr},
      {"grad_norm", applied.grad_norm},
      {"samples", static_cast<int64_t>(figures["samples"])},
      {"reward_mean", figures.Per("reward", "samples")},
      {"response_length_mean", figures.Per("response_tokens", "samples")},
      {"staleness_mean", figures.Per("lag", "samples")},
      {"staleness_max", static_cast<int64_t>(figures.Maximum("lag"))},
      {"samples_failed", batch.dispatch.samples_failed},
      {"problems_skipped", batch.dispatch.problems_skipped},
      {"inflight_mean", batch.dispatch.inflight_mean},
      {"inflight_min", batch.dispatch.inflight_min},
      {"inflight_max", batch.dispatch.inflight_max},
      {"rollout_tokens_per_s", rollout.seconds > 0 ? rollout_tokens / rollout.seconds : 0.0},
      {"train_tokens_per_s", trained_tokens / std::max(train_seconds, 1e-9)},
      {"time_rollout_s", rollout.seconds},
      {"time_train_s", train_seconds}};
  // Breakdowns by dataset, effort or teacher stay this rank's.
  if (figures.summed()) line["rank_samples"] = static_cast<int64_t>(figures.Local("samples"));
  if (figures["episodes"] > 0) {
    line["episodes"] = static_cast<int64_t>(figures["episodes"]);
    line["episodes_broken"] = static_cast<int64_t>(figures["episodes_broken"]);
    line["episode_steps_mean"] = figures.Per("episode_steps", "episodes");
  }
  return line;
}

}  // namespace loom::train
