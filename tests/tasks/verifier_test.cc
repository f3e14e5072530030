// Verifiers: each kind's accept / reject rules and malformed responses.

#include "loom/tasks/verifier.h"

#include <gtest/gtest.h>

#include <string>

#include "loom/tasks/regex.h"

namespace loom::tasks {
namespace {

TEST(VerifierTest, ExactIgnoresSurroundingAndRepeatedWhitespace) {
  EXPECT_EQ(Verify(VerifierKind::kExact, "7 19 42", "  7  19\n42 \n"), 1.0);
  EXPECT_EQ(Verify(VerifierKind::kExact, "7 19 42", "7 19 43"), 0.0);
  EXPECT_EQ(Verify(VerifierKind::kExact, "tac", "TAC"), 0.0);
}

TEST(VerifierTest, NumericComparesValuesNotText) {
  EXPECT_EQ(Verify(VerifierKind::kNumeric, "132", "132.0"), 1.0);
  EXPECT_EQ(Verify(VerifierKind::kNumeric, "132", " 1.32e2 "), 1.0);
  EXPECT_EQ(Verify(VerifierKind::kNumeric, "0.5", "0.5000001"), 1.0);
  EXPECT_EQ(Verify(VerifierKind::kNumeric, "132", "133"), 0.0);
}

TEST(VerifierTest, NumericRejectsTextAroundTheNumber) {
  EXPECT_EQ(Verify(VerifierKind::kNumeric, "132", "132 apples"), 0.0);
  EXPECT_EQ(Verify(VerifierKind::kNumeric, "132", ""), 0.0);
  EXPECT_EQ(Verify(VerifierKind::kNumeric, "132", "nan"), 0.0);
  EXPECT_EQ(Verify(VerifierKind::kNumeric, "132", "1e999"), 0.0);
}

TEST(VerifierTest, RegexMustMatchTheWholeResponse) {
  EXPECT_EQ(Verify(VerifierKind::kRegex, "[Yy]es", "yes"), 1.0);
  EXPECT_EQ(Verify(VerifierKind::kRegex, "[Yy]es", "yes indeed"), 0.0);
  EXPECT_EQ(Verify(VerifierKind::kRegex, "([", "(["), 0.0);  // bad pattern: no match, no throw
}

// What std::regex could not survive: a quantifier whose bound overflows
// (fuzz_jsonl found it), catastrophic backtracking, and a long answer (one
// recursion per character there). Each ends promptly, a blow-up as no match.
TEST(VerifierTest, RegexMatchingIsBounded) {
  EXPECT_FALSE(CheckAnswer(VerifierKind::kRegex, "a{999999999999999999}").ok());
  auto nested = Regex::Compile("(a+)+$");
  ASSERT_TRUE(nested.ok()) << nested.status();
  auto blown = nested->Matches(std::string(40, 'a') + "b", /*whole=*/false);
  EXPECT_TRUE(absl::IsResourceExhausted(blown.status())) << blown.status();
  EXPECT_EQ(Verify(VerifierKind::kRegex, "(a+)+$", std::string(40, 'a') + "b"), 0.0);
  const std::string long_answer(1 << 20, 'x');
  EXPECT_EQ(Verify(VerifierKind::kRegex, "x*", long_answer), 1.0);
  EXPECT_EQ(Verify(VerifierKind::kRegex, "(x|y)*", long_answer + "z"), 0.0);
  // Substring search, as sandbox output checks use it; invalid UTF-8 is fine.
  auto word = Regex::Compile("result=1[0-9]");
  ASSERT_TRUE(word.ok());
  EXPECT_TRUE(*word->Matches("\xff\xfe result=17 done", /*whole=*/false));
  EXPECT_FALSE(*word->Matches("\xff\xfe result=17 done", /*whole=*/true));
  auto bad = Regex::Compile("a(b");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("offset 3"), std::string::npos) << bad.status();
}

TEST(VerifierTest, ParseAndCheckAnswer) {
  EXPECT_EQ(*ParseVerifierKind("numeric"), VerifierKind::kNumeric);
  EXPECT_FALSE(ParseVerifierKind("fuzzy").ok());
  EXPECT_TRUE(CheckAnswer(VerifierKind::kNumeric, "-4.5").ok());
  EXPECT_FALSE(CheckAnswer(VerifierKind::kNumeric, "four").ok());
  EXPECT_FALSE(CheckAnswer(VerifierKind::kRegex, "a(b").ok());
}

}  // namespace
}  // namespace loom::tasks
