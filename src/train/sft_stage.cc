#include "train/sft_stage.h"

#include <unistd.h>

#include <chrono>
#include <random>
#include <sstream>

#include <spdlog/spdlog.h>

#include "loom/algo/sft_loss.h"
#include "loom/dispatch/dispatcher.h"
#include "loom/metrics/progress.h"
#include "loom/rpc/sandbox_clients.h"
#include "loom/train/batching.h"
#include "loom/train/control.h"
#include "loom/train/evaluator.h"
#include "loom/train/live_config.h"
#include "loom/train/stage_optimizer.h"
#include "train/encoding.h"
#include "train/stage_checkpoint.h"

namespace loom::train {
namespace {

// Picks datasets by their live weight (inactive ones not at all) and walks
// each one's training problems in order; the SFT data cursor is (rng state,
// per-dataset index).
class SftSampler {
 public:
  explicit SftSampler(const TrainContext& context)
      : context_(context),
        rng_(static_cast<uint64_t>(context.config.run.seed) * 7919 + 17),
        next_index_(context.datasets.size(), 0) {}

  absl::StatusOr<SftExample> Next() {
    std::vector<double> weights;
    const config::TasksSection& tasks = context_.live.config().tasks;
    for (const dispatch::DatasetQuota& d : dispatch::QuotasFromConfig(tasks)) {
      weights.push_back(d.weight);
    }
    std::discrete_distribution<size_t> pick(weights.begin(), weights.end());
    const size_t d = pick(rng_);
    const config::EffortSection& efforts = context_.config.effort;
    const int effort = efforts.DrawSftEffort(rng_);
    tasks::Problem problem = context_.datasets[d]->Train(next_index_[d]++);
    const int shown = efforts.PromptEffort(effort);
    if (tasks.datasets[d].environment == "sandbox") {
      return EncodeAgentSftExample(problem, tasks.datasets[d].kind,
                                   tasks.datasets[d].demonstration_slip_fraction,
                                   rpc::ScaffoldOptionsFrom(context_.config.sandbox), shown,
                                   context_.tokenizer, context_.special_tokens.eos);
    }
    return EncodeSftExample(problem, shown, context_.tokenizer, tasks.datasets[d].restate_effort);
  }

  // The next `n` examples.
  absl::StatusOr<std::vector<SftExample>> NextBatch(int n) {
    std::vector<SftExample> examples;
    for (int i = 0; i < n; ++i) {
      auto example = Next();
      if (!example.ok()) return example.status();
      examples.push_back(*std::move(example));
    }
    return examples;
  }

  // The data cursor, for checkpoints.
  SftCursor Export() const {
    std::ostringstream rng;
    rng << rng_;
    return {rng.str(), next_index_};
  }
  absl::Status Import(const SftCursor& cursor) {
    std::istringstream rng(cursor.rng);
    rng >> rng_;
    if (rng.fail() || cursor.next_index.size() != next_index_.size()) {
      return absl::DataLossError("checkpoint SFT cursor does not match this config's datasets");
    }
    next_index_ = cursor.next_index;
    return absl::OkStatus();
  }

