#pragma once
// What a trainer's step reports: its figures as named sums, summed over ranks
// in one collective, and the metrics line every async trainer writes (GRPO,
// OPD), built in one place from them. Private to the train module.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "loom/algo/judge.h"
#include "loom/dist/group.h"
#include "loom/tokenizer/tokenizer.h"
#include "loom/train/async_loop.h"
#include "loom/train/sample_table.h"
#include "loom/train/stage_optimizer.h"

namespace loom::train {

// A step's figures: named sums (samples, rewards, losses, token counts...)
// and this rank's maxima. Every rank adds the same names, zero where it has
// none, so one reduce sums them all.
class StepFigures {
 public:
  void Add(const std::string& name, double value) { sums_[name] += value; }
  void Max(const std::string& name, double value);

  // The sum over every rank once summed (this rank's before).
  double operator[](const std::string& name) const;
  // This rank's own sum.
  double Local(const std::string& name) const;
  // sum(name) / sum(by), 0 when sum(by) is 0.
  double Per(const std::string& name, const std::string& by) const;
  // This rank's maximum of `name` (0 when none was given).
  double Maximum(const std::string& name) const;
  // Whether the sums are over several ranks.
  bool summed() const { return summed_; }

  // Sums every figure over the ranks of `group`, in one collective (after a
  // small one that checks every rank added the same names: an error if not).
  absl::Status SumOverRanks(dist::Group& group);

 private:
  std::map<std::string, double> sums_, local_, maxima_;
  bool summed_ = false;
};

// Running (weighted) mean keyed by name, for "by dataset" / "by effort" metrics.
class MeanBy {
 public:
  void Add(const std::string& key, double value, double weight = 1);
  nlohmann::json Json() const;

 private:
  std::map<std::string, std::pair<double, double>> sums_;
};

// The verdicts of a step's samples, judged for a loss at policy version
// `version` (the lag of each is counted from it). `think_end_id`: the
// `</think>` token, or -1 (every generated token then counts as reasoning).
std::vector<algo::Verdict> JudgeSamples(const std::vector<TrainingSample>& samples,
                                        const tokenizer::Tokenizer& tokenizer, int64_t think_end_id,
                                        int64_t version);

// The tokens a loss at policy version `version` weighs in `samples[chosen]`
// (algo::WeightedTokens), summed over the ranks of `group` (null: this
// rank's): the normaliser of one token-level mean over the whole step.
absl::StatusOr<double> WeightedTokensOverRanks(const std::vector<TrainingSample>& samples,
                                               const std::vector<size_t>& chosen, int64_t version,
                                               int64_t mask_lag, dist::Group* group);

// Adds the judged batch's figures: samples, rewards, response and reasoning
// lengths, parses, lag, and the episodes among them.
void AddVerdicts(const std::vector<algo::Verdict>& verdicts, const algo::Rewards& rewards,
                 StepFigures& figures);

// The metrics line of an async trainer's step, what every one carries: the
// step, the optimizer's, the judged batch (rewards, lengths, staleness,
// episodes) and the loop (dispatch, throughput, time), at the version the
// step left (batch.policy_version + 1). The trainer adds its own figures to it.
nlohmann::json StepLine(const std::string& stage, const Batch& batch,
                        const StageOptimizer::Applied& applied, const StepFigures& figures,
                        double train_seconds);

}  // namespace loom::train
