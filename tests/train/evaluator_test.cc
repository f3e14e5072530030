// The evaluator's engine: its KV pool is sized for its own batch (counted in
// tokens, not timed), and its greedy results are those of an independent
// decode of the same prompts, one at a time on a pool of their own
// (`loom generate`'s loop), judged by the same verifier.

#include "loom/train/evaluator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "loom/model/transformer.h"
#include "loom/tokenizer/dsv4_tokens.h"
#include "train/encoding.h"
#include "train/train_fixture.h"

namespace loom::train {
namespace {

float kEosGain = 8;

struct Fixture : TrainFixture {
  Fixture() {
    config.rollout.max_batch = 8;
    config.rollout.max_new_tokens = 40;
    config::DatasetSection sums, sorts;
    sums.name = "sums";
    sums.eval_size = 12;
    sorts.name = "sorts";
    sorts.kind = "sort";
    sorts.eval_size = 5;
    config.tasks.datasets = {sums, sorts};
    datasets = std::move(*tasks::LoadDatasets(config.tasks, 3));
    Build(TinyModelConfig("llama"), 11, /*requires_grad=*/false);
    special_tokens = *chat::SpecialTokenIds::Resolve(*tokenizer);
    // A random model almost never picks EOS; a louder EOS row makes it stop
    // at different lengths on different prompts.
    at::NoGradGuard no_grad;
    for (auto& [name, weight] : model->NamedParameters()) {
      if (name == "lm_head.weight") weight[special_tokens.eos].mul_(kEosGain);
    }
  }

