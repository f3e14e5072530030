// `loom logprobs` and `loom kl` against an independent Python implementation
// of the Hugging Face equations (tests/model/reference_logprobs.py,
// reference_kl.py), per arch; and the init-model / logprobs / kl command
// lines with malformed input.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sstream>

#include "loom/model/transformer.h"
#include "loom/tokenizer/dsv4_tokens.h"
#include "loom/tokenizer/tokenizer.h"
#include "model/test_models.h"
#include "testing/temp_dir.h"

namespace loom::model {
namespace {

using loom::testing::ReadAll;
using loom::testing::RunCommand;
using loom::testing::RunLoom;
using loom::testing::TempDir;

std::vector<std::vector<double>> ParseLines(const std::string& text, const char* key) {
  std::vector<std::vector<double>> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    out.push_back(nlohmann::json::parse(line)[key].get<std::vector<double>>());
  }
  return out;
}

std::vector<std::vector<double>> ParseLogprobLines(const std::string& text) {
  return ParseLines(text, "logprobs");
}

class ReferenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceTest, LogprobsAgreeWithHuggingFaceEquations) {
  TempDir dir;
  ModelConfig config = testing::TestConfig(GetParam());
  config.tie_word_embeddings = GetParam() == "qwen3";  // cover the tied head too
  ASSERT_TRUE(testing::TestModel(config, 31)->Save(dir / "model").ok());
  std::string input = dir.Write("in.jsonl",
                                "{\"tokens\": [5, 17, 3, 96, 40, 2, 2, 61, 7, 0, 88, 13]}\n"
                                "{\"tokens\": [1, 2]}\n"
                                "{\"tokens\": [9, 30, 31, 32, 90, 4, 4, 4, 77, 50, 12, 11, 10, "
                                "63, 64, 65, 1, 80, 81, 82, 83, 84]}\n");
  auto ref = RunCommand("/usr/bin/python3 " LOOM_SOURCE_DIR "/tests/model/reference_logprobs.py " +
                        (dir / "model") + " " + input + " " + (dir / "ref.jsonl"));
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  auto loom = RunLoom("logprobs --model " + (dir / "model") + " --input " + input);
  ASSERT_EQ(loom.exit_code, 0) << loom.err;
  auto expected = ParseLogprobLines(ReadAll(dir / "ref.jsonl"));
  auto actual = ParseLogprobLines(loom.out);
  ASSERT_EQ(expected.size(), 3u);
  ASSERT_EQ(actual.size(), 3u);
  double max_diff = 0, spread = 0;
  for (size_t s = 0; s < expected.size(); ++s) {
    ASSERT_EQ(actual[s].size(), expected[s].size());
    for (size_t i = 0; i < expected[s].size(); ++i) {
      max_diff = std::max(max_diff, std::abs(actual[s][i] - expected[s][i]));
      spread = std::max(spread, std::abs(expected[s][i] - expected[s][0]));
    }
  }
  EXPECT_LE(max_diff, 1e-4);
  EXPECT_GT(spread, 0.5) << "weights too small for the comparison to mean anything";
}

INSTANTIATE_TEST_SUITE_P(Archs, ReferenceTest, ::testing::ValuesIn(testing::AllArchs()));

// A student of each arch against a teacher of another arch and width, at a
// temperature other than 1.
class KlReferenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(KlReferenceTest, KlAgreesWithHuggingFaceEquations) {
  TempDir dir;
  ModelConfig student = testing::TestConfig(GetParam());
  ModelConfig teacher = testing::TestConfig(GetParam() == "qwen2" ? "qwen3_moe" : "qwen2");
  teacher.hidden_size = 64;
  teacher.num_hidden_layers = 2;
  ASSERT_TRUE(testing::TestModel(student, 41)->Save(dir / "student").ok());
  ASSERT_TRUE(testing::TestModel(teacher, 42)->Save(dir / "teacher").ok());
  std::string input = dir.Write("in.jsonl",
                                "{\"tokens\": [5, 17, 3, 96, 40, 2, 2, 61, 7, 0, 88, 13], "
                                "\"response_start\": 4}\n"
                                "{\"tokens\": [1, 2], \"response_start\": 1}\n"
                                "{\"tokens\": [9, 30, 31, 32, 90, 4, 4, 4, 77, 50, 12, 11, 10, "
                                "63, 64, 65, 1, 80], \"response_start\": 10}\n");
  auto ref = RunCommand("/usr/bin/python3 " LOOM_SOURCE_DIR "/tests/model/reference_kl.py " +
                        (dir / "student") + " " + (dir / "teacher") + " 0.8 " + input + " " +
                        (dir / "ref.jsonl"));
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  auto loom = RunLoom("kl --student " + (dir / "student") + " --teacher " + (dir / "teacher") +
                      " --temperature 0.8 --input " + input);
  ASSERT_EQ(loom.exit_code, 0) << loom.err;
  auto expected = ParseLines(ReadAll(dir / "ref.jsonl"), "kl");
  auto actual = ParseLines(loom.out, "kl");
  ASSERT_EQ(expected.size(), 3u);
  ASSERT_EQ(actual.size(), 3u);
  const std::vector<size_t> response_tokens = {8, 1, 8};
  double max_diff = 0, smallest = 1e9;
  for (size_t s = 0; s < expected.size(); ++s) {
    ASSERT_EQ(expected[s].size(), response_tokens[s]);
    ASSERT_EQ(actual[s].size(), response_tokens[s]);
    for (size_t i = 0; i < expected[s].size(); ++i) {
      max_diff = std::max(max_diff, std::abs(actual[s][i] - expected[s][i]));
      smallest = std::min(smallest, expected[s][i]);
    }
  }
  EXPECT_LE(max_diff, 1e-4);
  EXPECT_GT(smallest, 1e-3) << "the two models agree too well for the comparison to mean anything";
}

