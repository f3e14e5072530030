#include "loom/train/opd_step.h"

#include <algorithm>
#include <map>

#include <ATen/core/grad_mode.h>

#include "loom/algo/advantages.h"
#include "loom/algo/policy_loss.h"
#include "loom/config/check.h"
#include "loom/metrics/progress.h"
#include "loom/model/distill.h"
#include "loom/train/batching.h"
#include "train/micro_batch.h"
#include "train/opd_stage.h"
#include "train/step_figures.h"

namespace loom::train {

struct OpdTrainer::Step {
  int64_t version = 0;
  double normalizer = 1;  // weighted tokens of the whole batch: one token-level mean
  at::Tensor advantages;  // [n] verifier-reward advantages (opd.reward_weight > 0)
  // The judged batch's, and the loss's: "loss", "kl_weighted" (per-token KL
  // summed over weighted tokens), "weighted_tokens", "loss_tokens",
  // "trained_tokens".
  StepFigures figures;
  double teacher_seconds = 0, student_seconds = 0;
  MeanBy kl_by_dataset, kl_by_teacher;
};

// What a micro-batch's teacher segments leave for the student's side.
struct OpdTrainer::Distilled {
  at::Tensor hidden;            // full: the student's hidden states at the rows, a leaf
  at::Tensor kl;                // [N] float64 per-row KL (detached)
  at::Tensor teacher_logprobs;  // sampled: [T] the teachers' log-probs of the targets
  double kl_loss = 0;           // full: sum of the segments' losses
};

namespace {

double Seconds() { return metrics::ProgressLine::SteadySeconds(); }

// The samples' indices grouped by teacher, resident teachers first (least
// recently used first, so none is evicted before its turn).
std::vector<size_t> ByTeacher(const std::vector<TrainingSample>& samples,
                              const algo::TeacherPool& pool) {
  std::map<int, std::vector<size_t>> groups;
  for (size_t i = 0; i < samples.size(); ++i) {
    const int teacher = samples[i].info.teacher;
    LOOM_CHECK(teacher >= 0 && teacher < pool.size(),
               "opd sample " << samples[i].state.id << " has no teacher");
    groups[teacher].push_back(i);
  }
  std::vector<size_t> ordered;
  for (int slot : pool.ResidentSlots()) {
    auto it = groups.find(slot);
    if (it == groups.end()) continue;
    ordered.insert(ordered.end(), it->second.begin(), it->second.end());
    groups.erase(it);
  }
  for (const auto& [slot, indices] : groups)
    ordered.insert(ordered.end(), indices.begin(), indices.end());
  return ordered;
}

}  // namespace

// One micro-batch: its samples packed, the rows of T the loss weighs
// (ascending), the sample each such row belongs to and each sample's first
// token in T.
struct OpdTrainer::Micro {
  const std::vector<size_t>& indices;
  double temperature;
  PackedSamples packed;
  at::Tensor weights;  // [T] float32: loss mask x fresh
  at::Tensor rows;     // [N] int64
  at::Tensor owner;    // [N] int64: the sample (0..n-1) of each row
  std::vector<int64_t> first_token;

