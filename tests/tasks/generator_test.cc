// Built-in generators: determinism, difficulty, and that every reference
// solution is right (checked by recomputing the answer from the prompt).

#include "loom/tasks/generator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

namespace loom::tasks {
namespace {

std::unique_ptr<TaskGenerator> Make(const std::string& kind) {
  auto generator = MakeGenerator(kind);
  EXPECT_TRUE(generator.ok()) << generator.status();
  return std::move(*generator);
}

std::string UserText(const Problem& p) { return p.messages.back()["content"]; }
std::string Reasoning(const Problem& p) { return (*p.reference)["reasoning_content"]; }

TEST(GeneratorTest, SameSeedSameProblemDifferentSeedDifferentProblem) {
  for (const char* kind : {"arithmetic", "sort", "reverse", "chain"}) {
    auto generator = Make(kind);
    EXPECT_EQ(generator->Generate(42, 3).messages, generator->Generate(42, 3).messages) << kind;
    EXPECT_NE(generator->Generate(42, 3).messages, generator->Generate(43, 3).messages) << kind;
  }
}

TEST(GeneratorTest, ArithmeticAnswerIsTheTrueResultAndReferenceIsCorrect) {
  auto generator = Make("arithmetic");
  for (uint64_t seed = 0; seed < 200; ++seed) {
    Problem p = generator->Generate(seed, 4);
    long long a = 0, b = 0;
    char op = 0;
    std::istringstream(UserText(p).substr(std::string("Compute: ").size())) >> a >> op >> b;
    ASSERT_TRUE(op == '+' || op == '-') << UserText(p);
    EXPECT_LT(std::max(a, b), 10000);
    const long long want = op == '+' ? a + b : a - b;
    EXPECT_GE(want, 0);
    EXPECT_EQ(p.answer, std::to_string(want));
    EXPECT_EQ(p.Score((*p.reference)["content"]), 1.0);
    EXPECT_EQ(p.verifier, VerifierKind::kNumeric);
  }
}

TEST(GeneratorTest, ArithmeticScratchpadWorksEachColumn) {
  auto generator = Make("arithmetic");
  // The first addition's lines, recomputed column by column.
  for (uint64_t seed = 0;; ++seed) {
    Problem p = generator->Generate(seed, 2);
    const std::string text = UserText(p);
    if (text.find('+') == std::string::npos) continue;
    long long a = 0, b = 0;
    char op = 0;
    std::istringstream(text.substr(9)) >> a >> op >> b;
    std::string want;
    int carry = 0;
    for (long long x = a, y = b; x > 0 || y > 0; x /= 10, y /= 10) {
      const int s = static_cast<int>(x % 10 + y % 10) + carry;
      want += std::to_string(x % 10) + "+" + std::to_string(y % 10) + "+" + std::to_string(carry) +
              "=" + std::to_string(s) + " c" + std::to_string(s / 10) + "\n";
      carry = s / 10;
    }
    if (a == 0 && b == 0) want = "0+0+0=0 c0\n";
    EXPECT_EQ(Reasoning(p), want + "=" + std::to_string(a + b)) << text;
    break;
  }
}

TEST(GeneratorTest, SortListLengthFollowsDifficultyAndReferenceIsSorted) {
  auto generator = Make("sort");
  Problem p = generator->Generate(7, 4);
  std::istringstream in(UserText(p).substr(std::string("Sort: ").size()));
  std::vector<int> values;
  for (int v; in >> v;) values.push_back(v);
  ASSERT_EQ(values.size(), 5u);
  std::sort(values.begin(), values.end());
  std::string want;
  for (int v : values) want += (want.empty() ? "" : " ") + std::to_string(v);
  EXPECT_EQ(p.answer, want);
  const std::string reasoning = Reasoning(p);
  EXPECT_EQ(std::count(reasoning.begin(), reasoning.end(), '\n'), 4);
  EXPECT_EQ(reasoning.substr(0, reasoning.find(' ')), std::to_string(values[0]));
}

TEST(GeneratorTest, ReverseSpellsTheWordBackwards) {
  auto generator = Make("reverse");
  Problem p = generator->Generate(3, 1);
  const std::string word = UserText(p).substr(std::string("Reverse: ").size());
  ASSERT_EQ(word.size(), 3u);
  EXPECT_EQ(p.answer, std::string(word.rbegin(), word.rend()));
  EXPECT_EQ(Reasoning(p), std::string("3 ") + word[2] + "\n2 " + word[1] + "\n1 " + word[0]);
}

// The chain recomputed from the prompt's two digits: each digit the sum of
// the two before mod 10, one scratchpad line each under a letter counting
// the steps still to go down to "a"; the answer is the last digit.
TEST(GeneratorTest, ChainAddsTheTwoDigitsBeforeForDifficultySteps) {
  auto generator = Make("chain");
  for (int steps : {1, 4, 9}) {
    for (uint64_t seed = 0; seed < 50; ++seed) {
      Problem p = generator->Generate(seed, steps);
      std::istringstream in(UserText(p));
      std::string chain, from;
      int told = -1, x = -1, y = -1;
      in >> chain >> told >> from >> x >> y;
      ASSERT_EQ(chain + " " + from, "Chain from") << UserText(p);
      ASSERT_EQ(told, steps);
      ASSERT_TRUE(x >= 0 && x <= 9 && y >= 0 && y <= 9) << UserText(p);
      std::vector<int> digits = {x, y};
      while (static_cast<int>(digits.size()) < steps + 2) {
        digits.push_back((digits[digits.size() - 1] + digits[digits.size() - 2]) % 10);
      }
      std::vector<std::string> lines;
      std::istringstream pad(Reasoning(p));
      for (std::string line; std::getline(pad, line);) lines.push_back(line);
      ASSERT_EQ(lines.size(), digits.size()) << Reasoning(p);
      for (size_t i = 0; i < lines.size(); ++i) {
        const char left = static_cast<char>('a' + steps + 1 - static_cast<int>(i));
        EXPECT_EQ(lines[i], left + std::to_string(digits[i])) << Reasoning(p);
      }
      EXPECT_EQ(p.answer, std::to_string(digits.back()));
      EXPECT_EQ(p.Score((*p.reference)["content"]), 1.0);
      EXPECT_EQ(p.Score(std::to_string((digits.back() + 1) % 10)), 0.0);
      EXPECT_EQ(p.difficulty, steps);
    }
  }
}

// Every effort 1..100 comes up, each problem is shown at its own effort and
// its answer is that effort; the text alone is the same for all.
TEST(GeneratorTest, EffortProblemsAskForTheirOwnEffort) {
  auto generator = Make("effort");
  std::vector<bool> seen(101, false);
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    Problem p = generator->Generate(seed, 1);
    ASSERT_GE(p.effort, 1);
    ASSERT_LE(p.effort, 100);
    seen[p.effort] = true;
    EXPECT_EQ(p.answer, std::to_string(p.effort));
    EXPECT_EQ(Reasoning(p), "");
    EXPECT_EQ(UserText(p), UserText(generator->Generate(0, 1)));
  }
  EXPECT_EQ(std::count(seen.begin() + 1, seen.end(), true), 100);
}

TEST(GeneratorTest, UnknownKindIsAnError) {
  auto generator = MakeGenerator("chess");
  ASSERT_FALSE(generator.ok());
  EXPECT_NE(generator.status().message().find("chess"), std::string::npos);
}

}  // namespace
}  // namespace loom::tasks
