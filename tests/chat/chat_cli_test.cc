// `loom chat encode` and `loom chat parse` as the real binary.

#include <gtest/gtest.h>

#include "chat/chat_test_util.h"
#include "testing/temp_dir.h"

namespace loom::chat {
namespace {

using loom::testing::RunLoom;
using loom::testing::TempDir;

TEST(ChatCliTest, EncodeReproducesTheFixturesWithoutTrailingNewline) {
  for (int n : {1, 2}) {
    const std::string in = testing::DataPath("test_input_" + std::to_string(n) + ".json");
    auto result = RunLoom("chat encode --messages " + in);
    ASSERT_EQ(result.exit_code, 0) << result.err;
    EXPECT_EQ(result.out, loom::testing::ReadAll(
                              testing::DataPath("test_output_" + std::to_string(n) + ".txt")));
  }
}

TEST(ChatCliTest, EncodeOptions) {
  TempDir dir;
  const std::string file = dir.Write("m.json", R"([{"role":"user","content":"Q"}])");
  auto result = RunLoom("chat encode --messages " + file +
                        " --thinking-mode chat --no-bos --reasoning-effort 7");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, "<｜User｜>Q<｜Assistant｜></think>");
  result = RunLoom("chat encode --messages " + file + " --no-bos --reasoning-effort 7");
  EXPECT_EQ(result.out,
            "Reasoning Effort: 7 (range 1–100; higher values request more thorough "
            "reasoning)\n\n<｜User｜>Q<｜Assistant｜><think>");
  // Tiers render their numeric line; the V4 literal mode keeps its own text.
  result = RunLoom("chat encode --messages " + file + " --no-bos --reasoning-effort low");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out.rfind("Reasoning Effort: 50 (range 1–100;", 0), 0u) << result.out;
  result = RunLoom("chat encode --messages " + file + " --no-bos --reasoning-effort v4-high");
  EXPECT_EQ(result.out, "<｜User｜>Q<｜Assistant｜><think>");
}

TEST(ChatCliTest, EncodeRejectsMalformedMessages) {
  TempDir dir;
  auto result =
      RunLoom("chat encode --messages " + dir.Write("m.json", R"([{"role":"user","content":5}])"));
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.err.find("messages[0].content"), std::string::npos) << result.err;
  result = RunLoom("chat encode --messages " + dir.Write("bad.json", "[{"));
  EXPECT_EQ(result.exit_code, 2);
  result = RunLoom("chat encode --reasoning-effort 500 --messages " +
                   dir.Write("ok.json", R"([{"role":"user","content":"Q"}])"));
  EXPECT_EQ(result.exit_code, 2);
}

TEST(ChatCliTest, ParsePrintsJsonOrExitsThree) {
  TempDir dir;
  auto result = RunLoom("chat parse --thinking-mode thinking --completion " +
                        dir.Write("ok.txt", "hmm</think>Hi<｜end▁of▁sentence｜>"));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out,
            "{\"role\":\"assistant\",\"content\":\"Hi\",\"reasoning_content\":\"hmm\","
            "\"tool_calls\":[]}\n");
  result =
      RunLoom("chat parse --thinking-mode thinking --completion " + dir.Write("bad.txt", "no end"));
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_EQ(result.err.rfind("parse error: ", 0), 0u) << result.err;
}

}  // namespace
}  // namespace loom::chat
