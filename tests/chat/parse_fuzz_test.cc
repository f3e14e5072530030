// Fuzz-style: thousands of random and mutated completions go through
// ParseCompletion in both modes; each must return (a message or an error)
// without throwing or crashing. Seeded, so failures reproduce.

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "chat/chat_test_util.h"
#include "loom/chat/parser.h"

namespace loom::chat {
namespace {

const std::vector<std::string>& Fragments() {
  static const std::vector<std::string> fragments = {"<｜end▁of▁sentence｜>",
                                                     "<｜begin▁of▁sentence｜>",
                                                     "<think>",
                                                     "</think>",
                                                     "｜DSML｜",
                                                     "\n\n<｜DSML｜tool_calls",
                                                     ">\n",
                                                     "<｜DSML｜invoke",
                                                     " name=\"f\">\n",
                                                     "<｜DSML｜parameter",
                                                     " name=\"k\" string=\"true\">",
                                                     " string=\"false\">",
                                                     "/｜DSML｜parameter>\n",
                                                     "</｜DSML｜invoke>\n",
                                                     "</｜DSML｜tool_calls>",
                                                     "<",
                                                     ">",
                                                     "\"",
                                                     "\n",
                                                     "text",
                                                     "{\"a\": 1}",
                                                     "\xff",
                                                     "\xe4\xbd",
                                                     "é",
                                                     "｜"};
  return fragments;
}

// Valid completions to mutate: the encoder's rendering of assistant turns.
std::vector<std::string> Seeds() {
  const std::string prefix = "<｜begin▁of▁sentence｜><｜User｜>Q<｜Assistant｜><think>";
  std::vector<std::string> seeds;
  for (const char* assistant :
       {R"({"role":"assistant","reasoning_content":"R","content":"C"})",
        R"({"role":"assistant","reasoning_content":"R","content":"","tool_calls":[
                {"function":{"name":"f","arguments":"{\"a\": \"x\", \"b\": [1, {\"c\": null}]}"}},
                {"function":{"name":"g","arguments":"{}"}}]})"}) {
    const std::string prompt =
        testing::Prompt(std::string(R"([{"role":"user","content":"Q"},)") + assistant + "]");
    seeds.push_back(prompt.substr(prefix.size()));
  }
  return seeds;
}

std::string Mutate(std::string s, std::mt19937& rng) {
  const auto& fragments = Fragments();
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    const size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 4) {
      case 0:  // insert a fragment
        s.insert(pos, fragments[rng() % fragments.size()]);
        break;
      case 1:  // delete a span
        if (!s.empty()) s.erase(pos, 1 + rng() % 8);
        break;
      case 2:  // flip a byte
        if (pos < s.size()) s[pos] = static_cast<char>(rng() % 256);
        break;
      default:  // truncate
        s.resize(pos);
    }
  }
  return s;
}

std::string RandomCompletion(std::mt19937& rng) {
  std::string s;
  const int parts = static_cast<int>(rng() % 12);
  for (int i = 0; i < parts; ++i) s += Fragments()[rng() % Fragments().size()];
  return s;
}

TEST(ParseFuzzTest, RandomAndMutatedCompletionsNeverCrash) {
  std::mt19937 rng(20260);
  const std::vector<std::string> seeds = Seeds();
  for (const std::string& seed : seeds) {
    ASSERT_TRUE(ParseCompletion(seed, ThinkingMode::kThinking).ok()) << seed;
  }
  int ok = 0, errors = 0;
  for (int i = 0; i < 6000; ++i) {
    const std::string text =
        i % 3 == 0 ? RandomCompletion(rng) : Mutate(seeds[rng() % seeds.size()], rng);
    for (ThinkingMode mode : {ThinkingMode::kThinking, ThinkingMode::kChat}) {
      auto parsed = ParseCompletion(text, mode);
      if (parsed.ok()) {
        ++ok;
        (void)ParsedMessageToJson(*parsed).dump(-1, ' ', false,
                                                OrderedJson::error_handler_t::replace);
      } else {
        ++errors;
        EXPECT_FALSE(parsed.status().message().empty());
      }
    }
  }
  EXPECT_GT(ok, 0);
  EXPECT_GT(errors, 0);
}

}  // namespace
}  // namespace loom::chat
