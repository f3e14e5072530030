// The Responses dialect: requests shaped as Codex sends them become turns in
// the chat format's messages, every malformed or unsupported form is refused
// naming the request's own field, and a streamed response's events rebuild
// exactly the output the whole response gives.

#include <gtest/gtest.h>

#include "absl/strings/str_split.h"
#include "loom/serve/openai_responses.h"

namespace loom::serve {
namespace {

using chat::OrderedJson;

OrderedJson InputText(const std::string& text) { return {{"type", "input_text"}, {"text", text}}; }

// A Codex 0.171 conversation after one tool call: developer instructions, the
// environment as a user message, the model's reasoning, message and function
// call, and the call's output; function tools beside a namespace of
// sub-agent tools and the hosted web search.
OrderedJson CodexShaped() {
  return {
      {"model", "tiny"},
      {"instructions", "You are a coding agent."},
      {"input",
       {{{"type", "message"}, {"role", "developer"}, {"content", {InputText("Be careful.")}}},
        {{"type", "message"}, {"role", "user"}, {"content", {InputText("<environment_context/>")}}},
        {{"type", "message"}, {"role", "user"}, {"content", {InputText("List files.")}}},
        {{"type", "reasoning"},
         {"id", "rs_1"},
         {"summary", OrderedJson::array()},
         {"content", {{{"type", "reasoning_text"}, {"text", "I will run ls."}}}},
         {"encrypted_content", nullptr}},
        {{"type", "message"},
         {"role", "assistant"},
         {"content", {{{"type", "output_text"}, {"text", "Listing."}}}}},
        {{"type", "function_call"},
         {"call_id", "call_7"},
         {"name", "exec_command"},
         {"arguments", "{\"cmd\":\"ls\"}"}},
        {{"type", "function_call_output"}, {"call_id", "call_7"}, {"output", "a.txt\n"}},
        {{"role", "user"}, {"content", "Thanks."}}}},
      {"tools",
       {{{"type", "function"},
         {"name", "exec_command"},
         {"description", "Runs a command."},
         {"strict", false},
         {"parameters", {{"type", "object"}, {"properties", {{"cmd", {{"type", "string"}}}}}}}},
        {{"type", "namespace"}, {"name", "multi_agent_v1"}, {"tools", OrderedJson::array()}},
        {{"type", "web_search"}, {"external_web_access", false}}}},
      {"tool_choice", "auto"},
      {"parallel_tool_calls", true},
      {"reasoning", {{"effort", "low"}, {"summary", "auto"}}},
      {"store", false},
      {"stream", true},
      {"include", {"reasoning.encrypted_content"}},
      {"prompt_cache_key", "abc"},
      {"max_output_tokens", 77},
      {"client_metadata", {{"thread_id", "t"}}}};
}

TEST(OpenAiResponsesTest, ACodexRequestBecomesATurn) {
  auto r = ParseResponsesRequest(CodexShaped().dump());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "tiny");
  const TurnRequest& turn = r->turn;
  EXPECT_TRUE(turn.stream);
  EXPECT_EQ(turn.effort, "low");
  EXPECT_EQ(turn.max_tokens, 77);
  ASSERT_EQ(turn.messages.size(), 7u);
  EXPECT_EQ(turn.messages[0].role, chat::Role::kSystem);
  EXPECT_EQ(turn.messages[0].content, "You are a coding agent.");
  // Only the function tool reaches the prompt.
  ASSERT_TRUE(turn.messages[0].tools.has_value());
  ASSERT_EQ(turn.messages[0].tools->size(), 1u);
  EXPECT_EQ((*turn.messages[0].tools)[0]["function"]["name"], "exec_command");
  EXPECT_EQ((*turn.messages[0].tools)[0]["function"]["parameters"]["properties"]["cmd"]["type"],
            "string");
  EXPECT_EQ(turn.messages[1].role, chat::Role::kDeveloper);
  EXPECT_EQ(turn.messages[3].content, "List files.");
  // Reasoning, message and call are one assistant turn.
  const chat::Message& assistant = turn.messages[4];
  EXPECT_EQ(assistant.role, chat::Role::kAssistant);
  EXPECT_EQ(assistant.reasoning_content.value_or(""), "I will run ls.");
  EXPECT_EQ(assistant.content, "Listing.");
  ASSERT_EQ(assistant.tool_calls.size(), 1u);
  EXPECT_EQ(assistant.tool_calls[0].id, "call_7");
  EXPECT_EQ(assistant.tool_calls[0].name, "exec_command");
  EXPECT_EQ(turn.messages[5].role, chat::Role::kTool);
  EXPECT_EQ(turn.messages[5].tool_call_id, "call_7");
  EXPECT_EQ(turn.messages[5].content, "a.txt\n");
  EXPECT_EQ(turn.messages[6].role, chat::Role::kUser);
  EXPECT_EQ(turn.messages[6].content, "Thanks.");
}

TEST(OpenAiResponsesTest, AssistantTurnsSplitWhereANewOneBegins) {
  // Two answers in a row, and a string input.
  const OrderedJson body = {
      {"input",
       {{{"role", "user"}, {"content", "a"}},
        {{"role", "assistant"}, {"content", "one"}},
        {{"type", "reasoning"}, {"summary", {{{"type", "summary_text"}, {"text", "hmm"}}}}},
        {{"role", "assistant"}, {"content", "two"}},
        {{"role", "user"}, {"content", "b"}}}},
      {"text",
       {{"format", {{"type", "json_schema"}, {"name", "x"}, {"schema", {{"type", "object"}}}}}}}};
  auto r = ParseResponsesRequest(body.dump());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->turn.messages.size(), 4u);
  EXPECT_EQ(r->turn.messages[1].content, "one");
  EXPECT_FALSE(r->turn.messages[1].reasoning_content.has_value());
  EXPECT_EQ(r->turn.messages[2].content, "two");
  EXPECT_EQ(r->turn.messages[2].reasoning_content.value_or(""), "hmm");
  ASSERT_TRUE(r->turn.messages[0].response_format.has_value());
  EXPECT_EQ((*r->turn.messages[0].response_format)["type"], "object");
  auto simple = ParseResponsesRequest(OrderedJson{{"input", "hello"}}.dump());
  ASSERT_TRUE(simple.ok()) << simple.status();
  ASSERT_EQ(simple->turn.messages.size(), 1u);
  EXPECT_EQ(simple->turn.messages[0].content, "hello");
  EXPECT_FALSE(simple->turn.stream);
}

