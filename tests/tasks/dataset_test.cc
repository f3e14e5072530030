// Datasets: deterministic access, disjoint train / held-out splits, JSONL
// epochs, and config errors.

#include "loom/tasks/dataset.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "testing/temp_dir.h"

namespace loom::tasks {
namespace {

using loom::testing::TempDir;

config::DatasetSection Spec(const std::string& kind) {
  config::DatasetSection spec;
  spec.name = kind + "_set";
  spec.kind = kind;
  spec.min_difficulty = 1;
  spec.max_difficulty = 2;
  spec.eval_size = 20;
  spec.eval_fraction = 0.2;
  return spec;
}

std::unique_ptr<Dataset> Load(const config::DatasetSection& spec, uint64_t seed = 1) {
  auto dataset = LoadDataset(spec, seed);
  EXPECT_TRUE(dataset.ok()) << dataset.status();
  return dataset.ok() ? std::move(*dataset) : nullptr;
}

TEST(DatasetTest, GeneratedIsAPureFunctionOfSeedAndIndex) {
  auto a = Load(Spec("arithmetic"), 5), b = Load(Spec("arithmetic"), 5);
  auto c = Load(Spec("arithmetic"), 6);
  EXPECT_EQ(a->Train(17).messages, b->Train(17).messages);
  EXPECT_EQ(a->Train(17).id, "arithmetic_set/train/17");
  int differing = 0;
  for (uint64_t i = 0; i < 20; ++i) differing += a->Train(i).messages != c->Train(i).messages;
  EXPECT_GT(differing, 10);
}

TEST(DatasetTest, HeldOutPromptsNeverAppearInTraining) {
  for (const char* kind : {"arithmetic", "sort", "reverse"}) {
    auto dataset = Load(Spec(kind));
    ASSERT_EQ(dataset->Eval().size(), 20u) << kind;
    std::set<std::string> held_out;
    for (const auto& p : dataset->Eval()) {
      EXPECT_TRUE(IsHeldOut(p, 0.2));
      held_out.insert(p.messages.dump());
    }
    for (uint64_t i = 0; i < 2000; ++i) {
      ASSERT_FALSE(held_out.count(dataset->Train(i).messages.dump())) << kind << " " << i;
    }
  }
}

// Effort problems share their text: what is held out is an effort.
TEST(DatasetTest, HeldOutEffortsNeverAppearInTraining) {
  auto dataset = Load(Spec("effort"));
  ASSERT_EQ(dataset->Eval().size(), 20u);
  std::set<int> held_out, trained;
  for (const auto& p : dataset->Eval()) held_out.insert(p.effort);
  for (uint64_t i = 0; i < 2000; ++i) trained.insert(dataset->Train(i).effort);
  EXPECT_GE(held_out.size(), 5u);
  EXPECT_GE(trained.size(), 70u);  // eval_fraction 0.2 of the 100 efforts
  EXPECT_LE(held_out.size() + trained.size(), 100u);
  for (int effort : held_out) EXPECT_FALSE(trained.count(effort)) << effort;
}

TEST(DatasetTest, DifficultyStaysInRange) {
  auto spec = Spec("sort");
  spec.min_difficulty = 2;
  spec.max_difficulty = 3;
  auto dataset = Load(spec);
  std::set<int> seen;
  for (uint64_t i = 0; i < 100; ++i) seen.insert(dataset->Train(i).difficulty);
  EXPECT_EQ(seen, (std::set<int>{2, 3}));
}

TEST(DatasetTest, SystemPromptIsPrepended) {
  auto spec = Spec("reverse");
  spec.system_prompt = "Think step by step.";
  auto dataset = Load(spec);
  const Problem p = dataset->Train(0);
  ASSERT_EQ(p.messages.size(), 2u);
  EXPECT_EQ(p.messages[0]["role"], "system");
  EXPECT_EQ(p.messages[0]["content"], "Think step by step.");
}

TEST(DatasetTest, TinyProblemSpaceWithoutHeldOutProblemsIsAClearError) {
  auto spec = Spec("arithmetic");  // 1-digit sums: 200 distinct prompts
  spec.max_difficulty = 1;
  spec.eval_fraction = 1e-6;
  auto dataset = LoadDataset(spec, 1);
  ASSERT_FALSE(dataset.ok());
  EXPECT_NE(dataset.status().message().find("dataset 'arithmetic_set': no eval problem"),
            std::string::npos)
      << dataset.status();
}

TEST(DatasetTest, NoEvalFractionMeansNoEvalSet) {
  auto spec = Spec("arithmetic");
  spec.eval_fraction = 0;
  EXPECT_TRUE(Load(spec)->Eval().empty());
}

TEST(DatasetTest, AnswerOnlyFractionEmptiesThatShareOfTrainingReasoningAndNothingElse) {
  auto full = Load(Spec("arithmetic"));
  auto spec = Spec("arithmetic");
  spec.answer_only_fraction = 0.6;
  auto terse = Load(spec);
  int answer_only = 0;
  const int n = 2000;
  for (uint64_t i = 0; i < n; ++i) {
    const Problem a = full->Train(i), b = terse->Train(i);
    ASSERT_EQ(a.messages, b.messages) << i;
    ASSERT_EQ(a.answer, b.answer) << i;
    ASSERT_EQ((*a.reference)["content"], (*b.reference)["content"]) << i;
    ASSERT_NE((*a.reference)["reasoning_content"], "") << i;
    const auto& reasoning = (*b.reference)["reasoning_content"];
    if (reasoning == "") {
      ++answer_only;
    } else {
      ASSERT_EQ(reasoning, (*a.reference)["reasoning_content"]) << i;
    }
  }
  // Binomial(2000, 0.6): the standard deviation is about 22.
  EXPECT_NEAR(answer_only, 0.6 * n, 110);
  ASSERT_EQ(full->Eval().size(), terse->Eval().size());
  for (size_t i = 0; i < terse->Eval().size(); ++i) {
    EXPECT_EQ(terse->Eval()[i].reference, full->Eval()[i].reference);
  }
}

// With a spread, the answer-only share rises linearly with the difficulty,
// from fraction - spread/2 to fraction + spread/2 (clipped to 0..1).
TEST(DatasetTest, AnswerOnlySpreadTiltsTheShareFromEasyToHardProblems) {
  auto spec = Spec("chain");
  spec.min_difficulty = 2;
  spec.max_difficulty = 6;
  spec.answer_only_fraction = 0.5;
  spec.answer_only_spread = 0.8;
  auto tilted = Load(spec);
  spec.answer_only_fraction = 0.9;  // 0.5 .. 1.3, clipped to 1 from difficulty 5 on
  auto clipped = Load(spec);
  std::map<int, int> seen, bare, clipped_seen, clipped_bare;
  const int n = 5000;
  for (uint64_t i = 0; i < n; ++i) {
    const Problem p = tilted->Train(i), q = clipped->Train(i);
    ++seen[p.difficulty];
    bare[p.difficulty] += (*p.reference)["reasoning_content"] == "";
    ++clipped_seen[q.difficulty];
    clipped_bare[q.difficulty] += (*q.reference)["reasoning_content"] == "";
  }
  for (int d = 2; d <= 6; ++d) {
    ASSERT_GT(seen[d], 800) << d;
    const double want = 0.5 + 0.8 * ((d - 2) / 4.0 - 0.5);  // 0.1, 0.3, 0.5, 0.7, 0.9
    // About 1000 problems a difficulty: the standard deviation is at most 0.016.
    EXPECT_NEAR(static_cast<double>(bare[d]) / seen[d], want, 0.06) << "difficulty " << d;
    const double clipped_want = std::min(1.0, 0.9 + 0.8 * ((d - 2) / 4.0 - 0.5));
    EXPECT_NEAR(static_cast<double>(clipped_bare[d]) / clipped_seen[d], clipped_want, 0.06) << d;
  }
  EXPECT_EQ(clipped_bare[6], clipped_seen[6]);
}

// Answer-only chain references keep the first line of the working (the
// letter naming the steps to go, and the first digit) and nothing after it;
// worked references keep all of it.
TEST(DatasetTest, AnswerOnlyKeepsTheFirstLinesOfTheWorkingWhenAsked) {
  auto spec = Spec("chain");
  spec.min_difficulty = 2;
  spec.max_difficulty = 5;
  auto full = Load(spec);
  spec.answer_only_fraction = 0.5;
  spec.answer_only_keeps_lines = 1;
  auto opening = Load(spec);
  spec.answer_only_keeps_lines = 3;
  auto longer = Load(spec);
  int answer_only = 0;
  const int n = 400;
  for (uint64_t i = 0; i < n; ++i) {
    const std::string worked = (*full->Train(i).reference)["reasoning_content"];
    const std::string shown = (*opening->Train(i).reference)["reasoning_content"];
    const std::string three = (*longer->Train(i).reference)["reasoning_content"];
    ASSERT_EQ((*full->Train(i).reference)["content"], (*opening->Train(i).reference)["content"]);
    if (shown == worked) {
      ASSERT_EQ(three, worked) << i;
      continue;
    }
    ++answer_only;
    const size_t first_break = worked.find('\n');
    ASSERT_NE(first_break, std::string::npos) << worked;
    EXPECT_EQ(shown, worked.substr(0, first_break)) << i;
    EXPECT_EQ(std::count(three.begin(), three.end(), '\n'), 2) << three;
    EXPECT_EQ(worked.compare(0, three.size() + 1, three + "\n"), 0) << i << ": " << three;
  }
  EXPECT_NEAR(answer_only, 0.5 * n, 60);
}

TEST(DatasetTest, PartialReasoningCutsThatShareOfWorkedReferencesAfterSomeOfTheirLines) {
  auto spec = Spec("arithmetic");
  spec.min_difficulty = 2;  // two column lines and the "=result" line: cuts after 1 or 2
  auto full = Load(spec);
  spec.answer_only_fraction = 0.25;
  spec.partial_reasoning_fraction = 0.5;
  auto cut = Load(spec);
  int answer_only = 0, partial = 0, whole = 0;
  std::map<int, int> kept_lines;
  const int n = 2000;
  for (uint64_t i = 0; i < n; ++i) {
    const Problem a = full->Train(i), b = cut->Train(i);
    ASSERT_EQ(a.messages, b.messages) << i;
    ASSERT_EQ((*a.reference)["content"], (*b.reference)["content"]) << i;
    const std::string worked = (*a.reference)["reasoning_content"];
    const std::string shown = (*b.reference)["reasoning_content"];
    if (shown.empty()) {
      ++answer_only;
    } else if (shown == worked) {
      ++whole;
    } else {
      ++partial;
      // A whole number of leading lines: the full reasoning goes on with a line break.
      ASSERT_EQ(worked.compare(0, shown.size() + 1, shown + "\n"), 0) << i << ": " << shown;
      ++kept_lines[static_cast<int>(std::count(shown.begin(), shown.end(), '\n')) + 1];
    }
  }
  // Binomial(2000, 0.25) and then (1500, 0.5): standard deviations about 19 and 19.
  EXPECT_NEAR(answer_only, 0.25 * n, 100);
  EXPECT_NEAR(partial, 0.375 * n, 100);
  EXPECT_NEAR(whole, 0.375 * n, 100);
  // Three-line references of two-digit problems keep one or two lines, about half each
  // (the few with two one-digit operands have two lines and keep one).
  EXPECT_EQ(kept_lines.size(), 2u);
  EXPECT_GT(kept_lines[1], partial / 3);
  EXPECT_GT(kept_lines[2], partial / 3);
  ASSERT_EQ(full->Eval().size(), cut->Eval().size());
  for (size_t i = 0; i < cut->Eval().size(); ++i) {
    EXPECT_EQ(cut->Eval()[i].reference, full->Eval()[i].reference);
  }
}

TEST(DatasetTest, RestateProblemOpensWorkedReferencesWithTheUsersMessage) {
  auto spec = Spec("arithmetic");
  spec.min_difficulty = 2;
  spec.answer_only_fraction = 0.5;
  auto plain = Load(spec);
  spec.restate_problem = true;
  spec.system_prompt = "Be brief.";  // the restated message is the user's, not the system's
  auto restated = Load(spec);
  int worked = 0, bare = 0;
  for (uint64_t i = 0; i < 200; ++i) {
    const Problem a = plain->Train(i), b = restated->Train(i);
    ASSERT_EQ(b.messages.size(), 2u);
    ASSERT_EQ(a.messages.back(), b.messages.back()) << i;
    const std::string user = a.messages.back()["content"];
    ASSERT_EQ(user.rfind("Compute: ", 0), 0u) << user;
    const std::string before = (*a.reference)["reasoning_content"];
    const std::string after = (*b.reference)["reasoning_content"];
    if (before.empty()) {
      EXPECT_EQ(after, "") << i;
      ++bare;
    } else {
      EXPECT_EQ(after, user + "\n" + before) << i;
      ++worked;
    }
    EXPECT_EQ((*a.reference)["content"], (*b.reference)["content"]) << i;
  }
  EXPECT_GT(worked, 60);
  EXPECT_GT(bare, 60);
  ASSERT_EQ(plain->Eval().size(), restated->Eval().size());
  for (size_t i = 0; i < plain->Eval().size(); ++i) {
    EXPECT_EQ(restated->Eval()[i].reference, plain->Eval()[i].reference);
  }
}

TEST(DatasetTest, AnswerRestatesProblemOpensEveryAnswerWithTheUsersMessage) {
  auto spec = Spec("arithmetic");
  spec.min_difficulty = 2;
  auto plain = Load(spec);
  spec.answer_restates_problem = true;
  spec.system_prompt = "Be brief.";  // the restated message is the user's, not the system's
  auto restated = Load(spec);
  auto check = [](const Problem& a, const Problem& b) {
    ASSERT_EQ(a.messages.back(), b.messages.back());
    const std::string user = a.messages.back()["content"];
    ASSERT_EQ(user.rfind("Compute: ", 0), 0u) << user;
    // An independent sum: parse "Compute: x+y" or "Compute: x-y" here.
    const size_t op = user.find_first_of("+-", 9);
    const long x = std::stol(user.substr(9, op - 9)), y = std::stol(user.substr(op + 1));
    const std::string result = std::to_string(user[op] == '+' ? x + y : x - y);
    EXPECT_EQ(b.answer, user + " = " + result);
    EXPECT_EQ((*b.reference)["content"], user + " = " + result);
    EXPECT_EQ((*b.reference)["reasoning_content"], (*a.reference)["reasoning_content"]);
    EXPECT_EQ(b.Score(user + " = " + result), 1.0);
    EXPECT_EQ(b.Score(" " + user + "  =  " + result + "\n"), 1.0);  // spaces normalised
    EXPECT_EQ(b.Score(result), 0.0);  // the result alone is not the answer
    EXPECT_EQ(b.Score(user + " = " + result + "0"), 0.0);
  };
  for (uint64_t i = 0; i < 200; ++i) check(plain->Train(i), restated->Train(i));
  ASSERT_EQ(plain->Eval().size(), restated->Eval().size());
  for (size_t i = 0; i < plain->Eval().size(); ++i) check(plain->Eval()[i], restated->Eval()[i]);
}

TEST(DatasetTest, ReversedAnswerFractionReversesThatShareOfTrainingAnswersAndNothingElse) {
  auto spec = Spec("arithmetic");
  spec.min_difficulty = 2;  // mostly two-digit answers: few read the same both ways
  auto full = Load(spec);
  spec.reversed_answer_fraction = 0.75;
  auto sloppy = Load(spec);
  int reversed = 0, palindromes = 0;
  const int n = 2000;
  for (uint64_t i = 0; i < n; ++i) {
    const Problem a = full->Train(i), b = sloppy->Train(i);
    ASSERT_EQ(a.messages, b.messages) << i;
    ASSERT_EQ(a.answer, b.answer) << i;
    ASSERT_EQ((*a.reference)["reasoning_content"], (*b.reference)["reasoning_content"]) << i;
    const std::string right = (*a.reference)["content"], written = (*b.reference)["content"];
    const std::string backwards(right.rbegin(), right.rend());
    ASSERT_TRUE(written == right || written == backwards) << i << ": " << written;
    if (right == backwards) {
      ++palindromes;
    } else if (written == backwards) {
      ++reversed;
      EXPECT_EQ(b.Score(written), 0.0) << "the verifier must reject a reversed answer: " << written;
    }
  }
  // Binomial(n - palindromes, 0.75): the standard deviation is under 20.
  EXPECT_NEAR(reversed, 0.75 * (n - palindromes), 100);
  EXPECT_LT(palindromes, n / 4);
  ASSERT_EQ(full->Eval().size(), sloppy->Eval().size());
  for (size_t i = 0; i < sloppy->Eval().size(); ++i) {
    EXPECT_EQ(sloppy->Eval()[i].reference, full->Eval()[i].reference);
  }
}

std::string Line(int i) {
  return R"({"messages":[{"role":"user","content":"q)" + std::to_string(i) + R"("}],"answer":")" +
         std::to_string(i) + "\"}\n";
}

TEST(DatasetTest, JsonlEpochsVisitEveryTrainingLineOnceInAShuffledOrder) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 50; ++i) text += Line(i);
  auto spec = Spec("jsonl");
  spec.path = dir.Write("d.jsonl", text);
  spec.eval_size = 0;
  auto dataset = Load(spec);
  const size_t train_lines = 50 - dataset->Eval().size();
  std::multiset<std::string> epoch0, epoch1;
  std::vector<std::string> order0, order1;
  for (uint64_t i = 0; i < train_lines; ++i) {
    order0.push_back(dataset->Train(i).answer);
    order1.push_back(dataset->Train(i + train_lines).answer);
  }
  epoch0.insert(order0.begin(), order0.end());
  epoch1.insert(order1.begin(), order1.end());
  EXPECT_EQ(std::set<std::string>(order0.begin(), order0.end()).size(), train_lines);
  EXPECT_EQ(epoch0, epoch1);
  EXPECT_NE(order0, order1);
  for (const auto& p : dataset->Eval()) EXPECT_FALSE(epoch0.count(p.answer));
}

TEST(DatasetTest, JsonlSeparateEvalFile) {
  TempDir dir;
  auto spec = Spec("jsonl");
  spec.path = dir.Write("train.jsonl", Line(1) + Line(2));
  spec.eval_path = dir.Write("eval.jsonl", Line(3));
  auto dataset = Load(spec);
  ASSERT_EQ(dataset->Eval().size(), 1u);
  EXPECT_EQ(dataset->Eval()[0].answer, "3");
  EXPECT_EQ(dataset->Eval()[0].id, "jsonl_set/eval/0");
}

TEST(DatasetTest, JsonlErrorsPropagateWithFileAndLine) {
  TempDir dir;
  auto spec = Spec("jsonl");
  spec.path = dir.Write("bad.jsonl", Line(1) + "{oops\n");
  auto dataset = LoadDataset(spec, 1);
  ASSERT_FALSE(dataset.ok());
  EXPECT_EQ(dataset.status().message(), spec.path + ":2: not valid JSON");
}

}  // namespace
}  // namespace loom::tasks
