// The tiny tokenizer: layout, and agreement with Hugging Face tokenizers.
// LIVE test: runs node with @anush008/tokenizers (tests/tokenizer/hf_reference.js)
// on the tiny tokenizer.json and the corpus, and compares ids.

#include "loom/tokenizer/tiny.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "loom/tokenizer/dsv4_tokens.h"
#include "loom/tokenizer/tokenizer.h"
#include "testing/temp_dir.h"
#include "tokenizer/test_paths.h"

namespace loom::tokenizer {
namespace {

TEST(TinyTokenizerTest, HasEveryByteAndEverySpecialString) {
  auto tok = Tokenizer::FromJson(TinyTokenizerJson(), "tiny");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->VocabSize(), TinyTokenizerVocabSize());
  EXPECT_EQ(TinyTokenizerVocabSize(), 256 + static_cast<int>(std::size(dsv4::kAllSpecial)));
  auto ids = (*tok)->Encode(std::string("\x00\x01 A\xc3\xa9", 6));
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{0, 1, 32, 65, 0xc3, 0xa9}));
  int32_t expected = 256;
  for (std::string_view special : dsv4::kAllSpecial) {
    EXPECT_EQ((*tok)->SpecialTokenId(special), expected++) << special;
  }
  EXPECT_EQ(TinyTokenizerJson(), TinyTokenizerJson());  // deterministic
}

TEST(TinyTokenizerTest, EffortPhrasesAreOneTokenEachAndChangeNothingElse) {
  const TinyTokenizerOptions phrases{true};
  auto plain = Tokenizer::FromJson(TinyTokenizerJson(), "tiny");
  auto tok = Tokenizer::FromJson(TinyTokenizerJson(phrases), "tiny+effort");
  ASSERT_TRUE(plain.ok() && tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->VocabSize(), TinyTokenizerVocabSize() + 2);
  EXPECT_EQ(TinyTokenizerVocabSize(phrases), TinyTokenizerVocabSize() + 2);
  const int32_t start = TinyTokenizerVocabSize(), end = start + 1;
  const std::string line = std::string(dsv4::kEffortLineStart) + "100" +
                           std::string(dsv4::kEffortLineEnd) + "Compute: 1+2";
  auto ids = (*tok)->Encode(line);
  ASSERT_TRUE(ids.ok());
  auto tail = (*plain)->Encode("Compute: 1+2");
  std::vector<int32_t> expected = {start, '1', '0', '0', end};
  expected.insert(expected.end(), tail->begin(), tail->end());
  EXPECT_EQ(*ids, expected);
  EXPECT_EQ(*(*tok)->Decode(*ids, /*skip_special=*/true), line);  // plain text, not special
  EXPECT_FALSE((*tok)->IsSpecial(start));
  // A part of a phrase, or a text without one, encodes byte by byte as before.
  for (std::string text : {std::string("Reasoning Effort:"), std::string("range 1–100; higher"),
                           std::string("\x00 A\xc3\xa9")}) {
    EXPECT_EQ(*(*tok)->Encode(text), *(*plain)->Encode(text)) << text;
  }
  for (std::string_view special : dsv4::kAllSpecial) {
    EXPECT_EQ((*tok)->SpecialTokenId(special), (*plain)->SpecialTokenId(special)) << special;
  }
}

