// GrpoTrainer end to end on a real (tiny) model: the rewards come from the
// verifier, and one optimizer step must move the policy towards the
// rewarded completion and away from the unrewarded one of the same subgroup.
// The direction is checked by re-scoring both completions with the model
// itself after the step, an independent path from the loss that moved it.

#include "train/grpo_step.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "loom/model/transformer.h"
#include "loom/tasks/generator.h"
#include "loom/tokenizer/dsv4_tokens.h"
#include "loom/v1/sandbox.pb.h"
#include "train/encoding.h"
#include "train/train_fixture.h"

namespace loom::train {
namespace {

struct Fixture : TrainFixture {
  Fixture() {
    config.train.grpo.steps = 1;
    config.train.grpo.warmup_steps = 0;
    config.train.grpo.lr = 1e-2;
    Build(TinyModelConfig("llama"), 7, /*requires_grad=*/true);
  }

  // A finished sample whose completion is `problem`'s reference turn, with
  // the current policy's log-probs as its behaviour log-probs.
  // `temperature`: the one it was drawn with (its log-probs are taken at it).
  TrainingSample Sample(std::shared_ptr<const tasks::Problem> judged_by,
                        const tasks::Problem& written_from, uint64_t subgroup,
                        double temperature = 1.0) {
    TrainingSample sample = ReferenceSample(std::move(judged_by), written_from, subgroup);
    rollout::SampleState& state = sample.state;
    state.sampling.temperature = temperature;
    const std::vector<float> current = TokenLogprobs(state.tokens, temperature);
    for (int64_t t = state.prompt_length; t < state.length(); ++t) state.logprobs[t] = current[t];
    return sample;
  }

  // log p(tokens[t] | tokens[<t]) for t >= 1 (index 0 holds 0).
  std::vector<float> TokenLogprobs(const std::vector<int64_t>& tokens,
                                   double temperature = 1.0) const {
    at::NoGradGuard no_grad;
    model::ScoreOptions options;
    options.temperature = temperature;
    auto scored = model->Score(model::TeacherForcingBatch({tokens}), options);
    EXPECT_TRUE(scored.ok()) << scored.status();
    std::vector<float> out(tokens.size(), 0.0f);
    const at::Tensor lp = scored->logprobs.contiguous();
    for (size_t t = 1; t < tokens.size(); ++t)
      out[t] = lp[static_cast<int64_t>(t) - 1].item<float>();
    return out;
  }

  // An arithmetic problem with a reference (SFT) turn.
  static std::shared_ptr<const tasks::Problem> Problem(uint64_t seed) {
    auto generator = tasks::MakeGenerator("arithmetic");
    EXPECT_TRUE(generator.ok()) << generator.status();
    return std::make_shared<const tasks::Problem>((*generator)->Generate(seed, 2));
  }

