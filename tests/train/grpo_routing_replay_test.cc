// A GRPO step on a MoE model at learning rate 0 with MoE routing replay: the
// policy being trained is the behaviour policy, so every importance ratio
// must be 1 — which holds only if the trainer sends each token through the
// experts the rollout recorded for it. The behaviour side is computed here
// without GrpoTrainer: log-probs and routing from the incremental path
// (Transformer::Step over a KV pool, token by token as the engine generates),
// or, for a routing the trainer's own router would not choose, log-probs
// scored sequence by sequence under that routing. Dropping the recorded
// routing then moves the ratios away from 1, which shows the check can fail.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "loom/model/transformer.h"
#include "loom/tasks/generator.h"
#include "train/encoding.h"
#include "train/grpo_step.h"
#include "train/train_fixture.h"

namespace loom::train {
namespace {

constexpr int64_t kExperts = 4;

struct MoeFixture : TrainFixture {
  MoeFixture() {
    config.train.grpo.steps = 1;
    config.train.grpo.warmup_steps = 0;
    config.train.grpo.lr = 0;
    model::ModelConfig c = TinyModelConfig("qwen3_moe");
    c.num_experts = kExperts;
    c.num_experts_per_tok = 2;
    c.moe_intermediate_size = 16;
    Build(c, 7, /*requires_grad=*/true);
    // Weights large enough that which experts a token visits shows in its
    // log-probs (at the default init scale every expert adds almost nothing).
    at::NoGradGuard no_grad;
    at::manual_seed(7);
    for (at::Tensor p : model->Parameters()) {
      if (p.dim() > 1) p.copy_(at::randn(p.sizes()) * 0.15);
    }
  }

  // A finished sample whose completion is `written_from`'s reference turn,
  // judged by `judged_by`; behaviour log-probs and routing not yet recorded.
  TrainingSample Sample(std::shared_ptr<const tasks::Problem> judged_by,
                        const tasks::Problem& written_from, uint64_t subgroup) const {
    TrainingSample sample = ReferenceSample(std::move(judged_by), written_from, subgroup);
    sample.state.moe_layers = model->config().NumMoeLayers();
    sample.state.top_k = model->config().num_experts_per_tok;
    return sample;
  }

  // Two subgroups, each with a right and a wrong answer (so both carry a
  // gradient and no step may leave them out).
  std::vector<TrainingSample> Batch() const {
    std::vector<TrainingSample> samples;
    for (uint64_t seed : {41, 42}) {
      auto generator = tasks::MakeGenerator("arithmetic");
      EXPECT_TRUE(generator.ok()) << generator.status();
      auto problem = std::make_shared<const tasks::Problem>((*generator)->Generate(seed, 2));
      tasks::Problem wrong = *problem;
      (*wrong.reference)["content"] = problem->answer + "1";
      samples.push_back(Sample(problem, *problem, seed));
      samples.push_back(Sample(problem, wrong, seed));
    }
    return samples;
  }

  // Records what the rollout engine would: the prompt fed in one chunk, then
  // each generated token on its own; the behaviour log-prob of token t from
  // the logits after token t - 1, and one routing row per fed token.
  void RecordAsRollout(rollout::SampleState& state) const {
    at::NoGradGuard no_grad;
    model::KvBlockPool pool(model->PoolOptions(state.length() + 16));
    model::KvSequence seq;
    std::vector<at::Tensor> rows;
    for (int64_t t = state.prompt_length, fed = 0; t < state.length(); fed = t, ++t) {
      auto step =
          model->Step({{&seq, {state.tokens.begin() + fed, state.tokens.begin() + t}}}, pool);
      ASSERT_TRUE(step.ok()) << step.status();
      state.logprobs[t] = step->logits[0].log_softmax(-1)[state.tokens[t]].item<float>();
      rows.push_back(step->routing);
    }
    SetRouting(state, at::cat(rows));
  }

  // Records `routing` ([rows, moe_layers, top_k]) as the sample's and takes
  // the behaviour log-probs the model gives when it routes that way.
  void RecordWithRouting(rollout::SampleState& state, const at::Tensor& routing) const {
    at::NoGradGuard no_grad;
    model::PackedBatch batch = model::TeacherForcingBatch({state.tokens});
    batch.replay_routing = routing;
    auto scored = model->Score(batch);
    ASSERT_TRUE(scored.ok()) << scored.status();
    for (int64_t t = state.prompt_length; t < state.length(); ++t) {
      state.logprobs[t] = scored->logprobs[t - 1].item<float>();
    }
    SetRouting(state, routing.narrow(0, 0, state.length() - 1));
  }