// A real vocabulary with the chat format's special strings added after it:
// every text encodes as before, the specials DeepSeek-V3 has keep their ids,
// the ones it lacks get new ids after its highest.
TEST(TinyTokenizerTest, ARealVocabularyGetsTheChatSpecialsItLacks) {
  if (!testing::Exists(testing::DeepSeekV3Json())) GTEST_SKIP() << "run scripts/setup.sh";
  const std::string original = loom::testing::ReadAll(testing::DeepSeekV3Json());
  int64_t vocab = 0;
  auto augmented = WithChatSpecials(original, &vocab);
  ASSERT_TRUE(augmented.ok()) << augmented.status();
  auto before = Tokenizer::FromJson(original, "deepseek_v3");
  auto after = Tokenizer::FromJson(*augmented, "deepseek_v3+chat");
  ASSERT_TRUE(before.ok() && after.ok()) << after.status();
  EXPECT_EQ((*after)->VocabSize(), vocab);
  const int64_t highest = (*before)->VocabSize() - 1;
  int added = 0;
  for (std::string_view special : dsv4::kAllSpecial) {
    auto id = (*after)->TokenToId(special);
    ASSERT_TRUE(id.has_value()) << special;
    if (auto old = (*before)->TokenToId(special)) {
      EXPECT_EQ(*id, *old) << special;  // BOS, EOS and the roles are DeepSeek-V3's own
    } else {
      EXPECT_GT(*id, highest) << special;
      ++added;
    }
  }
  EXPECT_EQ(vocab, highest + 1 + added);
  EXPECT_GE(added, 8);  // <think>, </think>, DSML, the reminder and the tasks
  for (std::string text :
       {std::string("def f(x):\n    return x + 1  # héllo"), std::string("Hello, world! 123")}) {
    EXPECT_EQ(*(*after)->Encode(text), *(*before)->Encode(text)) << text;
  }
  auto twice = WithChatSpecials(*augmented, &vocab);
  ASSERT_TRUE(twice.ok());
  EXPECT_EQ(vocab, highest + 1 + added);  // nothing left to add
  for (std::string bad :
       {std::string("{"), std::string("[]"), std::string(R"({"model": {}})"),
        std::string(R"({"model": {"vocab": {"a": "x"}}})"),
        std::string(R"({"model": {"vocab": {}}, "added_tokens": [{"id": 1}]})")}) {
    auto refused = WithChatSpecials(bad, &vocab);
    EXPECT_FALSE(refused.ok()) << bad;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

class TinyTokenizerHfTest : public ::testing::TestWithParam<bool> {};

TEST_P(TinyTokenizerHfTest, HuggingFaceLoadsItAndAgrees) {
  const std::string node_modules = testing::SourcePath("third_party/npm/node_modules/@anush008");
  if (!testing::Exists(node_modules) || std::system("node --version >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "node or @anush008/tokenizers missing: run scripts/setup.sh";
  }
  const TinyTokenizerOptions options{GetParam()};
  loom::testing::TempDir dir;
  const std::string json = dir.Write("tokenizer.json", TinyTokenizerJson(options));
  std::string corpus_text = loom::testing::ReadAll(testing::DataPath("corpus.jsonl"));
  for (std::string_view s : dsv4::kAllSpecial) {
    corpus_text += nlohmann::json("x" + std::string(s) + "<" + std::string(s) + ">").dump() + "\n";
  }
  for (std::string_view s : {dsv4::kEffortLineStart, dsv4::kEffortLineEnd}) {
    corpus_text += nlohmann::json(std::string(dsv4::kBos) + std::string(s) + "42" +
                                  std::string(s.substr(0, s.size() - 3)))
                       .dump() +
                   "\n";
  }
  const std::string corpus = dir.Write("corpus.jsonl", corpus_text);
  const auto result =
      loom::testing::RunCommand("node " + testing::SourcePath("tests/tokenizer/hf_reference.js") +
                                " encode " + json + " " + corpus);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  auto tok = Tokenizer::FromJson(TinyTokenizerJson(options), "tiny");
  ASSERT_TRUE(tok.ok());
  std::istringstream lines(result.out);
  std::string line;
  int count = 0;
  while (std::getline(lines, line)) {
    auto j = nlohmann::json::parse(line);
    auto ids = (*tok)->Encode(j["text"].get<std::string>());
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(*ids, j["ids"].get<std::vector<int32_t>>()) << j["text"].dump();
    ++count;
  }
  EXPECT_GE(count, 200);
}

INSTANTIATE_TEST_SUITE_P(BytesAndEffortPhrases, TinyTokenizerHfTest, ::testing::Bool());

}  // namespace
}  // namespace loom::tokenizer
