// The shipped agent task set (configs/tasks) is what its generator makes:
// scripts/gen_code_tasks.py, re-run with its defaults, writes the same
// files byte for byte. (Whether each task is sound is task_check_test's.)

#include <gtest/gtest.h>

#include "testing/temp_dir.h"

namespace loom {
namespace {

TEST(CodeTasksTest, TheGeneratorRemakesTheShippedFilesByteForByte) {
  testing::TempDir dir;
  const auto run = testing::RunCommand(
      "python3 " LOOM_SOURCE_DIR "/scripts/gen_code_tasks.py --out " + dir.path());
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  for (const char* name : {"code-train.jsonl", "code-eval.jsonl"}) {
    const std::string shipped =
        testing::ReadAll(LOOM_SOURCE_DIR "/configs/tasks/" + std::string(name));
    ASSERT_FALSE(shipped.empty()) << name;
    EXPECT_TRUE(testing::ReadAll(dir / name) == shipped)
        << name << " differs from what the generator makes now: re-run "
        << "scripts/gen_code_tasks.py and commit its output";
  }
}

}  // namespace
}  // namespace loom
