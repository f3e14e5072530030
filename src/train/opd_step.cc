#include "loom/train/opd_step.h"

#include <algorithm>
#include <map>
#include <numeric>

#include <ATen/core/grad_mode.h>

#include "loom/algo/advantages.h"
#include "loom/algo/policy_loss.h"
#include "loom/config/check.h"
#include "loom/metrics/progress.h"
#include "loom/model/distill.h"
#include "loom/train/batching.h"
#include "train/loss_terms.h"
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

// One teacher's part of a micro-batch: samples [a, b) of micro.indices,
// rows [row_begin, row_end) of micro.rows, tokens [offset, offset + count) of T.
struct OpdTrainer::Segment {
  int slot = -1;
  size_t a = 0, b = 0;
  int64_t row_begin = 0, row_end = 0, offset = 0, count = 0;
};

// How the distillation term is taken (opd.estimator), chosen once: what the
// student's and each teacher's scoring must give, and how the teachers'
// scores become the student's loss.
class OpdTrainer::Distiller {
 public:
  virtual ~Distiller() = default;
  // Sets up the student's scoring of the micro-batch.
  virtual void ScoreStudent(const Micro& micro, model::PackedBatch& batch,
                            model::ScoreOptions& options) const = 0;
  // Sets up a teacher's scoring of its segment.
  virtual void ScoreTeacher(const Micro& micro, const Segment& segment, model::PackedBatch& batch,
                            model::ScoreOptions& options) const = 0;
  // Takes a teacher's scores of its segment (`head`: the teacher's LM head).
  virtual absl::Status Take(const Micro& micro, const Segment& segment,
                            const model::ScoreResult& scores, const at::Tensor& head,
                            double normalizer, Distilled& distilled) const = 0;
  // Once every segment is in: the student's distillation loss to
  // backpropagate, with the term's part of the per-token `advantages` of the
  // policy loss; leaves each row's KL in distilled.kl.
  virtual at::Tensor StudentLoss(const Micro& micro, const model::ScoreResult& student,
                                 Distilled& distilled, at::Tensor& advantages) const = 0;
  // Whether the term is taken through the clipped policy loss.
  virtual bool through_policy_loss() const = 0;
};

namespace {

// The exact reverse KL over the vocabulary at every weighted row: each
// teacher's segment KL is backpropagated at once into a detached copy of
// the student's hidden states (so its teacher can go), and the student's
// stack runs backward once, from their accumulated gradient.
class FullKl final : public OpdTrainer::Distiller {
 public:
  FullKl(const at::Tensor& student_head, bool reward_term)
      : student_head_(student_head), reward_term_(reward_term) {}

  void ScoreStudent(const OpdTrainer::Micro& micro, model::PackedBatch& batch,
                    model::ScoreOptions& options) const override {
    if (!reward_term_) batch.targets = at::Tensor();  // no policy-loss term: no log-probs
    options.hidden_rows = micro.rows;
  }
  void ScoreTeacher(const OpdTrainer::Micro& micro, const OpdTrainer::Segment& segment,
                    model::PackedBatch& /*batch*/, model::ScoreOptions& options) const override {
    options.hidden_rows =
        micro.rows.narrow(0, segment.row_begin, segment.row_end - segment.row_begin) -
        segment.offset;
  }
  absl::Status Take(const OpdTrainer::Micro& micro, const OpdTrainer::Segment& segment,
                    const model::ScoreResult& scores, const at::Tensor& head, double normalizer,
                    OpdTrainer::Distilled& distilled) const override {
    model::TeacherRows teacher_rows{
        at::arange(segment.row_begin, segment.row_end, at::kLong), scores.hidden, head, {}};
    auto kl = model::ReverseKl(distilled.hidden, student_head_, teacher_rows, micro.temperature);
    if (!kl.ok()) return kl.status();
    at::Tensor segment_loss = kl->sum() / normalizer;
    segment_loss.backward();
    distilled.kl_loss += segment_loss.item<double>();
    distilled.kl.narrow(0, segment.row_begin, segment.row_end - segment.row_begin)
        .copy_(kl->detach().to(at::kCPU));
    return absl::OkStatus();
  }
  at::Tensor StudentLoss(const OpdTrainer::Micro& /*micro*/, const model::ScoreResult& student,
                         OpdTrainer::Distilled& distilled,
                         at::Tensor& /*advantages*/) const override {
    if (!distilled.hidden.grad().defined()) return at::zeros({}, student.logprobs.options());
    return (student.hidden * distilled.hidden.grad()).sum();
  }
  bool through_policy_loss() const override { return false; }

