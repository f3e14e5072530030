// The trainer side of a multi-turn episode in the DeepSeek-V4 format: worker
// messages are rendered by the chat module (tool schemas included), fixed
// DSV4 completions are parsed into the worker's replies, and a malformed one
// becomes a format-error observation. Runs against a real worker process.

#include <gtest/gtest.h>

#include "loom/agent/chat_bridge.h"
#include "loom/chat/encoder.h"
#include "loom/rpc/worker_pool.h"
#include "sandbox/worker_fixture.h"

namespace loom {
namespace {

const std::string kEos = "<｜end▁of▁sentence｜>";

std::string ToolCallCompletion(const std::string& reasoning, const std::string& tool,
                               const std::string& param, const std::string& value) {
  return reasoning + "</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"" + tool +
         "\">\n<｜DSML｜parameter name=\"" + param + "\" string=\"true\">" + value +
         "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + kEos;
}

// Plays fixed completions; keeps the conversation the way a trainer would
// and renders its prompt with the chat module before every turn.
class Dsv4ScriptedPolicy {
 public:
  explicit Dsv4ScriptedPolicy(std::vector<std::string> completions)
      : completions_(std::move(completions)) {}

  absl::StatusOr<v1::GenerateReply> operator()(const v1::GenerateRequest& request) {
    for (const v1::Message& m : request.append()) {
      absl::StatusOr<chat::Message> message = agent::ToChatMessage(m);
      if (!message.ok()) return message.status();
      conversation_.push_back(*message);
    }
    absl::StatusOr<std::string> prompt = chat::EncodePrompt(conversation_, chat::EncodeOptions());
    if (!prompt.ok()) return prompt.status();
    prompts_.push_back(*prompt);
    v1::GenerateReply reply = agent::ReplyFromCompletion(
        completions_.at(request.turn()), chat::ThinkingMode::kThinking, request.turn());
    if (reply.has_assistant()) {
      absl::StatusOr<chat::Message> assistant = agent::ToChatMessage(reply.assistant());
      if (!assistant.ok()) return assistant.status();
      conversation_.push_back(*assistant);
    }
    return reply;
  }

  const std::vector<std::string>& prompts() const { return prompts_; }

 private:
  std::vector<std::string> completions_;
  std::vector<chat::Message> conversation_;
  std::vector<std::string> prompts_;
};

TEST(Dsv4EpisodeTest, ToolCallsAndFormatErrorsRoundTrip) {
  auto workers = testing_support::StartWorkers(1, 1);
  ASSERT_TRUE(workers);
  rpc::PoolOptions options;
  options.targets = workers->targets();
  rpc::WorkerPool pool(options);
  v1::RunEpisode episode;
  episode.mutable_task()->set_id("sum");
  episode.mutable_task()->set_problem("What is 1234567 * 7654321?");
  episode.mutable_task()->mutable_verification()->set_exact_answer("9449772114007");
  Dsv4ScriptedPolicy policy({
      ToolCallCompletion("Too big by heart.", "python", "code", "print(1234567 * 7654321)"),
      "I forgot to close my reasoning",
      ToolCallCompletion("Submit it.", "submit", "answer", "9449772114007"),
  });
  v1::Trajectory t =
      pool.RunEpisode(episode, [&](const v1::GenerateRequest& r) { return policy(r); });
  EXPECT_FALSE(t.penalty()) << t.failure_reason();
  EXPECT_EQ(t.verdict().reward(), 1.0) << t.verdict().details();
  EXPECT_EQ(t.format_errors(), 1);
  ASSERT_EQ(policy.prompts().size(), 3u);
  // Turn 0: the chat module rendered the worker's tool list into the prompt.
  EXPECT_NE(policy.prompts()[0].find("## Tools"), std::string::npos);
  EXPECT_NE(policy.prompts()[0].find("\"name\": \"write_file\""), std::string::npos);
  // Turn 1: the python result came back as a tool result in the next user turn.
  EXPECT_NE(policy.prompts()[1].find("<tool_result>9449772114007\n</tool_result>"),
            std::string::npos)
      << policy.prompts()[1];
  // Turn 2: the unparsable completion became a format-error observation.
  EXPECT_NE(policy.prompts()[2].find("Format error"), std::string::npos);
}

TEST(ChatBridgeTest, MalformedInputsAreErrorsNotCrashes) {
  v1::Message bad_role;
  bad_role.set_role("narrator");
  EXPECT_FALSE(agent::ToChatMessage(bad_role).ok());
  v1::Message bad_tools;
  bad_tools.set_role("system");
  bad_tools.set_tools_json("{not json");
  EXPECT_FALSE(agent::ToChatMessage(bad_tools).ok());
  for (const char* text : {"", "no think close", "</think>", "x</think>y<｜DSML｜tool_calls>"}) {
    v1::GenerateReply reply = agent::ReplyFromCompletion(text, chat::ThinkingMode::kThinking, 0);
    EXPECT_EQ(reply.result_case(), v1::GenerateReply::kParseError) << text;
  }
  // A parse error quotes the completion, cut between characters: the reply
  // still crosses the wire (protobuf strings must be UTF-8).
  const std::string cut_in_a_character = "hm</think>42" + kEos + std::string(59, 'a') + "ééé";
  v1::GenerateReply quoted =
      agent::ReplyFromCompletion(cut_in_a_character, chat::ThinkingMode::kThinking, 0);
  ASSERT_EQ(quoted.result_case(), v1::GenerateReply::kParseError);
  EXPECT_NE(quoted.parse_error().find(std::string(59, 'a') + "...'"), std::string::npos)
      << quoted.parse_error();
  v1::GenerateReply received;
  EXPECT_TRUE(received.ParseFromString(quoted.SerializeAsString()));
  v1::GenerateReply ok =
      agent::ReplyFromCompletion("hm</think>42" + kEos, chat::ThinkingMode::kThinking, 3);
  ASSERT_TRUE(ok.has_assistant());
  EXPECT_EQ(ok.assistant().content(), "42");
  EXPECT_EQ(ok.turn(), 3);
}

}  // namespace
}  // namespace loom
