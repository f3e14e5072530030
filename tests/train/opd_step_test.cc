// OpdTrainer on real (tiny) models: one step's gradient equals the gradient of
// an independent computation — the full-vocabulary KL of each sample taken
// one at a time from both models' full log-prob rows, summed and divided by
// the batch's response tokens — whatever the order of teachers in the batch,
// however micro-batches cut across them, with one teacher resident at a time.
// The gradient is read off the step: with AdamW at eps = lr = 1e6 the first
// update is -g / (1 + |g| / 1e6), i.e. -g.

#include "loom/train/opd_step.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "loom/model/init.h"
#include "loom/tasks/generator.h"
#include "loom/train/stage_optimizer.h"
#include "train/train_fixture.h"

namespace loom::train {
namespace {

struct Fixture : TrainFixture {
  std::vector<algo::TeacherSpec> specs;

  explicit Fixture(const std::string& estimator = "full") {
    config.opd.estimator = estimator;
    config.train.opd.steps = 1;
    config.train.opd.warmup_steps = 0;
    config.train.opd.lr = 1e6;
    config.train.opd.eps = 1e6;
    config.train.opd.grad_clip = 0;
    config.train.micro_batch_tokens = 150;  // micro-batches cut across teachers
    Build(TinyModelConfig("llama"), 5, /*requires_grad=*/true);
    const char* archs[] = {"qwen3", "qwen2", "qwen3_moe"};
    for (int t = 0; t < 3; ++t) {
      model::InitModelOptions init;
      init.arch = archs[t];
      init.out_dir = dir / ("teacher" + std::to_string(t));
      init.seed = 20 + t;
      init.overrides = {"hidden_size=" + std::to_string(24 + 8 * t), "num_hidden_layers=1"};
      EXPECT_TRUE(model::InitModelDir(init).ok());
      specs.push_back({"t" + std::to_string(t), init.out_dir});
    }
  }

  // Sample i: an arithmetic reference turn, distilled from teacher `teacher`.
  TrainingSample Sample(uint64_t seed, int teacher) const {
    auto generator = *tasks::MakeGenerator("arithmetic");
    auto problem = std::make_shared<tasks::Problem>(generator->Generate(seed, 2));
    problem->dataset = "d" + std::to_string(teacher);
    TrainingSample sample = ReferenceSample(problem, *problem, seed);
    sample.info.teacher = teacher;
    return sample;
  }

  // Sets every sample's behaviour log-probs to the current policy's (ratio 1).
  void BehaviourIsCurrentPolicy(std::vector<TrainingSample>& samples) const {
    at::NoGradGuard no_grad;
    for (TrainingSample& s : samples) {
      const at::Tensor lp =
          model->Score(model::TeacherForcingBatch({s.state.tokens}))->logprobs.contiguous();
      for (int64_t t = 0; t + 1 < s.state.length(); ++t)
        s.state.logprobs[t + 1] = lp[t].item<float>();
    }
  }

  // One OpdTrainer step on `samples` against the gradient the test left in
  // the student's parameters (an independent computation's): the step's
  // update must be minus that gradient. Returns the step's metrics line.
  nlohmann::json StepMatchesGradient(algo::TeacherPool& pool,
                                     const std::vector<TrainingSample>& samples) {
    std::map<std::string, at::Tensor> gradient, before;
    for (const auto& [name, p] : model->NamedParameters()) {
      gradient[name] = p.grad().clone();
      before[name] = p.detach().clone();
      p.mutable_grad().zero_();
    }
    StageOptimizer optimizer(*model, config.train.opd);
    OpdTrainer trainer(step_inputs(), optimizer, pool);
    Batch batch;
    batch.samples = samples;
    auto record = trainer.Train(batch);
    EXPECT_TRUE(record.ok()) << record.status();
    double max_diff = 0, max_grad = 0;
    for (const auto& [name, p] : model->NamedParameters()) {
      const at::Tensor update = (p.detach() - before[name]).to(at::kDouble);
      const at::Tensor g = gradient[name].to(at::kDouble);
      max_diff = std::max(max_diff, (update + g).abs().max().item<double>());
      max_grad = std::max(max_grad, g.abs().max().item<double>());
    }
    EXPECT_GT(max_grad, 1e-4) << "no gradient to compare";
    EXPECT_LT(max_diff, 1e-3 * max_grad) << "largest gradient " << max_grad;
    return record.ok() ? record->record : nlohmann::json();
  }

