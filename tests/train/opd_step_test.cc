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
  std::map<std::string, at::Tensor> gradient, before;
  for (const auto& [name, p] : f.model->NamedParameters()) {
    gradient[name] = p.grad().clone();
    before[name] = p.detach().clone();
    p.mutable_grad().zero_();
  }

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
  StageOptimizer optimizer(*f.model, f.config.train.opd);
  OpdTrainer trainer(*f.context, optimizer, **pool);
  Batch batch;
  batch.samples = samples;
  auto record = trainer.Train(batch);
  ASSERT_TRUE(record.ok()) << record.status();

  EXPECT_NEAR((*record)["kl"].get<double>(), expected, 1e-5 * std::max(1.0, expected));
  EXPECT_NEAR((*record)["loss"].get<double>(), expected, 1e-5 * std::max(1.0, expected));
  // Every teacher brought in once, two of them evicted for the next.
  EXPECT_EQ((*record)["teacher_loads"], 3);
  EXPECT_EQ((*record)["teacher_evictions"], 2);
  EXPECT_EQ((*record)["kl_by_teacher"].size(), 3u);
  double max_diff = 0, max_grad = 0;
  for (const auto& [name, p] : f.model->NamedParameters()) {
    const at::Tensor update = (p.detach() - before[name]).to(at::kDouble);
    const at::Tensor g = gradient[name].to(at::kDouble);
    max_diff = std::max(max_diff, (update + g).abs().max().item<double>());
    max_grad = std::max(max_grad, g.abs().max().item<double>());
  }
  EXPECT_GT(max_grad, 1e-4) << "no gradient to compare";
  EXPECT_LT(max_diff, 1e-3 * max_grad) << "largest gradient " << max_grad;
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
  OpdTrainer trainer(*f.context, optimizer, **pool);
  Batch batch;
  batch.samples = samples;
  auto record = trainer.Train(batch);
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_NEAR((*record)["kl"].get<double>(), 0.0, 1e-6);
  for (const auto& [name, p] : f.model->NamedParameters()) {
    EXPECT_LT((p.detach() - before[name]).abs().max().item<double>(), 1e-3) << name;
  }
}

}  // namespace
}  // namespace loom::train
