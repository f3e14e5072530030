// The UTF-8 rules the tokenizer validates with and the sandbox repairs
// command output with: hand-made sequences of each kind, valid and not.

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "loom/tokenizer/utf8.h"

namespace loom::tokenizer {
namespace {

const std::string kReplacement = "\xEF\xBF\xBD";  // U+FFFD

std::string Replacements(int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += kReplacement;
  return out;
}

TEST(Utf8Test, WellFormedSequencesHaveTheirLength) {
  EXPECT_EQ(Utf8SequenceAt("a", 0), 1);
  EXPECT_EQ(Utf8SequenceAt("\xC2\xA9", 0), 2);              // ©, the lowest two-byte lead
  EXPECT_EQ(Utf8SequenceAt("\xE2\x82\xAC", 0), 3);          // €
  EXPECT_EQ(Utf8SequenceAt("\xEF\xBF\xBD", 0), 3);          // U+FFFD itself
  EXPECT_EQ(Utf8SequenceAt("\xF0\x9F\x98\x80", 0), 4);      // 😀
  EXPECT_EQ(Utf8SequenceAt("\xF4\x8F\xBF\xBF", 0), 4);      // U+10FFFF, the last code point
  EXPECT_EQ(Utf8SequenceAt(std::string("x\0y", 3), 1), 1);  // NUL is a character
}

TEST(Utf8Test, MalformedSequencesHaveNone) {
  EXPECT_EQ(Utf8SequenceAt("\x80", 0), 0);              // a continuation byte alone
  EXPECT_EQ(Utf8SequenceAt("\xC0\xAF", 0), 0);          // overlong '/'
  EXPECT_EQ(Utf8SequenceAt("\xC1\xBF", 0), 0);          // overlong
  EXPECT_EQ(Utf8SequenceAt("\xE0\x9F\xBF", 0), 0);      // overlong three-byte form
  EXPECT_EQ(Utf8SequenceAt("\xED\xA0\x80", 0), 0);      // U+D800, a surrogate
  EXPECT_EQ(Utf8SequenceAt("\xF0\x8F\xBF\xBF", 0), 0);  // overlong four-byte form
  EXPECT_EQ(Utf8SequenceAt("\xF4\x90\x80\x80", 0), 0);  // U+110000
  EXPECT_EQ(Utf8SequenceAt("\xF5\x80\x80\x80", 0), 0);  // no such lead byte
  EXPECT_EQ(Utf8SequenceAt("\xFF", 0), 0);
  EXPECT_EQ(Utf8SequenceAt("\xE2\x82", 0), 0);      // truncated at the end
  EXPECT_EQ(Utf8SequenceAt("\xE2\x82x", 0), 0);     // cut by an ASCII byte
  EXPECT_EQ(Utf8SequenceAt("\xF0\x9F\x98", 0), 0);  // truncated four-byte form
}

TEST(Utf8Test, ValidateNamesTheOffsetOfTheFirstBadByte) {
  EXPECT_TRUE(ValidateUtf8("plain \xE2\x82\xAC and \xF0\x9F\x98\x80").ok());
  const absl::Status bad = ValidateUtf8("ab\xE2\x82\xAC\xC0\xAF");
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("byte offset 5"), std::string::npos) << bad.message();
}

TEST(Utf8Test, RepairReplacesEachBadByteAndKeepsTheRest) {
  EXPECT_EQ(RepairUtf8("ok \xE2\x82\xAC"), "ok \xE2\x82\xAC");
  EXPECT_EQ(RepairUtf8("a\x80z"), "a" + kReplacement + "z");
  EXPECT_EQ(RepairUtf8("\xC0\xAF"), Replacements(2));
  EXPECT_EQ(RepairUtf8("\xED\xA0\x80!"), Replacements(3) + "!");
  // A truncated sequence: its lead and its continuation byte each.
  EXPECT_EQ(RepairUtf8("\xE2\x82"), Replacements(2));
  // The byte after a bad lead still starts a character of its own.
  EXPECT_EQ(RepairUtf8("\xFF\xC2\xA9"), kReplacement + "\xC2\xA9");
}

TEST(Utf8Test, RepairOfAnyBytesIsValidAndLeavesValidTextAlone) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string bytes(rng() % 24, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() % 256);
    const std::string repaired = RepairUtf8(bytes);
    ASSERT_TRUE(ValidateUtf8(repaired).ok()) << trial;
    EXPECT_EQ(RepairUtf8(repaired), repaired) << trial;
    EXPECT_EQ(ValidateUtf8(bytes).ok(), repaired == bytes) << trial;
  }
}

}  // namespace
}  // namespace loom::tokenizer