  int Effort() const {
    return config.effort.PromptEffort(
        *std::max_element(config.effort.levels.begin(), config.effort.levels.end()));
  }
};

// Greedy decode of one prompt, alone, on a pool of its own: the generated
// tokens, EOS included when it came (as the engine reports them).
std::vector<int64_t> DecodeAlone(const model::Transformer& model, std::vector<int64_t> prompt,
                                 int64_t max_new, int64_t eos) {
  model::KvBlockPool pool(model.PoolOptions(prompt.size() + max_new + 1));
  model::KvSequence seq;
  std::vector<int64_t> next = std::move(prompt), completion;
  while (static_cast<int64_t>(completion.size()) < max_new) {
    auto step = model.Step({{&seq, next}}, pool);
    EXPECT_TRUE(step.ok()) << step.status();
    if (!step.ok()) break;
    const at::Tensor logits = step->logits[0].contiguous();
    const float* row = logits.data_ptr<float>();
    const int64_t token = std::max_element(row, row + logits.size(0)) - row;  // first maximum
    completion.push_back(token);
    if (token == eos) break;
    next = {token};
  }
  return completion;
}

TEST(EvaluatorTest, PoolHoldsItsOwnBatchNotTheRunsPool) {
  Fixture f;
  int64_t longest = 0, problems = 0;
  for (const auto& dataset : f.datasets) {
    for (const tasks::Problem& problem : dataset->Eval()) {
      longest = std::max<int64_t>(
          longest,
          static_cast<int64_t>(EncodeProblemPrompt(problem, f.Effort(), *f.tokenizer)->size()));
      ++problems;
    }
  }
  ASSERT_EQ(problems, 17);
  auto result = Evaluate(f.eval_inputs(), *f.model, {});
  ASSERT_TRUE(result.ok()) << result.status();
  // 8 running samples (max_batch) at their longest, each rounded up to 16-token blocks.
  const int64_t per_sample = (longest + 40 + 15) / 16 * 16;
  EXPECT_EQ(result->pool_tokens, 8 * per_sample);
  EXPECT_LT(result->pool_tokens, f.config.rollout.pool_tokens / 10);
  EXPECT_EQ(result->problems, 17);
  EXPECT_EQ(result->skipped, 0);
}

TEST(EvaluatorTest, PoolNeverExceedsTheRunsAndFewPromptsNeedFewSlots) {
  rollout::EngineOptions run;
  run.max_batch = 64;
  run.block_size = 16;
  run.pool_tokens = 4096;
  EXPECT_EQ(EvalPoolTokens(run, 3, 20, 10, 1024), 3 * 32);        // 30 tokens -> 2 blocks each
  EXPECT_EQ(EvalPoolTokens(run, 1000, 100, 28, 1024), 4096);      // 64 · 128 > the run's pool
  EXPECT_EQ(EvalPoolTokens(run, 2, 1000, 1000, 1024), 2 * 1024);  // capped by the context
  EXPECT_EQ(EvalPoolTokens(run, 0, 0, 0, 1024), 16);              // nothing to evaluate: one block
}

TEST(EvaluatorTest, ResultsEqualAnIndependentGreedyDecode) {
  Fixture f;
  std::map<std::string, std::pair<double, int64_t>> per_dataset;
  double total = 0;
  int64_t parsed = 0, generated = 0, n = 0;
  std::vector<int64_t> lengths;
  for (const auto& dataset : f.datasets) {
    for (const tasks::Problem& problem : dataset->Eval()) {
      auto prompt = EncodeProblemPrompt(problem, f.Effort(), *f.tokenizer);
      ASSERT_TRUE(prompt.ok()) << prompt.status();
      const std::vector<int64_t> completion =
          DecodeAlone(*f.model, *prompt, 40, f.special_tokens.eos);
      const algo::Judgement judgement = algo::JudgeCompletion(problem, completion, *f.tokenizer);
      per_dataset[problem.dataset].first += judgement.reward;
      ++per_dataset[problem.dataset].second;
      total += judgement.reward;
      parsed += judgement.parsed;
      generated += static_cast<int64_t>(completion.size());
      lengths.push_back(static_cast<int64_t>(completion.size()));
      ++n;
    }
  }
  // The comparison means something only if the completions differ in length.
  ASSERT_NE(*std::min_element(lengths.begin(), lengths.end()),
            *std::max_element(lengths.begin(), lengths.end()));

  // With prefix sharing the prompts' common head (the effort line and the
  // chat template, at least one 16-token block) is computed once.
  std::vector<int64_t> first, head;
  for (const auto& dataset : f.datasets) {
    for (const tasks::Problem& problem : dataset->Eval()) {
      const std::vector<int64_t> prompt = *EncodeProblemPrompt(problem, f.Effort(), *f.tokenizer);
      if (first.empty()) first = head = prompt;
      const auto end = std::mismatch(head.begin(), head.end(), prompt.begin(), prompt.end()).first;
      head.erase(end, head.end());
    }
  }
  ASSERT_GE(head.size(), 16u);
  for (bool share : {false, true}) {
    f.config.rollout.prefix_cache.enabled = share;
    auto result = Evaluate(f.eval_inputs(), *f.model, {});
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->problems, n);
    EXPECT_DOUBLE_EQ(result->overall, total / n) << "sharing " << share;
    EXPECT_DOUBLE_EQ(result->parse_rate, static_cast<double>(parsed) / n) << "sharing " << share;
    EXPECT_DOUBLE_EQ(result->mean_length, static_cast<double>(generated) / n)
        << "sharing " << share;
    for (const auto& [name, sum_count] : per_dataset) {
      EXPECT_DOUBLE_EQ(result->accuracy.at(name), sum_count.first / sum_count.second) << name;
    }
  }
}

// EvalTally, the arithmetic behind every `loom eval` cell, on completions
// written by hand and counted by hand: 3 problems × K = 2 samples.
TEST(EvalTallyTest, HandCountedCell) {
  TrainFixture f;
  const int64_t think_end = *f.tokenizer->SpecialTokenId(tokenizer::dsv4::kThinkClose);
  const int64_t eos = *f.tokenizer->SpecialTokenId(tokenizer::dsv4::kEos);
  tasks::Problem problem;
  problem.answer = "12";
  problem.verifier = tasks::VerifierKind::kNumeric;
  // The tokens after the prompt's `<think>`; the tiny tokenizer spends one
  // token per byte.
  auto completion = [&](const std::string& text, bool eos_came) {
    const std::vector<int32_t> ids = *f.tokenizer->Encode(text);
    std::vector<int64_t> tokens(ids.begin(), ids.end());
    if (eos_came) tokens.push_back(eos);
    return tokens;
  };
  auto add = [&](EvalTally& tally, size_t index, const std::vector<int64_t>& tokens) {
    tally.Add(index, tokens, algo::JudgeCompletion(problem, tokens, *f.tokenizer), think_end);
  };
  EvalTally tally(3);
  // Problem 0: right after 5 reasoning tokens (5+1+2+1 = 9 tokens);
  // wrong with no reasoning (0+1+2+1 = 4).
  add(tally, 0, completion("7+5=c</think>12", true));
  add(tally, 0, completion("</think>13", true));
  // Problem 1: wrong after 4 (4+1+2+1 = 8); cut off while reasoning: 6
  // reasoning tokens, 6 generated, malformed.
  add(tally, 1, completion("7+5=</think>11", true));
  add(tally, 1, completion("7+5=1c", false));
  // Problem 2: its prompt could not start, twice.
  tally.AddUnstarted(true);
  tally.AddUnstarted(false);

  EvalCell cell;
  cell.problems = 3;
  tally.Fill(cell);
  EXPECT_EQ(tally.samples, 6);
  EXPECT_EQ(tally.skipped, 1);
  EXPECT_DOUBLE_EQ(cell.pass_at_1, 1.0 / 6);
  // Per problem 1/2, 0, 0: squared deviations 1/9 + 1/36 + 1/36 = 1/6,
  // over n - 1 = 2 and n = 3: 1/36.
  EXPECT_DOUBLE_EQ(cell.pass_at_1_stderr, 1.0 / 6);
  EXPECT_DOUBLE_EQ(cell.pass_at_k, 1.0 / 3);
  EXPECT_DOUBLE_EQ(cell.mean_reasoning_tokens, (5 + 0 + 4 + 6) / 6.0);
  EXPECT_DOUBLE_EQ(cell.mean_response_tokens, (9 + 4 + 8 + 6) / 6.0);
  EXPECT_DOUBLE_EQ(cell.parse_rate, 3.0 / 6);
}

// The change between two efforts is paired by problem: a problem both get
// right (or both wrong) adds no spread, unlike two independent errors.
TEST(EvalTallyTest, ChangeIsPairedByProblem) {
  algo::Judgement right, wrong;
  right.reward = 1;
  wrong.reward = 0;
  // 3 problems × K = 2; per-problem pass@1 0, 1/2, 1 at the lower effort
  // and 1/2, 1, 1 at the higher.
  EvalTally lower(3), higher(3);
  const std::vector<int64_t> none;
  for (const auto& [problem, a, b] :
       std::vector<std::tuple<size_t, algo::Judgement, algo::Judgement>>{
           {0, wrong, wrong}, {1, right, wrong}, {2, right, right}}) {
    lower.Add(problem, none, a, -1);
    lower.Add(problem, none, b, -1);
  }
  for (const auto& [problem, a, b] :
       std::vector<std::tuple<size_t, algo::Judgement, algo::Judgement>>{
           {0, right, wrong}, {1, right, right}, {2, right, right}}) {
    higher.Add(problem, none, a, -1);
    higher.Add(problem, none, b, -1);
  }
  EvalCell cell;
  FillChange(lower, 25, higher, cell);
  EXPECT_EQ(cell.change_from, 25);
  // Differences 1/2, 1/2, 0: mean 1/3; squared deviations 1/36 + 1/36 + 1/9
  // = 1/6, over n - 1 = 2 and n = 3: 1/36. Unpaired, the two cells' errors
  // (√(1/12) and 1/6) would combine to √(1/12 + 1/36) = 1/3.
  EXPECT_DOUBLE_EQ(cell.pass_at_1_change, 1.0 / 3);
  EXPECT_DOUBLE_EQ(cell.pass_at_1_change_stderr, 1.0 / 6);
  // One value and none have no spread.
  EXPECT_EQ(MeanAndStderr({0.25}), std::make_pair(0.25, 0.0));
  EXPECT_EQ(MeanAndStderr({}), std::make_pair(0.0, 0.0));
}

}  // namespace
}  // namespace loom::train
