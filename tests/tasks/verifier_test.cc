// Verifiers: each kind's accept / reject rules and malformed responses.

#include "loom/tasks/verifier.h"

#include <gtest/gtest.h>

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

TEST(VerifierTest, ParseAndCheckAnswer) {
  EXPECT_EQ(*ParseVerifierKind("numeric"), VerifierKind::kNumeric);
  EXPECT_FALSE(ParseVerifierKind("fuzzy").ok());
  EXPECT_TRUE(CheckAnswer(VerifierKind::kNumeric, "-4.5").ok());
  EXPECT_FALSE(CheckAnswer(VerifierKind::kNumeric, "four").ok());
  EXPECT_FALSE(CheckAnswer(VerifierKind::kRegex, "a(b").ok());
}

}  // namespace
}  // namespace loom::tasks