  // One GrpoTrainer::Train on `samples` with a fresh optimizer, training
  // efforts `levels`, and `</think>` as `think_end_id` (-1: none).
  absl::StatusOr<nlohmann::json> TrainOnce(const std::vector<TrainingSample>& samples,
                                           std::vector<int> levels = {100},
                                           int64_t think_end_id = -1) {
    StageOptimizer optimizer(*model, config.train.grpo);
    GrpoTrainer trainer(step_inputs(), optimizer,
                        algo::EffortLengthReward(config.grpo.length_reward, std::move(levels)),
                        think_end_id);
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

  // Every parameter, flattened into one vector (a copy).
  at::Tensor Weights() const {
    std::vector<at::Tensor> flat;
    for (const at::Tensor& p : model->Parameters()) flat.push_back(p.detach().flatten().clone());
    return at::cat(flat);
  }

  double CompletionLogprob(const TrainingSample& sample) const {
    const std::vector<float> lp = TokenLogprobs(sample.state.tokens);
    double sum = 0;
    for (size_t t = static_cast<size_t>(sample.state.prompt_length); t < lp.size(); ++t)
      sum += lp[t];
    return sum;
  }
};

TEST(GrpoStepTest, OneStepFavoursTheRewardedCompletion) {
  Fixture f;
  auto problem = Fixture::Problem(11);
  tasks::Problem wrong = *problem;
  (*wrong.reference)["content"] = problem->answer + "1";  // a different number

  std::vector<TrainingSample> samples;
  samples.push_back(f.Sample(problem, *problem, 1));
  samples.push_back(f.Sample(problem, wrong, 1));
  const double right_before = f.CompletionLogprob(samples[0]);
  const double wrong_before = f.CompletionLogprob(samples[1]);

  auto record = f.TrainOnce(samples);
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_DOUBLE_EQ((*record)["reward_task_mean"].get<double>(), 0.5) << record->dump();
  EXPECT_NEAR((*record)["ratio_mean"].get<double>(), 1.0, 1e-4) << record->dump();
  EXPECT_EQ((*record)["version"], 1);
  EXPECT_DOUBLE_EQ((*record)["informative_subgroup_fraction"].get<double>(), 1.0);

  // The two completions share everything but the answer, so what must move
  // is the gap between them (Adam's first step also nudges every shared
  // token by about the learning rate, in either direction).
  const double right_after = f.CompletionLogprob(samples[0]);
  const double wrong_after = f.CompletionLogprob(samples[1]);
  EXPECT_GT(right_after - wrong_after, right_before - wrong_before + 0.1)
      << "right " << right_before << " -> " << right_after << ", wrong " << wrong_before << " -> "
      << wrong_after;
}

TEST(GrpoStepTest, EqualRewardsLeaveTheWeightsAlone) {
  Fixture f;
  auto problem = Fixture::Problem(12);
  std::vector<TrainingSample> samples;
  samples.push_back(f.Sample(problem, *problem, 1));
  samples.push_back(f.Sample(problem, *problem, 1));
  const double before = f.CompletionLogprob(samples[0]);
  auto record = f.TrainOnce(samples);
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_DOUBLE_EQ((*record)["informative_subgroup_fraction"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(f.CompletionLogprob(samples[0]),
                   before);  // advantage 0 everywhere
}

// A subgroup with right and wrong answers, and one where both are right.
std::vector<TrainingSample> MixedBatch(Fixture& f, bool with_uninformative) {
  auto problem = Fixture::Problem(21), other = Fixture::Problem(22);
  tasks::Problem wrong = *problem;
  (*wrong.reference)["content"] = problem->answer + "7";
  std::vector<TrainingSample> samples;
  samples.push_back(f.Sample(problem, *problem, 1));
  samples.push_back(f.Sample(problem, wrong, 1));
  if (with_uninformative) {
    samples.push_back(f.Sample(other, *other, 2));
    samples.push_back(f.Sample(other, *other, 2));
  }
  return samples;
}

// The weight change of one step on MixedBatch from the fixture's fixed
// initial weights, with grpo.skip_uninformative = `skip`.
at::Tensor Update(const std::string& skip, bool with_uninformative, nlohmann::json* record) {
  Fixture f;
  f.config.grpo.skip_uninformative = skip;
  const at::Tensor before = f.Weights();
  auto result = f.TrainOnce(MixedBatch(f, with_uninformative));
  EXPECT_TRUE(result.ok()) << result.status();
  if (result.ok()) *record = *result;
  return f.Weights() - before;
}

TEST(GrpoStepTest, UninformativeSubgroupsAreSkippedAndDoNotDiluteTheStep) {
  nlohmann::json alone, mixed, mixed_unskipped;
  const at::Tensor informative_only = Update("on", false, &alone);
  const at::Tensor half_uninformative = Update("on", true, &mixed);
  ASSERT_GT(informative_only.abs().max().item<double>(), 1e-4) << "the step must move";
  EXPECT_TRUE(at::allclose(half_uninformative, informative_only, 1e-5, 1e-8))
      << "max difference " << (half_uninformative - informative_only).abs().max().item<double>();
  EXPECT_EQ(mixed["skipped_samples"], 2) << mixed.dump();
  EXPECT_EQ(alone["skipped_samples"], 0) << alone.dump();
  EXPECT_DOUBLE_EQ(mixed["informative_subgroup_fraction"].get<double>(), 0.5);

  // Scored and counted, the uninformative half doubles the normaliser: the
  // same samples then give a different update (auto = on without a KL term).
  const at::Tensor unskipped = Update("off", true, &mixed_unskipped);
  EXPECT_EQ(mixed_unskipped["skipped_samples"], 0);
  EXPECT_FALSE(at::allclose(unskipped, informative_only, 1e-3, 1e-6));
  nlohmann::json automatic;
  EXPECT_TRUE(at::allclose(Update("auto", true, &automatic), informative_only, 1e-5, 1e-8));
}

TEST(GrpoStepTest, SamplesAreScoredAtTheTemperatureTheyWereDrawnWith) {
  Fixture f;
  f.config.rollout.temperature = 1.0;  // the run's current setting; the samples used 0.5
  f.config.train.grpo.lr = 0;
  auto problem = Fixture::Problem(31);
  tasks::Problem wrong = *problem;
  (*wrong.reference)["content"] = problem->answer + "3";
  std::vector<TrainingSample> samples;
  samples.push_back(f.Sample(problem, *problem, 1, 0.5));
  samples.push_back(f.Sample(problem, wrong, 1, 0.5));
  samples.push_back(f.Sample(problem, *problem, 2, 1.0));
  samples.push_back(f.Sample(problem, wrong, 2, 1.0));
  auto record = f.TrainOnce(samples);
  ASSERT_TRUE(record.ok()) << record.status();
  // At the sampling temperatures the recomputed log-probs equal the recorded
  // ones: every importance ratio is 1 and nothing is clipped. Scored at the
  // run's temperature, the 0.5 samples would have ratios far from 1.
  EXPECT_NEAR((*record)["ratio_mean"].get<double>(), 1.0, 1e-5) << record->dump();
  EXPECT_DOUBLE_EQ((*record)["clip_fraction"].get<double>(), 0.0) << record->dump();
  const std::vector<float> at_half = f.TokenLogprobs(samples[0].state.tokens, 0.5);
  const std::vector<float> at_one = f.TokenLogprobs(samples[0].state.tokens, 1.0);
  double gap = 0;
  for (size_t t = 0; t < at_half.size(); ++t) {
    gap = std::max(gap, static_cast<double>(std::abs(at_half[t] - at_one[t])));
  }
  EXPECT_GT(gap, 0.05) << "the two temperatures must give different log-probs for this to test";
}

// The length reward end to end: each sample pays at its own effort, on the
// tokens of its reasoning. Expected values come from the closed form of
// the report's formula and the reference's reasoning text (one byte, one
// token with the tiny tokenizer), not from the code under test.
TEST(GrpoStepTest, LengthRewardIsPaidAtEachSamplesEffortOnItsReasoning) {
  Fixture f;
  f.config.train.grpo.lr = 0;
  config::LengthRewardSection& length = f.config.grpo.length_reward;
  length.k0 = 0.8, length.c_max = 1.0, length.l_norm = 16, length.lambda = 1.0;
  auto problem = Fixture::Problem(41);
  tasks::Problem answer_only = *problem;
  (*answer_only.reference)["reasoning_content"] = "";
  const double reasoning =
      static_cast<double>((*problem->reference)["reasoning_content"].get<std::string>().size());
  ASSERT_GT(reasoning, 20);

  auto at_effort = [&](const tasks::Problem& written_from, uint64_t subgroup, int effort) {
    TrainingSample sample = f.Sample(problem, written_from, subgroup);
    sample.info.effort = effort;
    return sample;
  };
  std::vector<TrainingSample> samples = {at_effort(*problem, 1, 25), at_effort(answer_only, 1, 25),
                                         at_effort(*problem, 2, 100)};
  const int64_t think_end = *f.tokenizer->SpecialTokenId(tokenizer::dsv4::kThinkClose);
  auto record = f.TrainOnce(samples, {25, 50, 75, 100}, think_end);
  ASSERT_TRUE(record.ok()) << record.status();

  // tau = lambda * mean gap = 25: k(25) = k0, k(100) = k0 e^-3.
  const double at_25 = std::min(1.0, 0.8 * reasoning / 16);
  const double at_100 = std::min(1.0, 0.8 * std::exp(-3.0) * reasoning / 16);
  ASSERT_DOUBLE_EQ(at_25, 1.0) << "the cap must bite at 25 for this case to test it";
  const nlohmann::json& reward = (*record)["reward_by_effort"];
  EXPECT_NEAR(reward["25"].get<double>(), ((1 - at_25) + 1) / 2, 1e-6) << record->dump();
  EXPECT_NEAR(reward["100"].get<double>(), 1 - at_100, 1e-6) << record->dump();
  // All three answers are right: the verifier's reward alone is 1 at both efforts.
  EXPECT_DOUBLE_EQ((*record)["reward_task_by_effort"]["25"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ((*record)["reward_task_by_effort"]["100"].get<double>(), 1.0);
  EXPECT_NEAR((*record)["reasoning_length_by_effort"]["25"].get<double>(), reasoning / 2, 1e-9);
  EXPECT_NEAR((*record)["reasoning_length_by_effort"]["100"].get<double>(), reasoning, 1e-9);
  EXPECT_NEAR((*record)["reward_length_mean"].get<double>(), -(at_25 + at_100) / 3, 1e-6);
}

// A multi-turn (agent) sample: each turn's reasoning is what the model
// generated before that turn's `</think>`; tool output between turns is not
// generated and never counts; a turn cut off before `</think>` counts whole.
TEST(GrpoStepTest, MultiTurnReasoningIsCountedPerTurn) {
  Fixture f;
  f.config.train.grpo.lr = 0;
  config::LengthRewardSection& length = f.config.grpo.length_reward;
  length.k0 = 1.0, length.c_max = 10.0, length.l_norm = 10, length.lambda = 1.0;
  const int64_t think_end = *f.tokenizer->SpecialTokenId(tokenizer::dsv4::kThinkClose);
  rollout::SampleState state;
  auto append = [&](std::string_view text, bool generated) {
    const std::vector<int32_t> ids = *f.tokenizer->EncodeOrdinary(text);
    for (int32_t id : ids) {
      state.tokens.push_back(id);
      state.loss_mask.push_back(generated);
    }
  };
  auto close_think = [&] {
    state.tokens.push_back(think_end);
    state.loss_mask.push_back(1);
  };
  append("list the files", false);
  state.prompt_length = state.length();
  append("abc", true);  // turn 1: 3 reasoning tokens, then a call
  close_think();
  append("call ls", true);
  append("a.txt b.txt", false);  // the tool's result
  append("de", true);            // turn 2: 2
  close_think();
  append("two files", true);
  append("and more", false);
  append("fghi", true);  // turn 3, cut off while reasoning: 4
  state.versions.assign(state.tokens.size(), 0);
  state.logprobs.assign(state.tokens.size(), 0.0f);
  state.generated = 3 + 1 + 7 + 2 + 1 + 9 + 4;

  TrainingSample sample{std::move(state), {}};
  sample.info.problem = Fixture::Problem(42);
  sample.info.subgroup_id = 1;
  sample.info.effort = 50;
  sample.info.agent = true;
  sample.info.outcome.emplace().reward = 1.0;
  auto record = f.TrainOnce({sample}, {50, 100}, think_end);
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_DOUBLE_EQ((*record)["reasoning_length_by_effort"]["50"].get<double>(), 9.0)
      << record->dump();
  // 50 is the lowest level: k = k0, so r_len = -9 / 10.
  EXPECT_NEAR((*record)["reward_by_effort"]["50"].get<double>(), 1.0 - 0.9, 1e-6);
}

// An external harness's episode trains as each of its sequences, all with
// the episode's one advantage, and counts once. At ratio 1 (behaviour
// log-probs are the policy's own) the step's loss is the closed form
// -sum(A * n) / sum(n) over every sequence's generated tokens n; and after
// the step the won episode's second sequence has gained on the lost one,
// re-scored by the model itself.
TEST(GrpoStepTest, HarnessEpisodesTrainEverySequenceWithTheEpisodesAdvantage) {
  Fixture f;
  auto first = Fixture::Problem(21), second = Fixture::Problem(22), third = Fixture::Problem(23);
  TrainingSample won = f.Sample(first, *first, 1);
  const TrainingSample won_second = f.Sample(first, *second, 1);
  TrainingSample lost = f.Sample(first, *third, 1);
  won.info.agent = lost.info.agent = true;
  won.info.outcome.emplace().reward = 1.0;
  lost.info.outcome.emplace().reward = 0.0;
  won.info.sequences.push_back(won_second.state);
  const auto g1 = static_cast<double>(won.state.generated);
  const auto g2 = static_cast<double>(won_second.state.generated);
  const auto g3 = static_cast<double>(lost.state.generated);
  ASSERT_NE(g1 + g2, g3);  // else the closed form is 0 whatever trains
  const double gap_before = f.CompletionLogprob(won_second) - f.CompletionLogprob(lost);

  auto record = f.TrainOnce({won, lost});
  ASSERT_TRUE(record.ok()) << record.status();
  ASSERT_DOUBLE_EQ((*record)["reward_length_mean"].get<double>(), 0.0) << record->dump();
  EXPECT_DOUBLE_EQ((*record)["reward_task_mean"].get<double>(), 0.5) << "two episodes";
  EXPECT_DOUBLE_EQ((*record)["response_length_mean"].get<double>(), (g1 + g2 + g3) / 2);
  EXPECT_NEAR((*record)["ratio_mean"].get<double>(), 1.0, 1e-4) << record->dump();
  const double closed_form = -(0.5 * (g1 + g2) - 0.5 * g3) / (g1 + g2 + g3);
  EXPECT_NEAR((*record)["loss"].get<double>(), closed_form, 1e-4) << record->dump();
  const double gap_after = f.CompletionLogprob(won_second) - f.CompletionLogprob(lost);
  EXPECT_GT(gap_after, gap_before + 0.1) << gap_before << " -> " << gap_after;
}

}  // namespace
}  // namespace loom::train
