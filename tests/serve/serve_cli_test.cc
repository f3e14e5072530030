// `loom serve` as a separate process on 127.0.0.1, driven over real sockets:
// the API key, /v1/models, whole and streamed Chat Completions that agree
// token for token, named errors for malformed requests, and turns cancelled
// when their client hangs up (so no engine slot leaks). The models are tiny
// ones `loom init-model` makes; where the answer must be known in advance
// their weights are set by hand (testing/bigram_model.h).

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "serve/serve_process.h"

namespace loom {
namespace {

using nlohmann::json;
using testing::AnswerXModel;
using testing::Ask;
using testing::EndlessModel;
using testing::Events;
using testing::HttpReply;
using testing::InitModel;
using testing::Join;
using testing::kAuth;
using testing::RunLoom;
using testing::Server;
using testing::SocketClient;
using testing::Streamed;
using testing::TempDir;

TEST(ServeCliTest, EveryRequestNeedsTheKey) {
  TempDir dir;
  Server server(dir, InitModel(dir, "model"), "");
  ASSERT_GT(server.port(), 0) << server.Log();
  auto get = [&](const std::vector<std::string>& headers) {
    SocketClient client = server.Connect();
    std::string head = "GET /v1/models HTTP/1.1\r\n";
    for (const std::string& h : headers) head += h + "\r\n";
    client.Send(head + "\r\n");
    return client.ReadResponse();
  };
  for (const auto& headers :
       std::vector<std::vector<std::string>>{{},
                                             {"Authorization: Bearer sk-wrong"},
                                             {"x-api-key: sk-test-ke"},
                                             {"Authorization: sk-test-key"}}) {
    HttpReply refused = get(headers);
    EXPECT_EQ(refused.status, 401) << refused.body;
    EXPECT_EQ(json::parse(refused.body)["error"]["type"], "authentication_error");
  }
  for (const std::string& header : {kAuth, std::string("x-api-key: ") + testing::kKey}) {
    HttpReply ok = get({header});
    ASSERT_EQ(ok.status, 200) << ok.body;
    EXPECT_EQ(json::parse(ok.body)["data"][0]["id"], "tiny");
  }
  EXPECT_EQ(server.Post(Ask("hi", 4, false), {}).status, 401);
}

TEST(ServeCliTest, AnAnswerComesWholeOrStreamedAlike) {
  TempDir dir;
  Server server(dir, AnswerXModel(dir), "");
  ASSERT_GT(server.port(), 0) << server.Log();

  HttpReply whole = server.Post(Ask("Say x.", 16, false));
  ASSERT_EQ(whole.status, 200) << whole.body;
  json response = json::parse(whole.body);
  EXPECT_EQ(response["object"], "chat.completion");
  EXPECT_EQ(response["model"], "tiny");
  EXPECT_EQ(response["choices"][0]["message"]["content"], "x");
  EXPECT_FALSE(response["choices"][0]["message"].contains("reasoning_content"));
  EXPECT_EQ(response["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(response["usage"]["completion_tokens"], 3);  // </think> x EOS

  HttpReply stream = server.Post(Ask("Say x.", 16, true));
  ASSERT_EQ(stream.status, 200) << stream.body;
  EXPECT_EQ(stream.header("content-type"), "text/event-stream");
  Streamed streamed = Join(stream);
  EXPECT_TRUE(streamed.done);
  EXPECT_EQ(streamed.content, "x");
  EXPECT_EQ(streamed.reasoning, "");
  EXPECT_EQ(streamed.finish, "stop");
  EXPECT_EQ(streamed.usage, response["usage"]);
  EXPECT_EQ(json::parse(Events(stream).front())["choices"][0]["delta"]["role"], "assistant");
}

// The history a client re-sends continues the held conversation on its
// stored tokens (only the new messages are appended), also with the model's
// turn re-written; a compacted history or a retry starts a new sample.
TEST(ServeCliTest, AConversationContinuesOnItsStoredTokens) {
  TempDir dir;
  Server server(dir, AnswerXModel(dir), "");
  ASSERT_GT(server.port(), 0) << server.Log();
  auto ask = [&](const json& messages, bool stream) {
    json request = Ask("", 16, stream);
    request["messages"] = messages;
    return server.Post(request);
  };
  auto usage_of = [](const HttpReply& reply) { return json::parse(reply.body)["usage"]; };
  const json user = {{"role", "user"}, {"content", "Say x."}};

  HttpReply first = ask(json::array({user}), false);
  ASSERT_EQ(first.status, 200) << first.body;
  const int64_t first_prompt = usage_of(first)["prompt_tokens"];
  ASSERT_FALSE(server.AwaitLog("turn 0: stop after 3 tokens, prompt [0-9]+ \\(new\\)").empty())
      << server.Log();

  // The model said "x"; the client sends it back with other whitespace.
  const json again = {user,
                      {{"role", "assistant"}, {"content", " x\n"}},
                      {{"role", "user"}, {"content", "Again."}}};
  HttpReply second = ask(again, false);
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(json::parse(second.body)["choices"][0]["message"]["content"], "x");
  const std::string appended =
      server.AwaitLog("turn 1: stop after 3 tokens, prompt [0-9]+ \\(continued: ([0-9]+) new\\)");
  ASSERT_FALSE(appended.empty()) << server.Log();
  // The context is the first turn's as generated, then only the new tokens.
  EXPECT_EQ(usage_of(second)["prompt_tokens"], first_prompt + 3 + std::stoi(appended));

  json more = again;
  more.push_back({{"role", "assistant"}, {"content", "x"}});
  more.push_back({{"role", "user"}, {"content", "Once more."}});
  Streamed streamed = Join(ask(more, true));
  EXPECT_EQ(streamed.content, "x");
  EXPECT_FALSE(server.AwaitLog("turn 2: stop after 3 tokens, prompt [0-9]+ \\(continued").empty())
      << server.Log();

  HttpReply compacted = ask({{{"role", "user"}, {"content", "Summary: x was said twice."}},
                             {{"role", "user"}, {"content", "Again."}}},
                            false);
  ASSERT_EQ(compacted.status, 200) << compacted.body;
  EXPECT_FALSE(server.AwaitLog("turn 3: stop after 3 tokens, prompt [0-9]+ \\(new\\)").empty())
      << server.Log();
  HttpReply retry = ask(again, false);  // its conversation went on: a new sample
  ASSERT_EQ(retry.status, 200) << retry.body;
  EXPECT_FALSE(server.AwaitLog("turn 4: stop after 3 tokens, prompt [0-9]+ \\(new\\)").empty())
      << server.Log();

  // A held conversation that would outgrow the context is refused like a long prompt.
  json too_long = more;
  too_long.push_back({{"role", "assistant"}, {"content", "x"}});
  std::string words;
  for (int i = 0; i < 3000; ++i) words += " w" + std::to_string(i % 10);
  too_long.push_back({{"role", "user"}, {"content", words}});
  HttpReply refused = ask(too_long, false);
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_EQ(json::parse(refused.body)["error"]["code"], "context_length_exceeded");
  EXPECT_FALSE(server.AwaitLog("turn 5: failed .*continued").empty()) << server.Log();
}

// The events of an Anthropic or Responses stream: (event name, data).
std::vector<std::pair<std::string, json>> NamedEvents(const HttpReply& reply) {
  std::vector<std::pair<std::string, json>> events;
  std::string body = reply.body;
  for (size_t at; (at = body.find("\n\n")) != std::string::npos; body.erase(0, at + 2)) {
    const std::string event = body.substr(0, at);
    const size_t data = event.find("\ndata: ");
    EXPECT_EQ(event.rfind("event: ", 0), 0u) << event;
    EXPECT_NE(data, std::string::npos) << event;
    events.emplace_back(event.substr(7, data - 7), json::parse(event.substr(data + 7)));
  }
  return events;
}

// The same conversation through the three dialects: one prompt, one answer,
// whole and streamed; count_tokens counts what the turn's usage reports; an
// Anthropic conversation continues on its stored tokens; errors come in each
// dialect's shape.
TEST(ServeCliTest, MessagesAndResponsesAnswerLikeChatCompletions) {
  TempDir dir;
  Server server(dir, AnswerXModel(dir), "");
  ASSERT_GT(server.port(), 0) << server.Log();
  HttpReply chat = server.Post(Ask("Say x.", 16, false));
  ASSERT_EQ(chat.status, 200) << chat.body;
  const int64_t prompt = json::parse(chat.body)["usage"]["prompt_tokens"];

  const json user = {{"role", "user"}, {"content", "Say x."}};
  json messages = {{"model", "claude-x"},
                   {"max_tokens", 16},
                   {"temperature", 0},
                   {"messages", json::array({user})}};
  HttpReply whole = server.PostTo("/v1/messages?beta=true", messages);
  ASSERT_EQ(whole.status, 200) << whole.body;
  json message = json::parse(whole.body);
  EXPECT_EQ(message["type"], "message");
  EXPECT_EQ(message["model"], "claude-x");
  EXPECT_EQ(message["content"], json::parse(R"([{"type": "text", "text": "x"}])"));
  EXPECT_EQ(message["stop_reason"], "end_turn");
  EXPECT_EQ(message["usage"]["input_tokens"], prompt);
  EXPECT_EQ(message["usage"]["output_tokens"], 3);
  HttpReply counted = server.PostTo("/v1/messages/count_tokens", {{"messages", {user}}});
  ASSERT_EQ(counted.status, 200) << counted.body;
  EXPECT_EQ(json::parse(counted.body)["input_tokens"], prompt);

  messages["stream"] = true;
  HttpReply stream = server.PostTo("/v1/messages", messages);
  ASSERT_EQ(stream.status, 200) << stream.body;
  std::string text;
  std::vector<std::string> names;
  for (const auto& [name, data] : NamedEvents(stream)) {
    names.push_back(name);
    if (name == "content_block_delta") text += data["delta"].value("text", "");
    if (name == "message_delta") {
      EXPECT_EQ(data["delta"]["stop_reason"], "end_turn");
    }
  }
  EXPECT_EQ(text, "x");
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.front(), "message_start");
  EXPECT_EQ(names.back(), "message_stop");

  // Claude Code sends the answer back as blocks, with the next user turn.
  const int turns = 3;  // chat, whole, streamed
  messages["stream"] = false;
  messages["messages"] = {user,
                          {{"role", "assistant"}, {"content", {{{"type", "text"}, {"text", "x"}}}}},
                          {{"role", "user"}, {"content", "Again."}}};
  HttpReply again = server.PostTo("/v1/messages", messages);
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_FALSE(server
                   .AwaitLog("turn " + std::to_string(turns) +
                             ": stop after 3 tokens, prompt [0-9]+ \\(continued")
                   .empty())
      << server.Log();

  const json responses = {{"model", "tiny"}, {"input", "Say x."}, {"temperature", 0}};
  HttpReply response = server.PostTo("/v1/responses", responses);
  ASSERT_EQ(response.status, 200) << response.body;
  const json body = json::parse(response.body);
  EXPECT_EQ(body["status"], "completed");
  ASSERT_EQ(body["output"].size(), 1u) << body;
  EXPECT_EQ(body["output"][0]["content"][0]["text"], "x");
  EXPECT_EQ(body["usage"]["input_tokens"], prompt);
  json streaming = responses;
  streaming["stream"] = true;
  text.clear();
  json completed;
  for (const auto& [name, data] : NamedEvents(server.PostTo("/v1/responses", streaming))) {
    if (name == "response.output_text.delta") text += data["delta"].get<std::string>();
    if (name == "response.completed") completed = data["response"];
  }
  EXPECT_EQ(text, "x");
  ASSERT_EQ(completed["output"].size(), 1u) << completed;
  EXPECT_EQ(completed["output"][0]["content"], body["output"][0]["content"]);

  // Errors in each dialect's shape.
  HttpReply unauthenticated = server.PostTo("/v1/messages", messages, {});
  EXPECT_EQ(unauthenticated.status, 401);
  EXPECT_EQ(json::parse(unauthenticated.body)["error"]["type"], "authentication_error");
  EXPECT_EQ(json::parse(unauthenticated.body)["type"], "error");
  messages.erase("max_tokens");
  HttpReply malformed = server.PostTo("/v1/messages", messages);
  EXPECT_EQ(malformed.status, 400);
  EXPECT_EQ(json::parse(malformed.body)["error"]["type"], "invalid_request_error");
  EXPECT_EQ(json::parse(malformed.body)["error"]["message"], "max_tokens: is required");
  HttpReply stored =
      server.PostTo("/v1/responses", {{"input", "x"}, {"previous_response_id", "r"}});
  EXPECT_EQ(stored.status, 400);
  EXPECT_EQ(json::parse(stored.body)["error"]["param"], "previous_response_id");
  EXPECT_EQ(server.PostTo("/v1/messages/batches", messages).status, 404);
}

TEST(ServeCliTest, StreamedAndWholeAgreeOnAnUntrainedModel) {
  TempDir dir;
  Server server(dir, InitModel(dir, "model"), "--effort low");
  ASSERT_GT(server.port(), 0) << server.Log();
  for (std::string prompt : {"What is 2+2?", "Write a haiku about rain."}) {
    json request = Ask(prompt, 24, false);
    request["reasoning_effort"] = "max";
    HttpReply whole = server.Post(request);
    ASSERT_EQ(whole.status, 200) << whole.body;
    json response = json::parse(whole.body);
    request["stream"] = true;
    Streamed streamed = Join(server.Post(request));
    const json& message = response["choices"][0]["message"];
    EXPECT_EQ(streamed.reasoning, message.value("reasoning_content", "")) << prompt;
    EXPECT_EQ(streamed.content, message["content"]) << prompt;
    EXPECT_EQ(streamed.finish, response["choices"][0]["finish_reason"]);
    EXPECT_EQ(streamed.usage, response["usage"]);
  }
}

TEST(ServeCliTest, MalformedRequestsGetTheirStatusAndNameTheField) {
  TempDir dir;
  Server server(dir, InitModel(dir, "model"), "--context 64 --max-body-bytes 4096");
  ASSERT_GT(server.port(), 0) << server.Log();
  auto error_of = [](const HttpReply& reply) { return json::parse(reply.body)["error"]; };

  SocketClient raw = server.Connect();
  raw.Post("/v1/chat/completions", "{\"messages\": [", {kAuth});
  HttpReply not_json = raw.ReadResponse();
  EXPECT_EQ(not_json.status, 400);
  EXPECT_NE(error_of(not_json)["message"].get<std::string>().find("not JSON"), std::string::npos);

  json bad_role = Ask("x", 4, false);
  bad_role["messages"][0]["role"] = "wizard";
  HttpReply role = server.Post(bad_role);
  EXPECT_EQ(role.status, 400);
  EXPECT_EQ(error_of(role)["param"], "messages[0].role");

  json effort = Ask("x", 4, false);
  effort["reasoning_effort"] = "extreme";
  HttpReply unknown_effort = server.Post(effort);
  EXPECT_EQ(unknown_effort.status, 400);
  EXPECT_EQ(error_of(unknown_effort)["param"], "reasoning_effort");

  HttpReply long_prompt = server.Post(Ask(std::string(300, 'a') + " b c d e f g", 4, false));
  EXPECT_EQ(long_prompt.status, 400);
  EXPECT_EQ(error_of(long_prompt)["code"], "context_length_exceeded");

  HttpReply too_big = server.Post(Ask(std::string(5000, 'a'), 4, false));
  EXPECT_EQ(too_big.status, 413);

  SocketClient get = server.Connect();
  get.Send("GET /v1/chat/completions HTTP/1.1\r\n" + kAuth + "\r\n\r\n");
  EXPECT_EQ(get.ReadResponse().status, 405);
  SocketClient nowhere = server.Connect();
  nowhere.Send("GET /v1/nowhere HTTP/1.1\r\n" + kAuth + "\r\n\r\n");
  EXPECT_EQ(nowhere.ReadResponse().status, 404);

  HttpReply fine = server.Post(Ask("x", 4, false));  // and it still serves
  EXPECT_EQ(fine.status, 200) << fine.body;
}

TEST(ServeCliTest, AClientThatHangsUpCancelsItsTurnAndFreesItsSlot) {
  TempDir dir;
  Server server(dir, EndlessModel(dir), "--max-batch 1 --pool-tokens 70000");
  ASSERT_GT(server.port(), 0) << server.Log();

  SocketClient streaming = server.Connect();
  streaming.Post("/v1/chat/completions", Ask("go", 60000, true).dump(), {kAuth});
  ASSERT_EQ(streaming.ReadHead().status, 200);
  ASSERT_FALSE(streaming.ReadChunk().empty());
  ASSERT_FALSE(streaming.ReadChunk().empty());
  streaming.Close();
  const std::string after = server.AwaitLog("turn 0: cancelled \\(client gone\\) after ([0-9]+)");
  ASSERT_FALSE(after.empty()) << server.Log();
  EXPECT_LT(std::stoi(after), 60000);

  SocketClient waiting = server.Connect();  // a whole response nobody waits for
  waiting.Post("/v1/chat/completions", Ask("go", 60000, false).dump(), {kAuth});
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  waiting.Close();
  ASSERT_FALSE(server.AwaitLog("turn 1: cancelled \\(client gone\\)").empty()) << server.Log();

  // With one slot, this would wait behind a leaked turn for minutes.
  HttpReply next = server.Post(Ask("go", 5, false));
  ASSERT_EQ(next.status, 200) << next.body;
  json response = json::parse(next.body);
  EXPECT_EQ(response["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(response["choices"][0]["message"]["reasoning_content"], "yyyyy");
}

TEST(ServeCliTest, ConcurrentTurnsAreGeneratedTogether) {
  TempDir dir;
  Server server(dir, EndlessModel(dir), "--max-batch 4");
  ASSERT_GT(server.port(), 0) << server.Log();
  std::vector<SocketClient> clients;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(server.Connect());
    clients.back().Post("/v1/chat/completions", Ask("go " + std::to_string(i), 200, true).dump(),
                        {kAuth});
  }
  for (SocketClient& client : clients) {
    Streamed s = Join(client.ReadResponse());
    EXPECT_EQ(s.reasoning, std::string(200, 'y'));
    EXPECT_EQ(s.finish, "length");
    EXPECT_EQ(s.usage["completion_tokens"], 200);
  }
}

TEST(ServeCliTest, BadFlagsAreUsageErrors) {
  TempDir dir;
  const std::string model = InitModel(dir, "model");
  auto open = RunLoom("serve --model " + model + " --listen 0.0.0.0:0");
  EXPECT_EQ(open.exit_code, 2);
  EXPECT_NE(open.err.find("--listen '0.0.0.0:0': only a loopback address without --api-key"),
            std::string::npos)
      << open.err;
  auto effort = RunLoom("serve --model " + model + " --listen 127.0.0.1:0 --effort extreme");
  EXPECT_EQ(effort.exit_code, 2);
  EXPECT_NE(effort.err.find("unknown effort 'extreme'"), std::string::npos) << effort.err;
  auto names = RunLoom("serve --model " + model + " --effort-names medium=500");
  EXPECT_EQ(names.exit_code, 2);
  EXPECT_NE(names.err.find("effort name 'medium'"), std::string::npos) << names.err;
  auto missing = RunLoom("serve --model " + dir / "nothing" + " --listen 127.0.0.1:0");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("nothing"), std::string::npos) << missing.err;
}

// A tiny model on a real vocabulary, for trying a harness by hand: its
// vocab_size covers the tokenizer's ids and the added chat specials; a
// tokenizer file that is missing or not one is an error naming it.
TEST(ServeCliTest, InitModelTakesARealVocabulary) {
  TempDir dir;
  const std::string model = testing::RealVocabModel(dir, "real", 4096);
  const json config = json::parse(testing::ReadAll(model + "/config.json"));
  auto tok = tokenizer::Tokenizer::FromFile(model + "/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(config["vocab_size"], (*tok)->VocabSize());
  EXPECT_GT(config["vocab_size"].get<int64_t>(), 128000);
  EXPECT_TRUE((*tok)->TokenToId(tokenizer::dsv4::kDsml).has_value());
  for (const std::string& bad : {dir / "missing.json", model + "/config.json"}) {
    auto made = RunLoom("init-model --arch llama --out " + dir / "bad" + " --tokenizer " + bad);
    EXPECT_NE(made.exit_code, 0) << bad;
    EXPECT_NE(made.err.find(bad), std::string::npos) << made.err;
    EXPECT_FALSE(std::filesystem::exists(dir / "bad/config.json")) << bad;
  }
}

}  // namespace
}  // namespace loom
