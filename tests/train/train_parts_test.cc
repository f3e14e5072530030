// The trainer's pieces: packing, the SFT example encoding and completion
// judging, against hand-built expectations.

#include <gtest/gtest.h>

#include "loom/algo/judge.h"
#include "loom/tasks/generator.h"
#include "loom/tokenizer/dsv4_tokens.h"
#include "loom/tokenizer/tiny.h"
#include "loom/train/batching.h"
#include "train/encoding.h"

namespace loom::train {
namespace {

std::unique_ptr<tokenizer::Tokenizer> Tiny() {
  auto tok = tokenizer::Tokenizer::FromJson(tokenizer::TinyTokenizerJson(), "tiny");
  EXPECT_TRUE(tok.ok());
  return std::move(*tok);
}

tasks::Problem Arithmetic(uint64_t seed) {
  auto generator = tasks::MakeGenerator("arithmetic");
  EXPECT_TRUE(generator.ok());
  return (*generator)->Generate(seed, 2);
}

std::vector<int64_t> Ids(const tokenizer::Tokenizer& tok, const std::string& text) {
  auto ids = tok.Encode(text);
  EXPECT_TRUE(ids.ok());
  return std::vector<int64_t>(ids->begin(), ids->end());
}

TEST(BatchingTest, SplitByTokensKeepsOrderAndBound) {
  EXPECT_EQ(SplitByTokens({3, 3, 3, 10, 1}, 6),
            (std::vector<std::vector<size_t>>{{0, 1}, {2}, {3}, {4}}));
  EXPECT_EQ(SplitByTokens({}, 6).size(), 0u);
}

TEST(BatchingTest, TeacherForcingShiftsWeightsToTargets) {
  std::vector<int64_t> a = {5, 6, 7}, b = {8, 9};
  std::vector<uint8_t> ma = {0, 1, 1}, mb = {1, 0};
  ShiftedBatch shifted = TeacherForcing({&a, &b}, {&ma, &mb});
  // Position t predicts token t + 1: weights (1, 1, 0 | 0, 0).
  EXPECT_TRUE(at::equal(shifted.target_weight, at::tensor({1.0f, 1.0f, 0.0f, 0.0f, 0.0f})));
  EXPECT_TRUE(at::equal(shifted.batch.targets, at::tensor({6L, 7L, -1L, 9L, -1L})));
  std::vector<float> la = {0, -1, -2}, lb = {-3, -4};
  EXPECT_TRUE(at::equal(ShiftedValues(std::vector<const std::vector<float>*>{&la, &lb}),
                        at::tensor({-1.0f, -2.0f, 0.0f, -4.0f, 0.0f})));
}

TEST(EncodingTest, SftExampleIsPromptPlusMaskedReference) {
  auto tok = Tiny();
  tasks::Problem problem = Arithmetic(3);
  ASSERT_TRUE(problem.reference.has_value());
  auto prompt = EncodeProblemPrompt(problem, 50, *tok);
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  auto example = EncodeSftExample(problem, 50, *tok);
  ASSERT_TRUE(example.ok()) << example.status();
  ASSERT_GT(example->tokens.size(), prompt->size());
  EXPECT_TRUE(std::equal(prompt->begin(), prompt->end(), example->tokens.begin()));
  // The masked part is exactly: reasoning, </think>, answer, EOS.
  std::vector<int64_t> expected =
      Ids(*tok, (*problem.reference)["reasoning_content"].get<std::string>());
  expected.push_back(*tok->TokenToId(tokenizer::dsv4::kThinkClose));
  for (int64_t id : Ids(*tok, (*problem.reference)["content"].get<std::string>()))
    expected.push_back(id);
  expected.push_back(*tok->TokenToId(tokenizer::dsv4::kEos));
  std::vector<int64_t> masked;
  for (size_t t = 0; t < example->tokens.size(); ++t) {
    if (example->loss_mask[t]) masked.push_back(example->tokens[t]);
  }
  EXPECT_EQ(masked, expected);
  // The prompt carries the numeric effort line.
  auto text = tok->Decode(std::vector<int32_t>(prompt->begin(), prompt->end()));
  ASSERT_TRUE(text.ok());
  EXPECT_NE(text->find("Reasoning Effort: 50"), std::string::npos) << *text;
}

// A problem with its own effort is shown at it, in prompts and SFT examples
// alike; efforts left out of prompts (0) stay out.
TEST(EncodingTest, AProblemsOwnEffortWinsOverTheSampledOne) {
  auto tok = Tiny();
  tasks::Problem problem = Arithmetic(5);
  problem.effort = 60;
  auto decoded = [&](const std::vector<int64_t>& ids) {
    return *tok->Decode(std::vector<int32_t>(ids.begin(), ids.end()));
  };
  const std::string prompt = decoded(*EncodeProblemPrompt(problem, 25, *tok));
  EXPECT_NE(prompt.find("Reasoning Effort: 60 "), std::string::npos) << prompt;
  EXPECT_EQ(prompt.find("Reasoning Effort: 25"), std::string::npos) << prompt;
  EXPECT_NE(decoded(EncodeSftExample(problem, 100, *tok)->tokens).find("Reasoning Effort: 60 "),
            std::string::npos);
  EXPECT_EQ(decoded(*EncodeProblemPrompt(problem, 0, *tok)).find("Reasoning Effort"),
            std::string::npos);
}

// restate_effort: the reasoning opens with one capital letter per started
// tenth of the effort the prompt shows, from K on, so that a letter of the
// level's own comes right before the choice to work ("\n") or not
// ("</think>").
TEST(EncodingTest, RestatedEffortOpensTheReasoning) {
  auto tok = Tiny();
  tasks::Problem problem = Arithmetic(6);
  const std::string reasoning = (*problem.reference)["reasoning_content"];
  auto target = [&](const tasks::Problem& p, int effort, bool restate) {
    SftExample example = *EncodeSftExample(p, effort, *tok, restate);
    std::vector<int32_t> masked;
    for (size_t t = 0; t < example.tokens.size(); ++t) {
      if (example.loss_mask[t]) masked.push_back(static_cast<int32_t>(example.tokens[t]));
    }
    return *tok->Decode(masked);
  };
  EXPECT_EQ(target(problem, 75, true).rfind("effort KLMNOPQR\n" + reasoning + "</think>", 0), 0u)
      << target(problem, 75, true);
  EXPECT_EQ(target(problem, 100, true).rfind("effort KLMNOPQRST\n" + reasoning + "</think>", 0),
            0u);
  EXPECT_EQ(target(problem, 1, true).rfind("effort K\n" + reasoning + "</think>", 0), 0u);
  EXPECT_EQ(target(problem, 10, true).rfind("effort K\n" + reasoning + "</think>", 0), 0u);
  EXPECT_EQ(target(problem, 11, true).rfind("effort KL\n" + reasoning + "</think>", 0), 0u);
  EXPECT_EQ(target(problem, 75, false).rfind(reasoning + "</think>", 0), 0u);
  EXPECT_EQ(target(problem, 0, true).rfind(reasoning + "</think>", 0), 0u);
  tasks::Problem own = problem;
  own.effort = 60;
  EXPECT_EQ(target(own, 75, true).rfind("effort KLMNOP\n", 0), 0u);
  (*problem.reference)["reasoning_content"] = "";  // answer-only references restate it too
  EXPECT_EQ(target(problem, 25, true).rfind("effort KLM</think>", 0), 0u)
      << target(problem, 25, true);
}

TEST(EncodingTest, JudgeCompletionRewardsOnlyWellFormedCorrectAnswers) {
  auto tok = Tiny();
  tasks::Problem problem = Arithmetic(4);
  const int64_t think_end = *tok->TokenToId(tokenizer::dsv4::kThinkClose);
  const int64_t eos = *tok->TokenToId(tokenizer::dsv4::kEos);
  auto completion = [&](const std::string& reasoning, const std::string& answer, bool close) {
    std::vector<int64_t> ids = Ids(*tok, reasoning);
    ids.push_back(think_end);
    for (int64_t id : Ids(*tok, answer)) ids.push_back(id);
    if (close) ids.push_back(eos);
    return ids;
  };
  algo::Judgement right =
      algo::JudgeCompletion(problem, completion("work", problem.answer, true), *tok);
  EXPECT_TRUE(right.parsed);
  EXPECT_EQ(right.reward, 1.0);
  algo::Judgement wrong =
      algo::JudgeCompletion(problem, completion("work", problem.answer + "1", true), *tok);
  EXPECT_TRUE(wrong.parsed);
  EXPECT_EQ(wrong.reward, 0.0);
  algo::Judgement cut =
      algo::JudgeCompletion(problem, completion("work", problem.answer, false), *tok);
  EXPECT_FALSE(cut.parsed);
  EXPECT_EQ(cut.reward, 0.0);
  EXPECT_FALSE(cut.parse_error.empty());
}

}  // namespace
}  // namespace loom::train