TEST(OpenAiResponsesTest, EveryMalformedFormIsRefusedNamingItsField) {
  const OrderedJson ok = {{"input", {{{"role", "user"}, {"content", "hi"}}}}};
  ASSERT_TRUE(ParseResponsesRequest(ok.dump()).ok());
  auto with = [&](const std::string& key, const OrderedJson& value) {
    OrderedJson body = ok;
    body[key] = value;
    return body.dump();
  };
  auto item = [&](const OrderedJson& i) { return with("input", OrderedJson::array({i})); };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"input\": ", "the body is not JSON"},
      {"\"x\"", "the body is not a JSON object"},
      {"{}", "input: is required"},
      {with("input", 5), "input"},
      {with("input", OrderedJson::array()), "input"},
      {item(7), "input[0]"},
      {item({{"type", 3}}), "input[0].type"},
      {item({{"type", "image_generation_call"}}), "input[0].type"},
      {item({{"role", "wizard"}, {"content", "x"}}), "input[0].role"},
      {item({{"type", "message"}, {"content", "x"}}), "input[0].role"},
      {item({{"role", "user"}}), "input[0].content"},
      {item({{"role", "user"}, {"content", 4}}), "input[0].content"},
      {item({{"role", "user"}, {"content", {{{"type", "input_image"}, {"image_url", "x"}}}}}),
       "input[0].content[0].type"},
      {item({{"role", "user"}, {"content", {{{"type", "input_text"}}}}}),
       "input[0].content[0].text"},
      {item({{"type", "function_call"}, {"name", "f"}, {"arguments", "{}"}}), "input[0].call_id"},
      {item({{"type", "function_call"}, {"call_id", "c"}, {"arguments", "{}"}}), "input[0].name"},
      {item({{"type", "function_call"}, {"call_id", "c"}, {"name", "f"}, {"arguments", 1}}),
       "input[0].arguments"},
      {item({{"type", "function_call"}, {"call_id", "c"}, {"name", "f"}, {"arguments", "{"}}),
       "input[0]"},
      {item({{"type", "function_call_output"}, {"output", "x"}}), "input[0].call_id"},
      {item({{"type", "function_call_output"}, {"call_id", "c"}}), "input[0].output"},
      // An output for a call that was never made, found after conversion and named as sent.
      {with("input", {{{"role", "user"}, {"content", "go"}},
                      {{"type", "function_call_output"}, {"call_id", "nope"}, {"output", "r"}}}),
       "input[1]"},
      {with("instructions", 1), "instructions"},
      {with("tools", "x"), "tools"},
      {with("tools", {{{"name", "f"}}}), "tools[0].type"},
      {with("tools", {{{"type", "function"}}}), "tools[0].name"},
      {with("tools", {{{"type", "function"}, {"name", "f"}, {"parameters", "x"}}}),
       "tools[0].parameters"},
      {with("previous_response_id", "resp_1"), "previous_response_id"},
      {with("tool_choice", "required"), "tool_choice"},
      {with("max_output_tokens", 0), "max_output_tokens"},
      {with("temperature", 3), "temperature"},
      {with("top_p", 0), "top_p"},
      {with("stream", 1), "stream"},
      {with("reasoning", "high"), "reasoning"},
      {with("reasoning", {{"effort", 2}}), "reasoning.effort"},
      {with("text", {{"format", {{"type", "grammar"}}}}), "text.format.type"},
  };
  for (const auto& [body, field] : cases) {
    auto r = ParseResponsesRequest(body);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << body;
    EXPECT_NE(std::string(r.status().message()).find(field), std::string::npos)
        << body << " -> " << r.status();
  }
}