 private:
  const TrainContext& context_;
  std::mt19937_64 rng_;
  std::vector<uint64_t> next_index_;
};

// One SFT optimizer step on `examples` (the whole batch, the same on every
// rank): next-token loss on the references, micro-batched, a token-level
// mean over the whole batch. Each rank takes the backward pass of its
// contiguous share of the examples; the optimizer sums the gradients.
// Returns its metrics line.
absl::StatusOr<nlohmann::json> SftStep(TrainContext& context, StageOptimizer& optimizer,
                                       const std::vector<SftExample>& examples, int64_t step) {
  const double start = metrics::ProgressLine::SteadySeconds();
  const size_t n = examples.size(), rank = static_cast<size_t>(context.rank()),
               ranks = static_cast<size_t>(context.world_size());
  const size_t first = n * rank / ranks, end = n * (rank + 1) / ranks;
  std::vector<int64_t> lengths;
  int64_t loss_tokens = 0, tokens = 0, rank_tokens = 0;
  for (size_t i = 0; i < n; ++i) {
    const SftExample& e = examples[i];
    if (i >= first && i < end) {
      lengths.push_back(static_cast<int64_t>(e.tokens.size()));
      rank_tokens += lengths.back();
    }
    tokens += static_cast<int64_t>(e.tokens.size());
    for (size_t t = 1; t < e.loss_mask.size(); ++t) loss_tokens += e.loss_mask[t];
  }
  double loss_sum = 0;
  for (const auto& group : SplitByTokens(lengths, context.config.train.micro_batch_tokens)) {
    std::vector<const std::vector<int64_t>*> seqs;
    std::vector<const std::vector<uint8_t>*> masks;
    for (size_t i : group) {
      seqs.push_back(&examples[first + i].tokens);
      masks.push_back(&examples[first + i].loss_mask);
    }
    ShiftedBatch shifted = TeacherForcing(seqs, masks);
    auto scored = context.model.Score(shifted.batch);
    if (!scored.ok()) return scored.status();
    // The weights are built on the CPU; the loss runs where the log-probs are.
    const at::Tensor target_weight = shifted.target_weight.to(scored->logprobs.device());
    algo::SftLossResult loss =
        algo::SftLoss(scored->logprobs, target_weight, static_cast<double>(loss_tokens));
    loss.loss.backward();
    loss_sum += loss.loss.item<double>();
  }
  auto applied = optimizer.Step(step);
  if (!applied.ok()) return applied.status();
  ++context.policy_version;  // the SFT stage counts the run's versions while it runs
  if (context.group != nullptr) {
    auto summed = context.group->Sum({loss_sum});
    if (!summed.ok()) return summed.status();
    loss_sum = (*summed)[0];
  }
  const double seconds = metrics::ProgressLine::SteadySeconds() - start;
  nlohmann::json record{{"stage", kSftStage},
                        {"step", step + 1},
                        {"version", context.policy_version},
                        {"loss", loss_sum},
                        {"lr", applied->lr},
                        {"grad_norm", applied->grad_norm},
                        {"tokens", tokens},
                        {"loss_tokens", loss_tokens},
                        {"train_tokens_per_s", tokens / std::max(seconds, 1e-9)},
                        {"step_seconds", seconds}};
  if (context.group != nullptr) record["rank_tokens"] = rank_tokens;
  optimizer.AddRankFigures(*applied, record);  // after the timing
  return record;
}

}  // namespace

absl::Status RunSftStage(TrainContext& context) {
  const config::SftStageSection& sft = context.config.train.sft;
  StageOptimizer optimizer(context.model, sft, context.group, context.bucket_bytes());
  SftSampler sampler(context);
  metrics::ProgressLine progress(context.rank() == 0 ? stdout : nullptr,
                                 {static_cast<bool>(::isatty(1)), 0.2, 30.0});
  int64_t first_step = 0;
  SftCursor cursor;
  auto resumed = RestoreSft(context, optimizer.adamw(), cursor, first_step);
  if (!resumed.ok()) return resumed.status();
  if (*resumed) {
    if (absl::Status s = sampler.Import(cursor); !s.ok()) return s;
  } else if (absl::Status s = context.LogEvaluation(kSftStage, 0); !s.ok()) {
    return s;
  }

  for (int64_t step = first_step; step < sft.steps; ++step) {
    if (context.control != nullptr) context.control->Poll(context.policy_version);
    if (absl::Status s = SftBoundary(context, optimizer.adamw(), sampler.Export(), step, false);
        !s.ok()) {
      return s;
    }
    auto examples = sampler.NextBatch(sft.batch_sequences);
    if (!examples.ok()) return examples.status();
    auto record = SftStep(context, optimizer, *examples, step);
    if (!record.ok()) return record.status();
    if (absl::Status s = context.metrics.Write(*record); !s.ok()) return s;
    char text[160];
    std::snprintf(text, sizeof text, "sft step %lld | loss %.4f | %.0f tok/s",
                  static_cast<long long>(step + 1), (*record)["loss"].get<double>(),
                  (*record)["train_tokens_per_s"].get<double>());
    progress.Update(text, step + 1, sft.steps, context.run_eta.Text(context.policy_version));
    const bool last = step + 1 == sft.steps;
    const int64_t eval_every = context.live.config().tasks.eval_every;
    if (last || (eval_every > 0 && (step + 1) % eval_every == 0)) {
      progress.Finish();
      if (absl::Status s = context.LogEvaluation(kSftStage, step + 1); !s.ok()) return s;
    }
    if (absl::Status s = SftBoundary(context, optimizer.adamw(), sampler.Export(), step + 1, true);
        !s.ok()) {
      return s;
    }
  }
  progress.Finish();
  return absl::OkStatus();
}

}  // namespace loom::train