  // The independent computation: sum over samples and response positions of
  // KL(student ‖ teacher) from full log-prob rows, over the response tokens.
  // Returns it and leaves its gradient in the student's parameters.
  double ExpectedLoss(const std::vector<TrainingSample>& samples) {
    double total_tokens = 0;
    for (const TrainingSample& s : samples) {
      for (int64_t t = 1; t < s.state.length(); ++t) total_tokens += s.state.loss_mask[t];
    }
    at::Tensor total = at::zeros({}, at::kDouble);
    for (const TrainingSample& s : samples) {
      std::vector<int64_t> rows;
      for (int64_t t = 0; t + 1 < s.state.length(); ++t) {
        if (s.state.loss_mask[t + 1]) rows.push_back(t);
      }
      model::ScoreOptions options;
      options.full_vocab_rows = at::tensor(rows, at::kLong);
      const model::PackedBatch batch = model::TeacherForcingBatch({s.state.tokens});
      auto teacher = model::Transformer::Load(specs[s.info.teacher].path, {});
      at::Tensor log_q = (*teacher)->Score(batch, options)->full_logprobs.to(at::kDouble);
      at::Tensor log_p = model->Score(batch, options)->full_logprobs.to(at::kDouble);
      total = total + (log_p.exp() * (log_p - log_q)).sum();
    }
    total = total / total_tokens;
    total.backward();
    return total.item<double>();
  }
};

TEST(OpdStepTest, GradientEqualsTheIndependentFullVocabularyKl) {
  Fixture f;
  // Teachers out of order, each with samples in two places.
  std::vector<TrainingSample> samples;
  const int teachers[] = {2, 0, 1, 0, 2, 1, 0};
  for (int i = 0; i < 7; ++i) samples.push_back(f.Sample(100 + i, teachers[i]));

  const double expected = f.ExpectedLoss(samples);
  algo::TeacherPoolOptions pool_options;
  pool_options.memory_bytes = 1;  // below every teacher: checked at Open...
  EXPECT_FALSE(
      algo::TeacherPool::Open(f.specs, f.model->config().vocab_size, *f.tokenizer, pool_options)
          .ok());
  // ...so hold exactly the largest one.
  int64_t largest = 0;
  for (const auto& spec : f.specs) {
    largest = std::max(largest,
                       model::Transformer::ParameterCount(*model::LoadModelConfig(spec.path)) * 4);
  }
  pool_options.memory_bytes = largest;
  auto pool =
      algo::TeacherPool::Open(f.specs, f.model->config().vocab_size, *f.tokenizer, pool_options);
  ASSERT_TRUE(pool.ok()) << pool.status();
  const nlohmann::json record = f.StepMatchesGradient(**pool, samples);
  EXPECT_NEAR(record["kl"].get<double>(), expected, 1e-5 * std::max(1.0, expected));
  EXPECT_NEAR(record["loss"].get<double>(), expected, 1e-5 * std::max(1.0, expected));
  // Every teacher brought in once, two of them evicted for the next.
  EXPECT_EQ(record["teacher_loads"], 3);
  EXPECT_EQ(record["teacher_evictions"], 2);
  EXPECT_EQ(record["kl_by_teacher"].size(), 3u);
}

TEST(OpdStepTest, SampledEstimatorGradientEqualsTheIndependentPolicyGradient) {
  Fixture f("sampled");
  std::vector<TrainingSample> samples;
  const int teachers[] = {1, 0, 2, 1};
  for (int i = 0; i < 4; ++i) samples.push_back(f.Sample(300 + i, teachers[i]));
  f.BehaviourIsCurrentPolicy(samples);
  double total_tokens = 0, kl_sum = 0;
  at::Tensor expected = at::zeros({}, at::kDouble);
  for (TrainingSample& s : samples) {
    const model::PackedBatch batch = model::TeacherForcingBatch({s.state.tokens});
    auto teacher = model::Transformer::Load(f.specs[s.info.teacher].path, {});
    const at::Tensor log_q = (*teacher)->Score(batch)->logprobs.to(at::kDouble);
    const at::Tensor log_p = f.model->Score(batch)->logprobs.to(at::kDouble);
    std::vector<double> mask;
    for (int64_t t = 0; t + 1 < s.state.length(); ++t) mask.push_back(s.state.loss_mask[t + 1]);
    mask.push_back(0);
    const at::Tensor w = at::tensor(mask, at::kDouble);
    const at::Tensor behaviour = log_p.detach();
    const at::Tensor advantage = (log_q - behaviour) * w;
    expected = expected - (advantage * at::exp(log_p - behaviour)).sum();
    total_tokens += w.sum().item<double>();
    kl_sum += ((behaviour - log_q) * w).sum().item<double>();
  }
  expected = expected / total_tokens;
  expected.backward();
  auto pool = algo::TeacherPool::Open(f.specs, f.model->config().vocab_size, *f.tokenizer, {});
  ASSERT_TRUE(pool.ok()) << pool.status();
  const nlohmann::json record = f.StepMatchesGradient(**pool, samples);
  EXPECT_EQ(record["estimator"], "sampled");
  // The reported KL is the sampled tokens' estimate, log b - log q.
  EXPECT_NEAR(record["kl"].get<double>(), kl_sum / total_tokens, 1e-4);
}

TEST(OpdStepTest, TeacherIdenticalToTheStudentGivesZeroKlAndNoUpdate) {
  Fixture f;
  ASSERT_TRUE(f.model->Save(f.dir / "same").ok());
  std::filesystem::copy_file(f.specs[0].path + "/tokenizer.json", f.dir / "same/tokenizer.json");
  f.specs = {{"same", f.dir / "same"}};
  std::vector<TrainingSample> samples;
  for (int i = 0; i < 3; ++i) samples.push_back(f.Sample(200 + i, 0));
  auto pool = algo::TeacherPool::Open(f.specs, f.model->config().vocab_size, *f.tokenizer, {});
  ASSERT_TRUE(pool.ok()) << pool.status();
  std::map<std::string, at::Tensor> before;
  for (const auto& [name, p] : f.model->NamedParameters()) before[name] = p.detach().clone();
  StageOptimizer optimizer(*f.model, f.config.train.opd);
  OpdTrainer trainer(f.step_inputs(), optimizer, **pool);
  Batch batch;
  batch.samples = samples;
  auto record = trainer.Train(batch);
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_NEAR(record->record["kl"].get<double>(), 0.0, 1e-6);
  for (const auto& [name, p] : f.model->NamedParameters()) {
    EXPECT_LT((p.detach() - before[name]).abs().max().item<double>(), 1e-3) << name;
  }
}

// opd.reward_weight: with a teacher identical to the student (KL 0, no
// gradient of its own) the step is w times the GRPO policy gradient on the
// verifier's rewards, advantages centred within the subgroup.
TEST(OpdStepTest, RewardWeightAddsTheGrpoGradientOnVerifierRewards) {
  Fixture f;
  f.config.opd.reward_weight = 0.5;
  ASSERT_TRUE(f.model->Save(f.dir / "same").ok());
  std::filesystem::copy_file(f.specs[0].path + "/tokenizer.json", f.dir / "same/tokenizer.json");
  f.specs = {{"same", f.dir / "same"}};
  // One subgroup: two right answers and one wrong (problem 401's reference
  // judged by problem 400's answer).
  std::vector<TrainingSample> samples = {f.Sample(400, 0), f.Sample(401, 0), f.Sample(402, 0)};
  samples[1].info.problem = samples[0].info.problem;
  for (TrainingSample& s : samples) s.info.subgroup_id = 7;
  f.BehaviourIsCurrentPolicy(samples);
  const std::vector<double> rewards = {1, 0, 1};
  const double mean = 2.0 / 3.0;
  double total_tokens = 0;
  at::Tensor expected = at::zeros({}, at::kDouble);
  for (size_t i = 0; i < samples.size(); ++i) {
    const TrainingSample& s = samples[i];
    const at::Tensor log_p =
        f.model->Score(model::TeacherForcingBatch({s.state.tokens}))->logprobs.to(at::kDouble);
    std::vector<double> mask;
    for (int64_t t = 0; t + 1 < s.state.length(); ++t) mask.push_back(s.state.loss_mask[t + 1]);
    mask.push_back(0);
    const at::Tensor w = at::tensor(mask, at::kDouble);
    expected = expected - 0.5 * (rewards[i] - mean) * (w * at::exp(log_p - log_p.detach())).sum();
    total_tokens += w.sum().item<double>();
  }
  expected = expected / total_tokens;
  expected.backward();
  auto pool = algo::TeacherPool::Open(f.specs, f.model->config().vocab_size, *f.tokenizer, {});
  ASSERT_TRUE(pool.ok()) << pool.status();
  const nlohmann::json record = f.StepMatchesGradient(**pool, samples);
  EXPECT_NEAR(record["kl"].get<double>(), 0.0, 1e-6);
  EXPECT_NEAR(record["reward_mean"].get<double>(), mean, 1e-9);
}

}  // namespace
}  // namespace loom::train
