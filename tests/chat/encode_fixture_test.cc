// The golden examples of shared/fixtures/dsv4 (copied to tests/chat/data),
// byte for byte: thinking mode, default options.

#include <gtest/gtest.h>

#include "chat/chat_test_util.h"
#include "testing/temp_dir.h"

namespace loom::chat {
namespace {

void ExpectFixture(int n) {
  const std::string input =
      loom::testing::ReadAll(testing::DataPath("test_input_" + std::to_string(n) + ".json"));
  const std::string expected =
      loom::testing::ReadAll(testing::DataPath("test_output_" + std::to_string(n) + ".txt"));
  ASSERT_FALSE(input.empty());
  auto messages = ConversationFromJson(OrderedJson::parse(input));
  ASSERT_TRUE(messages.ok()) << messages.status();
  auto prompt = EncodePrompt(*messages, EncodeOptions{});
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_EQ(*prompt, expected);
}

TEST(EncodeFixtureTest, ToolsAndToolResults) { ExpectFixture(1); }
TEST(EncodeFixtureTest, MultiTurnDropsEarlierThinking) { ExpectFixture(2); }

}  // namespace
}  // namespace loom::chat
