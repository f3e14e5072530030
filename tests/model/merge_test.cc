// `loom merge` against values computed by hand, and its refusals.

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "loom/model/merge.h"
#include "loom/model/safetensors.h"
#include "testing/temp_dir.h"

namespace loom::model {
namespace {

using loom::testing::ReadAll;
using loom::testing::RunLoom;
using loom::testing::TempDir;

const char* kConfig = R"({"model_type": "llama", "hidden_size": 2, "transformers_version": "X"})";

std::string MakeModel(const TempDir& dir, const std::string& name, const TensorMap& tensors,
                      const std::string& config = kConfig) {
  const std::string path = dir / name;
  dir.Write(name + "/config.json", config);
  dir.Write(name + "/tokenizer.json", "{\"tok\": \"" + name + "\"}");
  EXPECT_TRUE(WriteSafetensors(path + "/model.safetensors", tensors).ok());
  return path;
}

TEST(MergeTest, WeightedAverageMatchesHandComputation) {
  TempDir dir;
  const std::string a =
      MakeModel(dir, "a", {{"w", at::tensor({1.0f, 2.0f, 3.0f})}, {"b", at::tensor({10.0f})}});
  const std::string b =
      MakeModel(dir, "b", {{"w", at::tensor({3.0f, 6.0f, -1.0f})}, {"b", at::tensor({-10.0f})}});
  auto result = RunLoom("merge --inputs " + a + " " + b + " --weights 1 3 --output " + (dir / "m"));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  auto merged = ReadSafetensors(dir / "m/model.safetensors");
  ASSERT_TRUE(merged.ok()) << merged.status();
  // 0.25 * a + 0.75 * b, by hand.
  const float expected_w[] = {2.5f, 5.0f, 0.0f};
  auto w = merged->at("w").contiguous();
  ASSERT_EQ(w.scalar_type(), at::kFloat);
  for (int i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(w.data_ptr<float>()[i], expected_w[i]);
  EXPECT_FLOAT_EQ(merged->at("b").item<float>(), -5.0f);
  EXPECT_EQ(ReadAll(dir / "m/config.json"), kConfig);
  EXPECT_EQ(ReadAll(dir / "m/tokenizer.json"), "{\"tok\": \"a\"}");
}

TEST(MergeTest, KeepsBfloat16) {
  TempDir dir;
  const std::string a = MakeModel(dir, "a", {{"w", at::tensor({1.0f, 2.0f}).to(at::kBFloat16)}});
  const std::string b = MakeModel(dir, "b", {{"w", at::tensor({2.0f, 4.0f}).to(at::kBFloat16)}});
  ASSERT_TRUE(MergeModels({{a, b}, {}, dir / "m"}).ok());
  auto merged = ReadSafetensors(dir / "m/model.safetensors");
  ASSERT_TRUE(merged.ok());
  EXPECT_EQ(merged->at("w").scalar_type(), at::kBFloat16);
  EXPECT_FLOAT_EQ(merged->at("w")[1].item<float>(), 3.0f);
}

TEST(MergeTest, MismatchesAreOneClearErrorAndWriteNothing) {
  TempDir dir;
  const std::string a = MakeModel(dir, "a", {{"w", at::zeros({2, 3})}, {"x", at::zeros({1})}});
  const std::string shape = MakeModel(dir, "s", {{"w", at::zeros({3, 2})}, {"y", at::zeros({1})}});
  auto status = MergeModels({{a, shape}, {}, dir / "m"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "inputs do not have the same tensors:\n  w: shape [2, 3] vs [3, 2] in " + shape +
                "\n  " + shape + " lacks x\n  " + shape + " has extra tensor y");
  const std::string arch = MakeModel(dir, "c", {{"w", at::zeros({2, 3})}, {"x", at::zeros({1})}},
                                     R"({"model_type": "qwen3", "hidden_size": 2})");
  status = MergeModels({{a, arch}, {}, dir / "m"});
  EXPECT_NE(status.message().find("config.json of " + arch + " differs"), std::string::npos)
      << status.message();
  EXPECT_FALSE(std::filesystem::exists(dir / "m"));
  EXPECT_EQ(MergeModels({{a, a}, {1, -1}, dir / "m"}).message(),
            "--weights: weights must be finite and >= 0");
  EXPECT_EQ(MergeModels({{a, a}, {1}, dir / "m"}).message(), "--weights: 1 weights for 2 inputs");
  auto cli = RunLoom("merge --inputs " + a + " " + (dir / "missing") + " --output " + (dir / "m"));
  EXPECT_NE(cli.exit_code, 0);
  EXPECT_NE(cli.err.find(dir / "missing"), std::string::npos) << cli.err;
}

}  // namespace
}  // namespace loom::model