 private:
  const at::Tensor& student_head_;
  bool reward_term_;
};

// The sampled-token form: per-token advantage log p_teacher(y) - log
// p_behaviour(y) in the clipped policy loss; its negative is the sampled
// token's KL estimate.
class SampledKl final : public OpdTrainer::Distiller {
 public:
  void ScoreStudent(const OpdTrainer::Micro& /*micro*/, model::PackedBatch& /*batch*/,
                    model::ScoreOptions& /*options*/) const override {}
  void ScoreTeacher(const OpdTrainer::Micro& micro, const OpdTrainer::Segment& segment,
                    model::PackedBatch& batch, model::ScoreOptions& /*options*/) const override {
    batch.targets = micro.packed.shifted.batch.targets.narrow(0, segment.offset, segment.count);
  }
  absl::Status Take(const OpdTrainer::Micro& /*micro*/, const OpdTrainer::Segment& segment,
                    const model::ScoreResult& scores, const at::Tensor& /*head*/,
                    double /*normalizer*/, OpdTrainer::Distilled& distilled) const override {
    distilled.teacher_logprobs.narrow(0, segment.offset, segment.count)
        .copy_(scores.logprobs.to(at::kCPU));
    return absl::OkStatus();
  }
  at::Tensor StudentLoss(const OpdTrainer::Micro& micro, const model::ScoreResult& student,
                         OpdTrainer::Distilled& distilled, at::Tensor& advantages) const override {
    const at::Tensor sampled =
        (distilled.teacher_logprobs - micro.packed.behaviour) * micro.weights;
    advantages = advantages + sampled;
    distilled.kl = -sampled.index_select(0, micro.rows).to(at::kDouble);
    return at::zeros({}, student.logprobs.options());
  }
  bool through_policy_loss() const override { return true; }
};

}  // namespace

OpdTrainer::OpdTrainer(const StepInputs& run, StageOptimizer& optimizer,
                       algo::TeacherPool& teachers)
    : run_(run),
      optimizer_(optimizer),
      teachers_(teachers),
      policy_term_(std::make_unique<ClippedPolicyTerm>(ClippedPolicyTerm::Options{
          run.config.opd.clip_low, run.config.opd.clip_high, run.config.async.mask_lag})) {
  if (run.config.opd.FullKl()) {
    distiller_ = std::make_unique<FullKl>(run.model.LmHead(), run.config.opd.reward_weight > 0);
  } else {
    distiller_ = std::make_unique<SampledKl>();
  }
}

OpdTrainer::~OpdTrainer() = default;

absl::Status OpdTrainer::MicroBatchBackward(const std::vector<TrainingSample>& samples,
                                            const std::vector<size_t>& indices, double temperature,
                                            Step& step) const {
  const config::RunConfig& config = run_.config;
  Micro micro(samples, indices, temperature, step.version, config.async.mask_lag);
  for (int64_t length : micro.packed.lengths) {
    step.figures.Add("trained_tokens", static_cast<double>(length));
  }
  step.figures.Add("loss_tokens", micro.packed.shifted.target_weight.sum().item<double>());
  step.figures.Add("weighted_tokens", static_cast<double>(micro.rows.size(0)));

  // The student's stack runs once for the whole micro-batch, with its
  // recorded routing as in GRPO.
  double start = metrics::ProgressLine::SteadySeconds();
  model::PackedBatch batch = micro.packed.shifted.batch;
  model::ScoreOptions options;
  options.temperature = temperature;
  distiller_->ScoreStudent(micro, batch, options);
  auto scored = run_.model.Score(batch, options);
  if (!scored.ok()) return scored.status();
  step.student_seconds += metrics::ProgressLine::SteadySeconds() - start;

  Distilled distilled;
  if (scored->hidden.defined()) distilled.hidden = scored->hidden.detach().requires_grad_(true);
  if (absl::Status s = DistilSegments(samples, micro, distilled, step); !s.ok()) return s;

  start = metrics::ProgressLine::SteadySeconds();
  at::Tensor advantages = at::zeros_like(micro.packed.behaviour);
  at::Tensor loss = distiller_->StudentLoss(micro, *scored, distilled, advantages);
  const double reward_weight = config.opd.reward_weight;
  if (distiller_->through_policy_loss() || reward_weight > 0) {
    if (reward_weight > 0) {
      advantages = advantages + reward_weight * algo::ExpandToTokens(step.advantages.index_select(
                                                                         0, micro.packed.index),
                                                                     micro.packed.lengths);
    }
    const at::Tensor policy_loss =
        policy_term_
            ->Loss(micro.packed, scored->logprobs, advantages, step.version, step.normalizer)
            .loss;
    step.figures.Add("loss", policy_loss.item<double>());
    loss = loss + policy_loss;
  }
  if (loss.requires_grad()) loss.backward();
  step.figures.Add("loss", distilled.kl_loss);
  step.student_seconds += metrics::ProgressLine::SteadySeconds() - start;
  RecordKl(samples, micro, distilled.kl, step);
  return absl::OkStatus();
}

