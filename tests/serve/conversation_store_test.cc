// ConversationStore: which re-sent histories continue a held conversation.
// A harness re-serialises what the model said (whitespace, JSON key order,
// its own tool-call ids, no reasoning); that is still the same turn. An
// edited or compacted history, other settings, or a second taker is not.

#include <gtest/gtest.h>

#include "loom/serve/conversation_store.h"

namespace loom::serve {
namespace {

chat::Message Make(chat::Role role, const std::string& content) {
  chat::Message m;
  m.role = role;
  m.content = content;
  return m;
}

chat::Message Call(const std::string& arguments, const std::string& id) {
  chat::Message m = Make(chat::Role::kAssistant, "Reading.");
  m.reasoning_content = "I should read it.";
  m.tool_calls.push_back({id, "read", arguments});
  return m;
}

std::vector<chat::Message> Held() {
  chat::Message system = Make(chat::Role::kSystem, "Be brief.");
  system.tools = chat::OrderedJson::parse(
      R"([{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}])");
  return {system, Make(chat::Role::kUser, "Read a.txt"),
          Call(R"({"path": "a.txt", "lines": [1, 2]})", "call_0_0")};
}

TEST(SameTurnTest, AReSerialisedAssistantTurnIsTheSameTurn) {
  const chat::Message held = Call(R"({"path": "a.txt", "lines": [1, 2]})", "call_0_0");
  chat::Message sent = Call(R"({"lines":[1,2],"path":"a.txt"})", "toolu_99");
  sent.content = "  Reading.\n";
  sent.reasoning_content.reset();  // harnesses leave it out
  EXPECT_TRUE(SameTurn(held, sent));

  chat::Message other_args = Call(R"({"path": "b.txt", "lines": [1, 2]})", "call_0_0");
  EXPECT_FALSE(SameTurn(held, other_args));
  chat::Message other_text = Call(R"({"path": "a.txt", "lines": [1, 2]})", "call_0_0");
  other_text.content = "Reading now.";
  EXPECT_FALSE(SameTurn(held, other_text));
  chat::Message other_reasoning = Call(R"({"path": "a.txt", "lines": [1, 2]})", "call_0_0");
  other_reasoning.reasoning_content = "Something else.";
  EXPECT_FALSE(SameTurn(held, other_reasoning));
  chat::Message no_call = Make(chat::Role::kAssistant, "Reading.");
  EXPECT_FALSE(SameTurn(held, no_call));
}

TEST(SameTurnTest, OtherMessagesMustBeExactToolsAsJsonValues) {
  EXPECT_FALSE(SameTurn(Make(chat::Role::kUser, "hi"), Make(chat::Role::kUser, "hi ")));
  EXPECT_FALSE(SameTurn(Make(chat::Role::kUser, "hi"), Make(chat::Role::kSystem, "hi")));
  chat::Message a = Held()[0], b = Held()[0];
  b.tools = chat::OrderedJson::parse(
      R"([{"function": {"parameters": {"type": "object"}, "name": "read"}, "type": "function"}])");
  EXPECT_TRUE(SameTurn(a, b));
  b.tools = chat::OrderedJson::parse(R"([{"type": "function", "function": {"name": "write"}}])");
  EXPECT_FALSE(SameTurn(a, b));
}

TEST(ConversationStoreTest, ALongerHistoryTakesTheLongestHeldPrefixOnce) {
  ConversationStore store(8);
  TurnSettings settings;
  settings.effort = "high";
  const std::vector<chat::Message> held = Held();
  const std::vector<chat::Message> short_one(held.begin(), held.begin() + 2);
  EXPECT_TRUE(store.Put({short_one, 1, false, settings}).empty());
  EXPECT_TRUE(store.Put({Held(), 2, true, settings}).empty());

  std::vector<chat::Message> next = Held();
  next[2] = Call(R"({"lines":[1,2],"path":"a.txt"})", "x");
  next[2].reasoning_content.reset();
  chat::Message result = Make(chat::Role::kTool, "hello");
  result.tool_call_id = "x";
  next.push_back(result);

  EXPECT_FALSE(store.Take(next, {"low", 1.0, 1.0, 0}));  // another effort: another prompt
  std::optional<HeldConversation> taken = store.Take(next, settings);
  ASSERT_TRUE(taken);
  EXPECT_EQ(taken->sample, 2u);
  EXPECT_TRUE(taken->needs_eos);
  EXPECT_FALSE(store.Take(short_one, settings)) << "a history must add at least one message";
  std::vector<chat::Message> compacted = {Make(chat::Role::kUser, "Summary: read a.txt."), result};
  EXPECT_FALSE(store.Take(compacted, settings));
  EXPECT_EQ(store.size(), 1u);
  // Taken, the longer one is gone: a retry of `next` falls back to the shorter.
  std::optional<HeldConversation> retry = store.Take(next, settings);
  ASSERT_TRUE(retry);
  EXPECT_EQ(retry->sample, 1u);
}

TEST(ConversationStoreTest, TheLeastRecentlyUsedAreEvictedAndReturned) {
  ConversationStore store(2);
  const TurnSettings settings;
  EXPECT_TRUE(store.Put({Held(), 10, false, settings}).empty());
  EXPECT_TRUE(store.Put({Held(), 11, false, settings}).empty());
  EXPECT_EQ(store.Put({Held(), 12, false, settings}), std::vector<uint64_t>{10});
  EXPECT_EQ(store.size(), 2u);
}

}  // namespace
}  // namespace loom::serve