  Micro(const std::vector<TrainingSample>& samples, const std::vector<size_t>& indices,
        double temperature, int64_t version, int64_t mask_lag)
      : indices(indices), temperature(temperature), packed(PackSamples(samples, indices)) {
    weights =
        algo::PolicyTokenWeights(packed.shifted.target_weight, packed.versions, version, mask_lag);
    rows = weights.gt(0).nonzero().squeeze(1);
    std::vector<int64_t> owner_of_token;
    first_token = {0};
    for (size_t k = 0; k < packed.lengths.size(); ++k) {
      owner_of_token.insert(owner_of_token.end(), packed.lengths[k], static_cast<int64_t>(k));
      first_token.push_back(first_token.back() + packed.lengths[k]);
    }
    owner = at::tensor(owner_of_token, at::kLong).index_select(0, rows);
  }
};

absl::Status OpdTrainer::MicroBatchBackward(const std::vector<TrainingSample>& samples,
                                            const std::vector<size_t>& indices, double temperature,
                                            Step& step) const {
  const config::RunConfig& config = context_.config;
  Micro micro(samples, indices, temperature, step.version, config.async.mask_lag);
  for (int64_t length : micro.packed.lengths) {
    step.figures.Add("trained_tokens", static_cast<double>(length));
  }
  step.figures.Add("loss_tokens", micro.packed.shifted.target_weight.sum().item<double>());
  step.figures.Add("weighted_tokens", static_cast<double>(micro.rows.size(0)));
  const bool full = config.opd.FullKl();

  // The student's stack runs once for the whole micro-batch, with its
  // recorded routing as in GRPO. Full KL needs its final hidden states at the
  // weighted rows, and its target log-probs only for a policy-loss term.
  double start = Seconds();
  model::PackedBatch batch = micro.packed.shifted.batch;
  if (full && config.opd.reward_weight == 0) batch.targets = at::Tensor();
  model::ScoreOptions options;
  options.temperature = temperature;
  if (full) options.hidden_rows = micro.rows;
  auto scored = context_.model.Score(batch, options);
  if (!scored.ok()) return scored.status();
  step.student_seconds += Seconds() - start;

  // Full KL: each teacher segment's KL is backpropagated at once into a
  // detached copy of the hidden states (so its teacher can go), and the
  // stack's backward runs once, from their accumulated gradient.
  Distilled distilled;
  if (full) distilled.hidden = scored->hidden.detach().requires_grad_(true);
  if (absl::Status s = DistilSegments(samples, micro, distilled, step); !s.ok()) return s;

  start = Seconds();
  at::Tensor loss = at::zeros({}, scored->logprobs.options());
  if (full && distilled.hidden.grad().defined()) {
    loss = (scored->hidden * distilled.hidden.grad()).sum();
  }
  if (!full || config.opd.reward_weight > 0) {
    at::Tensor policy_loss =
        PolicyLoss(micro, scored->logprobs, Advantages(micro, distilled, step), step);
    step.figures.Add("loss", policy_loss.item<double>());
    loss = loss + policy_loss;
  }
  if (loss.requires_grad()) loss.backward();
  step.figures.Add("loss", distilled.kl_loss);
  step.student_seconds += Seconds() - start;
  RecordKl(samples, micro, distilled.kl, step);
  return absl::OkStatus();
}

at::Tensor OpdTrainer::Advantages(const Micro& micro, Distilled& distilled,
                                  const Step& step) const {
  at::Tensor advantages = at::zeros_like(micro.packed.behaviour);
  if (!context_.config.opd.FullKl()) {
    // The sampled form: log p_teacher(y) - log p_behaviour(y), and its
    // negative the sampled token's KL estimate.
    const at::Tensor sampled =
        (distilled.teacher_logprobs - micro.packed.behaviour) * micro.weights;
    advantages = advantages + sampled;
    distilled.kl = -sampled.index_select(0, micro.rows).to(at::kDouble);
  }
  const double reward_weight = context_.config.opd.reward_weight;
  if (reward_weight > 0) {
    advantages = advantages + reward_weight * algo::ExpandToTokens(step.advantages.index_select(
                                                                       0, micro.packed.index),
                                                                   micro.packed.lengths);
  }
  return advantages;
}

absl::Status OpdTrainer::DistilSegments(const std::vector<TrainingSample>& samples,
                                        const Micro& micro, Distilled& distilled,
                                        Step& step) const {
  const bool full = context_.config.opd.FullKl();
  const std::vector<size_t>& indices = micro.indices;
  const model::PackedBatch& batch = micro.packed.shifted.batch;
  const int64_t rows = micro.rows.size(0);
  const int64_t* owner = micro.owner.data_ptr<int64_t>();
  distilled.kl = at::zeros({rows}, at::kDouble);
  distilled.teacher_logprobs = at::zeros({batch.tokens.size(0)}, at::kFloat);
  int64_t row_begin = 0;
  for (size_t a = 0; a < indices.size();) {
    // Samples [a, b) share a teacher; so do rows [row_begin, row_end).
    const int slot = samples[indices[a]].info.teacher;
    size_t b = a;
    while (b < indices.size() && samples[indices[b]].info.teacher == slot) ++b;
    int64_t row_end = row_begin;
    while (row_end < rows && owner[row_end] < static_cast<int64_t>(b)) ++row_end;

    // The teacher: its own routing, no gradients, the student's temperature.
    double start = Seconds();
    auto teacher = teachers_.Acquire(slot);
    if (!teacher.ok()) return teacher.status();
    const int64_t offset = micro.first_token[a];
    const int64_t count = micro.first_token[b] - offset;
    model::PackedBatch segment;
    segment.tokens = batch.tokens.narrow(0, offset, count);
    segment.lengths.assign(micro.packed.lengths.begin() + a, micro.packed.lengths.begin() + b);
    model::ScoreOptions options;
    options.temperature = micro.temperature;
    if (full) {
      options.hidden_rows = micro.rows.narrow(0, row_begin, row_end - row_begin) - offset;
    } else {
      segment.targets = batch.targets.narrow(0, offset, count);
    }
    absl::StatusOr<model::ScoreResult> scored;
    {
      at::NoGradGuard no_grad;
      scored = (*teacher)->Score(segment, options);
    }
    if (!scored.ok()) return scored.status();
    step.teacher_seconds += Seconds() - start;

    start = Seconds();
    if (full) {
      model::TeacherRows teacher_rows{
          at::arange(row_begin, row_end, at::kLong), scored->hidden, (*teacher)->LmHead(), {}};
      auto kl = model::ReverseKl(distilled.hidden, context_.model.LmHead(), teacher_rows,
                                 micro.temperature);
      if (!kl.ok()) return kl.status();
      at::Tensor segment_loss = kl->sum() / step.normalizer;
      segment_loss.backward();
      distilled.kl_loss += segment_loss.item<double>();
      distilled.kl.narrow(0, row_begin, row_end - row_begin).copy_(kl->detach().to(at::kCPU));
    } else {
      distilled.teacher_logprobs.narrow(0, offset, count).copy_(scored->logprobs.to(at::kCPU));
    }
    step.student_seconds += Seconds() - start;
    row_begin = row_end;
    a = b;
  }
  return absl::OkStatus();
}

at::Tensor OpdTrainer::PolicyLoss(const Micro& micro, const at::Tensor& logprobs,
                                  const at::Tensor& advantages, const Step& step) const {
  const config::RunConfig& config = context_.config;
  const at::Device device = logprobs.device();
  algo::PolicyLossInputs inputs;
  inputs.logprobs = logprobs;
  inputs.behaviour_logprobs = micro.packed.behaviour.to(device);
  inputs.advantages = advantages.to(device);
  inputs.loss_mask = micro.packed.shifted.target_weight.to(device);
  inputs.versions = micro.packed.versions.to(device);
  algo::PolicyLossOptions options;
  options.clip_low = config.grpo.clip_low;
  options.clip_high = config.grpo.clip_high;
  options.policy_version = step.version;
  options.mask_lag = config.async.mask_lag;
  options.normalizer = step.normalizer;
  return algo::PolicyLoss(inputs, options).loss;
}

void OpdTrainer::RecordKl(const std::vector<TrainingSample>& samples, const Micro& micro,
                          const at::Tensor& kl, Step& step) const {
  step.figures.Add("kl_weighted", kl.sum().item<double>());
  const int64_t n = static_cast<int64_t>(micro.indices.size());
  const at::Tensor sums = at::zeros({n}, at::kDouble).index_add_(0, micro.owner, kl);
  const at::Tensor counts = at::bincount(micro.owner, {}, n);
  for (int64_t k = 0; k < n; ++k) {
    const double count = static_cast<double>(counts[k].item<int64_t>());
    if (count == 0) continue;
    const SampleEntry& info = samples[micro.indices[k]].info;
    const double mean = sums[k].item<double>() / count;
    step.kl_by_dataset.Add(info.problem->dataset, mean, count);
    step.kl_by_teacher.Add(teachers_.name(info.teacher), mean, count);
  }
}

absl::StatusOr<double> OpdTrainer::Normalizer(const std::vector<TrainingSample>& samples,
                                              int64_t version) const {
  double weighted = 0;
  for (const TrainingSample& sample : samples) {
    weighted += static_cast<double>(algo::WeightedTokens(
        sample.state.loss_mask, sample.state.versions, version, context_.config.async.mask_lag));
  }
  if (context_.group != nullptr) {
    // Several ranks: one token-level mean over every rank's samples.
    auto total = context_.group->Sum({weighted});
    if (!total.ok()) return total.status();
    weighted = (*total)[0];
  }
  return std::max(weighted, 1.0);
}

absl::StatusOr<TrainedStep> OpdTrainer::Train(const Batch& batch) {
  const double start = Seconds();
  const config::RunConfig& config = context_.config;
  const std::vector<TrainingSample>& samples = batch.samples;
  LOOM_CHECK(!samples.empty(), "empty OPD batch");
  Step step;
  step.version = context_.policy_version;
  // One token-level mean over the batch: count its weighted tokens first.
  auto normalizer = Normalizer(samples, step.version);
  if (!normalizer.ok()) return normalizer.status();
  step.normalizer = *normalizer;
  // Verifier rewards: always reported; subgroup advantages when they are trained on.
  const std::vector<algo::Verdict> verdicts =
      JudgeSamples(samples, context_.tokenizer, context_.special_tokens.think_end, step.version);
  const algo::Rewards rewards = algo::RewardBatch(verdicts, nullptr);
  AddVerdicts(verdicts, rewards, step.figures);
  for (const char* name : {"loss", "kl_weighted", "weighted_tokens", "loss_tokens"}) {
    step.figures.Add(name, 0);  // every rank brings every name
  }
  if (config.opd.reward_weight > 0) {
    std::vector<int64_t> subgroups;
    for (const algo::Verdict& verdict : verdicts) {
      subgroups.push_back(static_cast<int64_t>(verdict.subgroup));
    }
    step.advantages =
        algo::SubgroupAdvantages(at::tensor(rewards.total, at::kFloat),
                                 at::tensor(subgroups, at::kLong), config.grpo.scale_by_std);
  }
  const algo::TeacherPoolStats before = teachers_.stats();
  // Samples in teacher order (a teacher spanning two micro-batches is still
  // resident for the second: it was the last one used).
  for (const MicroBatch& micro :
       MicroBatches(samples, ByTeacher(samples, teachers_), config.train.micro_batch_tokens)) {
    if (absl::Status s = MicroBatchBackward(samples, micro.samples, micro.temperature, step);
        !s.ok()) {
      return s;
    }
  }
  auto applied = optimizer_.Step(batch.step, context_.policy_version);
  if (!applied.ok()) return applied.status();
  const double train_seconds = Seconds() - start;
  if (context_.group != nullptr) {
    if (absl::Status s = step.figures.SumOverRanks(*context_.group); !s.ok()) return s;
  }
  nlohmann::json record = Record(batch, step, *applied, train_seconds);
  AddTeacherFigures(before, record);
  MeanBy reward_by_dataset;
  for (size_t i = 0; i < verdicts.size(); ++i) {
    reward_by_dataset.Add(verdicts[i].dataset, rewards.total[i]);
  }
  record["reward_by_dataset"] = reward_by_dataset.Json();
  optimizer_.AddRankFigures(*applied, record);
  return TrainedStep{std::move(record), context_.policy_version};
}

void OpdTrainer::AddTeacherFigures(const algo::TeacherPoolStats& before,
                                   nlohmann::json& record) const {
  const algo::TeacherPoolStats& after = teachers_.stats();
  record["teacher_loads"] = after.loads - before.loads;
  record["teacher_evictions"] = after.evictions - before.evictions;
  record["teacher_load_s"] = after.load_seconds - before.load_seconds;
  record["teachers_resident"] = teachers_.ResidentSlots().size();
}

nlohmann::json OpdTrainer::Record(const Batch& batch, const Step& step,
                                  const StageOptimizer::Applied& applied,
                                  double train_seconds) const {
  const StepFigures& figures = step.figures;
  nlohmann::json record =
      StepLine(kOpdStage, batch, context_.policy_version, applied, figures, train_seconds);
  record["estimator"] = context_.config.opd.estimator;
  record["kl"] = figures.Per("kl_weighted", "weighted_tokens");
  record["kl_by_dataset"] = step.kl_by_dataset.Json();
  record["kl_by_teacher"] = step.kl_by_teacher.Json();
  record["masked_token_fraction"] =
      figures["loss_tokens"] > 0 ? 1.0 - figures.Per("weighted_tokens", "loss_tokens") : 0.0;
  record["time_teacher_s"] = step.teacher_seconds;
  record["time_student_s"] = step.student_seconds;
  return record;
}

}  // namespace loom::train