ResponsesTurn Named(const std::string& id, int64_t created_at) {
  ResponsesTurn turn;
  turn.id = id;
  turn.created_at = created_at;
  turn.model = "tiny";
  return turn;
}

// Folds a stream's events into the output items, as the OpenAI SDK does,
// checking names, sequence numbers and indices on the way.
OrderedJson Accumulate(const std::string& stream, OrderedJson* final_response) {
  OrderedJson output = OrderedJson::array();
  int64_t sequence = 0;
  for (absl::string_view event : absl::StrSplit(stream, "\n\n", absl::SkipEmpty())) {
    std::vector<std::string> lines = absl::StrSplit(event, '\n');
    EXPECT_EQ(lines.size(), 2u) << event;
    const std::string name = lines[0].substr(7);
    const OrderedJson data = OrderedJson::parse(lines[1].substr(6));
    EXPECT_EQ(data["type"], name);
    EXPECT_EQ(data["sequence_number"], sequence++);
    if (name == "response.output_item.added") {
      EXPECT_EQ(data["output_index"], output.size());
      output.push_back(data["item"]);
    } else if (name == "response.output_text.delta" || name == "response.reasoning_text.delta" ||
               name == "response.function_call_arguments.delta") {
      OrderedJson& item = output[data["output_index"].get<size_t>()];
      item["streamed"] = item.value("streamed", "") + data["delta"].get<std::string>();
    } else if (name == "response.output_item.done") {
      OrderedJson& item = output[data["output_index"].get<size_t>()];
      const OrderedJson& done = data["item"];
      // What streamed is what the finished item holds.
      const std::string streamed = item.value("streamed", "");
      const OrderedJson& whole =
          done["type"] == "function_call" ? done["arguments"] : done["content"][0]["text"];
      EXPECT_EQ(streamed, whole) << done;
      item = done;
    } else if (name == "response.completed" || name == "response.incomplete") {
      *final_response = data["response"];
    }
  }
  return output;
}

TEST(OpenAiResponsesTest, AStreamRebuildsTheWholeResponse) {
  ResponsesTurn turn = Named("resp_4", 1700000000);
  turn.reasoning = "think hard";
  turn.content = "Listing.";
  turn.tool_calls = {{"call_4_0", "exec_command", "{\"cmd\":\"ls\"}"}};
  turn.input_tokens = 50;
  turn.output_tokens = 9;
  ResponsesStream stream(turn);
  std::string events = stream.Start();
  events += stream.Delta({"think ", ""});
  events += stream.Delta({"hard", "List"});
  events += stream.Delta({"", "ing."});
  events += stream.Finish(turn);
  OrderedJson final_response;
  const OrderedJson output = Accumulate(events, &final_response);
  const OrderedJson whole = ResponseJson(turn);
  EXPECT_EQ(output, whole["output"]) << output.dump(1);
  EXPECT_EQ(final_response, whole);
  EXPECT_EQ(whole["status"], "completed");
  EXPECT_EQ(whole["output"][2]["call_id"], "call_4_0");
  EXPECT_EQ(whole["usage"]["total_tokens"], 59);
}

TEST(OpenAiResponsesTest, ACutTurnIsIncomplete) {
  ResponsesTurn turn = Named("resp_5", 0);
  turn.content = "par";
  turn.incomplete = true;
  ResponsesStream stream(turn);
  std::string events = stream.Start();
  events += stream.Delta({"", "par"});
  events += stream.Finish(turn);
  OrderedJson final_response;
  Accumulate(events, &final_response);
  EXPECT_EQ(final_response["status"], "incomplete");
  EXPECT_EQ(final_response["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_NE(events.find("event: response.incomplete\n"), std::string::npos);
  const std::string failed = ResponsesStream(turn).Failed("the model failed");
  EXPECT_NE(failed.find("\"status\":\"failed\""), std::string::npos) << failed;
  EXPECT_NE(failed.find("the model failed"), std::string::npos) << failed;
}

}  // namespace
}  // namespace loom::serve
