// `loom train` as a real process: the run directory it lays out, and that a
// bad config writes nothing.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "testing/temp_dir.h"

namespace loom {
namespace {

using testing::ReadAll;
using testing::RunLoom;
using testing::TempDir;

TEST(TrainCliTest, CreatesRunDirectoryWithResolvedConfig) {
  TempDir dir;
  const std::string run_dir = dir / "run";
  auto result =
      RunLoom("train --config configs/quickstart.yaml --run-dir " + run_dir +
              " --set run.seed=42 --set 'train.stages=[]' --set model.path=" + (dir / "model"));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const std::string saved = ReadAll(run_dir + "/config.yaml");
  EXPECT_NE(saved.find("seed: 42"), std::string::npos) << saved;
  // The saved config is itself a valid config that resolves to the same text.
  auto check = RunLoom("config check " + run_dir + "/config.yaml");
  ASSERT_EQ(check.exit_code, 0) << check.err;
  EXPECT_EQ(check.out, saved);
  EXPECT_TRUE(std::filesystem::is_directory(run_dir + "/checkpoints"));
  EXPECT_NE(ReadAll(run_dir + "/log.txt").find("run 'quickstart'"), std::string::npos);
}

TEST(TrainCliTest, CreatesTheModelWithTheConfiguredTinyTokenizer) {
  // The effort line's opening text is one token with bytes+effort and one
  // token per byte with bytes: the config key reaches the created model.
  TempDir dir;
  const std::string line = dir.Write("line.jsonl", "\"Reasoning Effort: \"\n");
  for (const std::string name : {"bytes", "bytes+effort"}) {
    const std::string model = dir / ("model-" + name);
    auto train = RunLoom("train --config configs/effort.yaml --run-dir " + (dir / ("run-" + name)) +
                         " --set 'train.stages=[]' --set model.path=" + model +
                         " --set model.init_tokenizer=" + name);
    ASSERT_EQ(train.exit_code, 0) << train.err;
    auto ids = RunLoom("tokenize --tokenizer " + model + "/tokenizer.json --input " + line);
    ASSERT_EQ(ids.exit_code, 0) << ids.err;
    const auto commas = std::count(ids.out.begin(), ids.out.end(), ',');
    EXPECT_EQ(commas + 1, name == "bytes" ? 18 : 1) << name << ": " << ids.out;
  }
}

TEST(TrainCliTest, BadConfigWritesNothing) {
  TempDir dir;
  const std::string run_dir = dir / "run";
  auto result = RunLoom("train --config configs/quickstart.yaml --run-dir " + run_dir +
                        " --set run.threads=-1");
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.err.find("run.threads: out of range"), std::string::npos) << result.err;
  EXPECT_EQ(result.err.find("terminate"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(run_dir));
}

}  // namespace
}  // namespace loom
