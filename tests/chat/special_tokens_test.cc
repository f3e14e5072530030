// SpecialTokenIds and the tool-call end: the ids the trainer acts on, resolved
// from a tokenizer, and a clear error when the tokenizer lacks EOS.

#include "loom/chat/special_tokens.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "loom/tokenizer/dsv4_tokens.h"
#include "loom/tokenizer/tiny.h"

namespace loom::chat {
namespace {

std::unique_ptr<tokenizer::Tokenizer> FromJson(const nlohmann::json& json) {
  return *tokenizer::Tokenizer::FromJson(json.dump(), "test");
}

// The tiny tokenizer with only the added tokens whose content passes `keep`.
template <typename Keep>
nlohmann::json TinyWith(Keep keep) {
  nlohmann::json json = nlohmann::json::parse(tokenizer::TinyTokenizerJson());
  nlohmann::json kept = nlohmann::json::array();
  for (const auto& token : json["added_tokens"]) {
    if (keep(token["content"].get<std::string>())) kept.push_back(token);
  }
  json["added_tokens"] = kept;
  return json;
}

TEST(SpecialTokenIdsTest, ResolvesTheTinyTokenizersIds) {
  auto tok = FromJson(nlohmann::json::parse(tokenizer::TinyTokenizerJson()));
  auto ids = SpecialTokenIds::Resolve(*tok);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->eos, *tok->TokenToId(tokenizer::dsv4::kEos));
  EXPECT_EQ(ids->think_end, *tok->TokenToId(tokenizer::dsv4::kThinkClose));
  EXPECT_NE(ids->eos, ids->think_end);
}

TEST(SpecialTokenIdsTest, MissingEosIsAnErrorNamingIt) {
  auto tok = FromJson(TinyWith([](const std::string& s) { return s != tokenizer::dsv4::kEos; }));
  auto ids = SpecialTokenIds::Resolve(*tok);
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(ids.status().message()).find(tokenizer::dsv4::kEos), std::string::npos);
}

TEST(SpecialTokenIdsTest, MissingThinkEndIsMinusOne) {
  auto tok =
      FromJson(TinyWith([](const std::string& s) { return s != tokenizer::dsv4::kThinkClose; }));
  auto ids = SpecialTokenIds::Resolve(*tok);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->think_end, -1);
}

TEST(SpecialTokenIdsTest, EndsWithEosLooksAtTheEndOnly) {
  const std::string eos(tokenizer::dsv4::kEos);
  EXPECT_TRUE(EndsWithEos("answer" + eos));
  EXPECT_TRUE(EndsWithEos(eos));
  EXPECT_FALSE(EndsWithEos(eos + "more"));
  EXPECT_FALSE(EndsWithEos(""));
}

TEST(SpecialTokenIdsTest, ToolCallsEndIsTheTagsLastIds) {
  auto tok = FromJson(nlohmann::json::parse(tokenizer::TinyTokenizerJson()));
  auto ids = ToolCallsEndIds(*tok);
  ASSERT_TRUE(ids.ok()) << ids.status();
  // Tiny ids are bytes, plus one id for the DSML marker: '/' <DSML> "tool_calls>".
  std::vector<int64_t> expected = {'/', *tok->TokenToId(tokenizer::dsv4::kDsml)};
  for (char c : std::string("tool_calls>")) expected.push_back(c);
  EXPECT_EQ(*ids, expected);
}

}  // namespace
}  // namespace loom::chat
