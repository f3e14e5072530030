// `loom config check` run as a real process: exit codes, output, no stack traces.

#include <gtest/gtest.h>

#include "testing/temp_dir.h"

namespace loom {
namespace {

using testing::RunLoom;
using testing::TempDir;

TEST(ConfigCliTest, CheckPrintsResolvedConfig) {
  auto result = RunLoom("config check configs/quickstart.yaml --set run.threads=1");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("threads: 1\n"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("dtype: \"float32\""), std::string::npos) << result.out;
}

TEST(ConfigCliTest, BadConfigExitsTwoWithLocatedErrorsOnly) {
  TempDir dir;
  const std::string path = dir.Write("bad.yaml", "run:\n  name: x\n  sed: 1\nmodel: {path: m}\n");
  auto result = RunLoom("config check " + path + " --set run.threads=many");
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_EQ(result.out, "");
  EXPECT_EQ(result.err, "--set run.threads=many: run.threads: expected an integer, got 'many'\n" +
                            path + ":3:3: run.sed: unknown key (did you mean 'seed'?)\n");
}

TEST(ConfigCliTest, UnknownCommandAndMissingArgumentAreUsageErrors) {
  EXPECT_EQ(RunLoom("no-such-command").exit_code, 2);
  EXPECT_EQ(RunLoom("config check").exit_code, 2);
}

TEST(ConfigCliTest, HelpListsCommandsAndVersionNamesLibTorch) {
  auto help = RunLoom("--help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("config"), std::string::npos);
  EXPECT_NE(help.out.find("version"), std::string::npos);
  auto version = RunLoom("version");
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_NE(version.out.find("libtorch "), std::string::npos) << version.out;
  EXPECT_NE(version.out.find("cuda: "), std::string::npos) << version.out;
}

}  // namespace
}  // namespace loom