OpdTrainer::Segment OpdTrainer::NextSegment(const std::vector<TrainingSample>& samples,
                                            const Micro& micro, size_t a, int64_t row_begin) {
  Segment segment;
  segment.slot = samples[micro.indices[a]].info.teacher;
  segment.a = a;
  segment.b = a;
  while (segment.b < micro.indices.size() &&
         samples[micro.indices[segment.b]].info.teacher == segment.slot) {
    ++segment.b;
  }
  const int64_t rows = micro.rows.size(0);
  const int64_t* owner = micro.owner.data_ptr<int64_t>();
  segment.row_begin = row_begin;
  segment.row_end = row_begin;
  while (segment.row_end < rows && owner[segment.row_end] < static_cast<int64_t>(segment.b)) {
    ++segment.row_end;
  }
  segment.offset = micro.first_token[segment.a];
  segment.count = micro.first_token[segment.b] - segment.offset;
  return segment;
}

absl::Status OpdTrainer::DistilSegments(const std::vector<TrainingSample>& samples,
                                        const Micro& micro, Distilled& distilled,
                                        Step& step) const {
  const model::PackedBatch& batch = micro.packed.shifted.batch;
  distilled.kl = at::zeros({micro.rows.size(0)}, at::kDouble);
  distilled.teacher_logprobs = at::zeros({batch.tokens.size(0)}, at::kFloat);
  for (size_t a = 0, row_begin = 0; a < micro.indices.size();) {
    const Segment segment = NextSegment(samples, micro, a, static_cast<int64_t>(row_begin));
    // The teacher: its own routing, no gradients, the student's temperature.
    double start = metrics::ProgressLine::SteadySeconds();
    auto teacher = teachers_.Acquire(segment.slot);
    if (!teacher.ok()) return teacher.status();
    model::PackedBatch part;
    part.tokens = batch.tokens.narrow(0, segment.offset, segment.count);
    part.lengths.assign(micro.packed.lengths.begin() + static_cast<int64_t>(segment.a),
                        micro.packed.lengths.begin() + static_cast<int64_t>(segment.b));
    model::ScoreOptions options;
    options.temperature = micro.temperature;
    distiller_->ScoreTeacher(micro, segment, part, options);
    absl::StatusOr<model::ScoreResult> scored;
    {
      at::NoGradGuard no_grad;
      scored = (*teacher)->Score(part, options);
    }
    if (!scored.ok()) return scored.status();
    step.teacher_seconds += metrics::ProgressLine::SteadySeconds() - start;

    start = metrics::ProgressLine::SteadySeconds();
    if (absl::Status s = distiller_->Take(micro, segment, *scored, (*teacher)->LmHead(),
                                          step.normalizer, distilled);
        !s.ok()) {
      return s;
    }
    step.student_seconds += metrics::ProgressLine::SteadySeconds() - start;
    row_begin = static_cast<size_t>(segment.row_end);
    a = segment.b;
  }
  return absl::OkStatus();
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

absl::StatusOr<TrainedStep> OpdTrainer::Train(const Batch& batch) {
  const double start = metrics::ProgressLine::SteadySeconds();
  const config::RunConfig& config = run_.config;
  const std::vector<TrainingSample>& samples = batch.samples;
  LOOM_CHECK(!samples.empty(), "empty OPD batch");
  Step step;
  step.version = batch.policy_version;
  // One token-level mean over the batch: count its weighted tokens first.
  std::vector<size_t> all(samples.size());
  std::iota(all.begin(), all.end(), 0);
  auto weighted =
      WeightedTokensOverRanks(samples, all, step.version, config.async.mask_lag, run_.group);
  if (!weighted.ok()) return weighted.status();
  step.normalizer = std::max(*weighted, 1.0);
  // Verifier rewards: always reported; subgroup advantages when they are trained on.
  const std::vector<algo::Verdict> verdicts =
      JudgeSamples(samples, run_.tokenizer, run_.special_tokens.think_end, step.version);
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
                                 at::tensor(subgroups, at::kLong), config.opd.scale_by_std);
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
  auto applied = optimizer_.Step(batch.step);
  if (!applied.ok()) return applied.status();
  const double train_seconds = metrics::ProgressLine::SteadySeconds() - start;
  if (run_.group != nullptr) {
    if (absl::Status s = step.figures.SumOverRanks(*run_.group); !s.ok()) return s;
  }
  nlohmann::json record = Record(batch, step, *applied, train_seconds);
  AddTeacherFigures(before, record);
  MeanBy reward_by_dataset;
  for (size_t i = 0; i < verdicts.size(); ++i) {
    reward_by_dataset.Add(verdicts[i].dataset, rewards.total[i]);
  }
  record["reward_by_dataset"] = reward_by_dataset.Json();
  optimizer_.AddRankFigures(*applied, record);
  return TrainedStep{std::move(record), step.version + 1};
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
  nlohmann::json record = StepLine(kOpdStage, batch, applied, figures, train_seconds);
  record["estimator"] = run_.config.opd.estimator;
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