  // The experts the model's own router picks for every token of `tokens`.
  at::Tensor FreshRouting(const std::vector<int64_t>& tokens) const {
    at::NoGradGuard no_grad;
    auto scored = model->Score(model::TeacherForcingBatch({tokens}));
    EXPECT_TRUE(scored.ok()) << scored.status();
    return scored->routing;
  }

  static void SetRouting(rollout::SampleState& state, const at::Tensor& rows) {
    const at::Tensor flat = rows.to(at::kShort).contiguous().flatten();
    state.routing.assign(flat.data_ptr<int16_t>(), flat.data_ptr<int16_t>() + flat.numel());
  }

  absl::StatusOr<nlohmann::json> TrainOnce(const std::vector<TrainingSample>& samples) {
    StageOptimizer optimizer(*model, config.train.grpo);
    GrpoTrainer trainer(step_inputs(), optimizer,
                        algo::EffortLengthReward(config.grpo.length_reward, {100}), -1);
    train::Batch batch;
    batch.samples = samples;
    batch.policy_version = 0;
    const int64_t version = batch.policy_version;
    auto trained = trainer.Train(batch);
    if (!trained.ok()) return trained.status();
    EXPECT_EQ(trained->policy_version, version + 1) << "one optimizer step, one version";
    EXPECT_EQ(trained->record["version"], version + 1) << "the step line names the new version";
    return trained->record;
  }
};

// The replay tolerance: float32 rounding between the incremental and the
// packed forward, far below any effect of a token visiting other experts.
constexpr double kRatioTolerance = 1e-5;

class RoutingReplayTest : public ::testing::TestWithParam<int64_t> {};

// Behaviour from the rollout's own forward path; the batch is scored in one
// micro-batch or one sample per micro-batch (the parameter), so the routing
// rows must follow their samples through the packing.
TEST_P(RoutingReplayTest, RatioIsOneAtLearningRateZero) {
  MoeFixture f;
  f.config.train.micro_batch_tokens = GetParam();
  std::vector<TrainingSample> samples = f.Batch();
  for (TrainingSample& sample : samples) f.RecordAsRollout(sample.state);
  auto record = f.TrainOnce(samples);
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_DOUBLE_EQ((*record)["reward_task_mean"].get<double>(), 0.5) << record->dump();
  EXPECT_NEAR((*record)["ratio_mean"].get<double>(), 1.0, kRatioTolerance) << record->dump();
  EXPECT_EQ((*record)["clip_fraction"].get<double>(), 0.0) << record->dump();
}

INSTANTIATE_TEST_SUITE_P(MicroBatchTokens, RoutingReplayTest, ::testing::Values(4096, 1),
                         [](const auto& info) {
                           return info.param == 1 ? "SamplePerMicroBatch" : "OneMicroBatch";
                         });

// The rollout recorded experts the trainer's router would not pick (as
// happens when rollout numerics break a near-tie the other way): the ratios
// are 1 only while that routing is replayed.
TEST(RoutingReplayControlTest, WithoutReplayTheRatioLeavesOne) {
  MoeFixture f;
  std::vector<TrainingSample> samples = f.Batch();
  for (TrainingSample& sample : samples) {
    // Each expert id shifted by one: with 2 of 4 experts, no token keeps its set.
    const at::Tensor fresh = f.FreshRouting(sample.state.tokens);
    f.RecordWithRouting(sample.state,
                        ((fresh.to(at::kLong) + 1) % kExperts).to(fresh.scalar_type()));
  }

  auto replayed = f.TrainOnce(samples);
  ASSERT_TRUE(replayed.ok()) << replayed.status();
  EXPECT_NEAR((*replayed)["ratio_mean"].get<double>(), 1.0, kRatioTolerance) << replayed->dump();
  EXPECT_EQ((*replayed)["clip_fraction"].get<double>(), 0.0) << replayed->dump();

  for (TrainingSample& sample : samples) {
    sample.state.routing.clear();  // the trainer now routes afresh
    sample.state.moe_layers = 0;
    sample.state.top_k = 0;
  }
  auto fresh = f.TrainOnce(samples);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_GT(std::abs((*fresh)["ratio_mean"].get<double>() - 1.0), 1000 * kRatioTolerance)
      << fresh->dump();
  EXPECT_GT((*fresh)["clip_fraction"].get<double>(), 0.0) << fresh->dump();
}

}  // namespace
}  // namespace loom::train
