// `loom train` as a real process: the run directory it lays out, and that a
// bad config writes nothing.

#include <gtest/gtest.h>

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
  auto result = RunLoom("train --config configs/quickstart.yaml --run-dir " + run_dir +
                        " --set run.seed=42 --set 'train.stages=[]' --set model.path=" +
                        (dir / "model"));
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
