// `loom logprobs` against an independent Python implementation of the
// Hugging Face equations (tests/model/reference_logprobs.py), per arch; and
// the init-model / logprobs command lines.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sstream>

#include "loom/model/transformer.h"
#include "model/test_models.h"
#include "testing/temp_dir.h"

namespace loom::model {
namespace {

using loom::testing::ReadAll;
using loom::testing::RunCommand;
using loom::testing::RunLoom;
using loom::testing::TempDir;

std::vector<std::vector<double>> ParseLogprobLines(const std::string& text) {
  std::vector<std::vector<double>> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    out.push_back(nlohmann::json::parse(line)["logprobs"].get<std::vector<double>>());
  }
  return out;
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
