// JSON-lines datasets: good lines, and every malformed form getting an error
// that names the file and line.

#include "loom/tasks/jsonl.h"

#include <gtest/gtest.h>

#include "testing/temp_dir.h"

namespace loom::tasks {
namespace {

using loom::testing::TempDir;

std::string ErrorOf(const std::string& line) {
  auto problem = ParseProblemLine(line);
  return problem.ok() ? "" : std::string(problem.status().message());
}

TEST(JsonlTest, ParsesPromptAnswerVerifierAndReference) {
  auto p = ParseProblemLine(
      R"({"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"2+2?"},)"
      R"({"role":"assistant","reasoning_content":"2+2=4","content":"4"}],"answer":4,)"
      R"("verifier":"numeric"})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->messages.size(), 2u);
  EXPECT_EQ(p->messages.back()["content"], "2+2?");
  EXPECT_EQ(p->answer, "4");
  EXPECT_EQ(p->verifier, VerifierKind::kNumeric);
  ASSERT_TRUE(p->reference.has_value());
  EXPECT_EQ((*p->reference)["reasoning_content"], "2+2=4");
  EXPECT_EQ(p->Score(" 4.0 "), 1.0);
}

TEST(JsonlTest, VerifierDefaultsToExactAndReferenceIsOptional) {
  auto p = ParseProblemLine(R"({"messages":[{"role":"user","content":"hi"}],"answer":"hello"})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->verifier, VerifierKind::kExact);
  EXPECT_FALSE(p->reference.has_value());
  EXPECT_EQ(p->effort, 0);  // the run's
}

TEST(JsonlTest, AProblemMayCarryItsOwnEffort) {
  auto p =
      ParseProblemLine(R"({"messages":[{"role":"user","content":"hi"}],"answer":"x","effort":60})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->effort, 60);
}

TEST(JsonlTest, ALineMayNameItselfAndThatNameIsItsTaskId) {
  auto named = ParseProblemLine(
      R"({"id":"trivial-007","messages":[{"role":"user","content":"hi"}],"answer":"x"})");
  ASSERT_TRUE(named.ok()) << named.status();
  named->id = "d/train/3";
  EXPECT_EQ(named->line_id, "trivial-007");
  EXPECT_EQ(named->TaskId(), "trivial-007");
  auto anonymous =
      ParseProblemLine(R"({"messages":[{"role":"user","content":"hi"}],"answer":"x"})");
  ASSERT_TRUE(anonymous.ok());
  anonymous->id = "d/train/3";
  EXPECT_EQ(anonymous->TaskId(), "d/train/3");
}

TEST(JsonlTest, MalformedLinesSayWhatIsWrong) {
  EXPECT_EQ(ErrorOf("{not json"), "not valid JSON");
  EXPECT_EQ(ErrorOf("[1,2]"), "not a JSON object");
  EXPECT_EQ(ErrorOf(R"({"answer":"1"})"), "missing \"messages\"");
  EXPECT_EQ(ErrorOf(R"({"messages":[{"role":"user","content":"q"}]})"), "missing \"answer\"");
  EXPECT_EQ(ErrorOf(R"({"messages":[],"answer":"1"})"), "\"messages\" must be a non-empty array");
  EXPECT_EQ(ErrorOf(R"({"messages":[{"role":"user"}],"answer":"1"})"),
            "messages[0] needs a string \"content\"");
  EXPECT_EQ(ErrorOf(R"({"messages":[{"role":"robot","content":"q"}],"answer":"1"})"),
            "messages[0] has unknown role 'robot'");
  EXPECT_EQ(ErrorOf(R"({"messages":[{"role":"assistant","content":"q"}],"answer":"1"})"),
            "the prompt must end with a user message");
  EXPECT_EQ(ErrorOf(R"({"messages":[{"role":"user","content":"q"}],"answer":[1]})"),
            "\"answer\" must be a string or a number");
  EXPECT_EQ(ErrorOf(R"({"messages":[{"role":"user","content":"q"}],"answer":"1","verifier":"x"})"),
            "unknown verifier 'x' (expected exact, numeric or regex)");
  EXPECT_EQ(ErrorOf(R"({"messages":[{"role":"user","content":"q"}],"answer":"1","extra":1})"),
            "unknown key \"extra\" (expected messages, answer, verifier, effort, id)");
  EXPECT_EQ(ErrorOf(R"({"messages":[{"role":"user","content":"q"}],"answer":"1","id":7})"),
            "\"id\" must be a non-empty string, not 7");
  EXPECT_EQ(ErrorOf(R"({"messages":[{"role":"user","content":"q"}],"answer":"1","id":""})"),
            "\"id\" must be a non-empty string, not \"\"");
  EXPECT_EQ(ErrorOf(R"({"messages":[{"role":"user","content":"q"}],"answer":"1","effort":0})"),
            "\"effort\" must be an integer in 1..100, not 0");
  EXPECT_EQ(ErrorOf(R"({"messages":[{"role":"user","content":"q"}],"answer":"1","effort":7.5})"),
            "\"effort\" must be an integer in 1..100, not 7.5");
  EXPECT_EQ(ErrorOf(R"({"messages":[{"role":"user","content":"q"}],"answer":"1","effort":"max"})"),
            "\"effort\" must be an integer in 1..100, not \"max\"");
  EXPECT_NE(ErrorOf(R"({"messages":[{"role":"user","content":"q"}],"answer":"ten",)"
                    R"("verifier":"numeric"})")
                .find("is not a number"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"messages":[{"role":"user","content":"q"}],"answer":"a(",)"
                    R"("verifier":"regex"})")
                .find("not a valid regex"),
            std::string::npos);
  EXPECT_EQ(ErrorOf("{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}],\"answer\":\"1\"}"),
            "not valid JSON");  // invalid UTF-8
}

TEST(JsonlTest, FileErrorsNameFileAndLine) {
  TempDir dir;
  const std::string good = R"({"messages":[{"role":"user","content":"q"}],"answer":"a"})";
  const std::string path = dir.Write("d.jsonl", good + "\n\n" + good + "\n{\"answer\": 1}\n");
  auto problems = ReadJsonlProblems(path, "d");
  ASSERT_FALSE(problems.ok());
  EXPECT_EQ(problems.status().message(), path + ":4: missing \"messages\"");
}

TEST(JsonlTest, ReadsEveryLineSkippingBlankOnes) {
  TempDir dir;
  const std::string path =
      dir.Write("d.jsonl", R"({"messages":[{"role":"user","content":"a"}],"answer":"1"})"
                           "\n  \n"
                           R"({"messages":[{"role":"user","content":"b"}],"answer":"2"})");
  auto problems = ReadJsonlProblems(path, "d");
  ASSERT_TRUE(problems.ok()) << problems.status();
  ASSERT_EQ(problems->size(), 2u);
  EXPECT_EQ((*problems)[1].id, "d/line3");
  EXPECT_EQ((*problems)[1].dataset, "d");
}

TEST(JsonlTest, MissingAndEmptyFilesAreErrors) {
  TempDir dir;
  auto missing = ReadJsonlProblems(dir / "nope.jsonl", "d");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(absl::IsNotFound(missing.status()));
  auto empty = ReadJsonlProblems(dir.Write("e.jsonl", "\n"), "d");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("empty file"), std::string::npos);
}

}  // namespace
}  // namespace loom::tasks