INSTANTIATE_TEST_SUITE_P(Archs, KlReferenceTest, ::testing::ValuesIn(testing::AllArchs()));

TEST(KlCommandTest, MalformedInputNamesTheLine) {
  TempDir dir;
  ASSERT_TRUE(testing::TestModel(testing::TestConfig("llama"), 1)->Save(dir / "a").ok());
  ASSERT_TRUE(testing::TestModel(testing::TestConfig("qwen3"), 2)->Save(dir / "b").ok());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"tokens\": [1, 2, 3]}", "response_start"},
      {"{\"tokens\": [1, 2, 3], \"response_start\": 0}", "outside 1..3"},
      {"{\"tokens\": [1, 2, 3], \"response_start\": 4}", "outside 1..3"},
      {"{\"tokens\": [1, 2, 3], \"response_start\": \"2\"}", "response_start"},
      {"{\"tokens\": [1, 500, 3], \"response_start\": 1}", "out of range"},
      {"not json", "expected {\"tokens\""},
  };
  for (const auto& [line, needle] : cases) {
    const std::string input =
        dir.Write("in.jsonl", "{\"tokens\": [4, 5], \"response_start\": 1}\n" + line + "\n");
    auto run =
        RunLoom("kl --student " + (dir / "a") + " --teacher " + (dir / "b") + " --input " + input);
    EXPECT_EQ(run.exit_code, 2) << line;
    EXPECT_NE(run.err.find(input + ":2:"), std::string::npos) << run.err;
    EXPECT_NE(run.err.find(needle), std::string::npos) << line << " → " << run.err;
  }
  ModelConfig other = testing::TestConfig("qwen3");
  other.vocab_size = 98;
  ASSERT_TRUE(testing::TestModel(other, 3)->Save(dir / "c").ok());
  auto mismatch =
      RunLoom("kl --student " + (dir / "a") + " --teacher " + (dir / "c") + " --input " +
              dir.Write("ok.jsonl", "{\"tokens\": [4, 5], \"response_start\": 1}\n"));
  EXPECT_EQ(mismatch.exit_code, 2);
  EXPECT_NE(mismatch.err.find("vocab_size"), std::string::npos) << mismatch.err;
}

TEST(InitModelCommandTest, WritesALoadableModelWithOverrides) {
  TempDir dir;
  auto result = RunLoom("init-model --arch qwen3_moe --out " + (dir / "m") +
                        " --set hidden_size=32 --set num_experts=3 --seed 4");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  auto model = Transformer::Load(dir / "m", {});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->config().hidden_size, 32);
  EXPECT_EQ((*model)->config().num_experts, 3);
  EXPECT_FALSE(ReadAll(dir / "m/tokenizer.json").empty());
  auto again = RunLoom("init-model --arch qwen3_moe --out " + (dir / "m2") +
                       " --set hidden_size=32 --set num_experts=3 --seed 4");
  ASSERT_EQ(again.exit_code, 0);
  EXPECT_EQ(ReadAll(dir / "m/model.safetensors"), ReadAll(dir / "m2/model.safetensors"));
}

TEST(InitModelCommandTest, EffortPhraseTokensShortenTheEffortLine) {
  TempDir dir;
  auto result = RunLoom("init-model --arch llama --out " + (dir / "m") +
                        " --tokenizer bytes+effort --set hidden_size=32");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  auto model = Transformer::Load(dir / "m", {});
  ASSERT_TRUE(model.ok()) << model.status();
  auto tok = tokenizer::Tokenizer::FromFile(dir / "m/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*model)->config().vocab_size, (*tok)->VocabSize());
  // Both fixed parts of the line are one token each; the effort stays in digits.
  auto ids = (*tok)->Encode(std::string(tokenizer::dsv4::kEffortLineStart) + "75" +
                            std::string(tokenizer::dsv4::kEffortLineEnd));
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids,
            (std::vector<int32_t>{(*tok)->VocabSize() - 2, '7', '5', (*tok)->VocabSize() - 1}));
  EXPECT_EQ(
      RunLoom("init-model --arch llama --out " + (dir / "x") + " --tokenizer words").exit_code, 2);
}

TEST(InitModelCommandTest, BadOverrideIsAUsageError) {
  TempDir dir;
  auto result = RunLoom("init-model --arch llama --out " + (dir / "m") +
                        " --set rope_scaling='{\"rope_type\":\"yarn\"}'");
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.err.find("rope_scaling type 'yarn'"), std::string::npos) << result.err;
}

TEST(LogprobsCommandTest, MalformedInputNamesTheLine) {
  TempDir dir;
  ASSERT_EQ(RunLoom("init-model --arch llama --out " + (dir / "m")).exit_code, 0);
  std::string input = dir.Write("in.jsonl", "{\"tokens\": [1, 2]}\n{\"tokens\": \"x\"}\n");
  auto result = RunLoom("logprobs --model " + (dir / "m") + " --input " + input);
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.err.find("in.jsonl:2"), std::string::npos) << result.err;
  input = dir.Write("big.jsonl", "{\"tokens\": [1, 99999]}\n");
  result = RunLoom("logprobs --model " + (dir / "m") + " --input " + input);
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.err.find("big.jsonl:1"), std::string::npos) << result.err;
  dir.Write("m/model.safetensors", "garbage!garbage!");
  result = RunLoom("logprobs --model " + (dir / "m") + " --input " + input);
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.err.find("model.safetensors"), std::string::npos) << result.err;
}

}  // namespace
}  // namespace loom::model
