// `loom bench scaffold` through the real binary, small: both scaffolds run
// every episode (none failed), the figures hang together (episodes/s is the
// episodes over the wall time; the ratio is the two rates'), and Pi's start
// is measured apart from an empty command's.

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "testing/temp_dir.h"

namespace loom {
namespace {

using Json = nlohmann::json;

TEST(ScaffoldBenchTest, BothScaffoldsRunEveryEpisodeAndTheFiguresAddUp) {
  if (!std::filesystem::exists(LOOM_SOURCE_DIR "/third_party/npm/node_modules/.bin/pi")) {
    GTEST_SKIP() << "Pi is not installed: run scripts/setup.sh";
  }
  const auto run = testing::RunLoom(
      "bench scaffold --episodes 3 --sessions 2 --tasks " LOOM_SOURCE_DIR
      "/configs/tasks/code-eval.jsonl --harness-dir " LOOM_SOURCE_DIR "/third_party/npm");
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const Json result = Json::parse(run.out.substr(run.out.rfind("\n{") + 1));
  for (const char* name : {"builtin", "pi"}) {
    const Json& s = result["scaffolds"][name];
    EXPECT_EQ(s["failures"], 0) << name << ": " << s.dump();
    EXPECT_NEAR(s["episodes_per_s"].get<double>() * s["wall_s"].get<double>(), 3.0, 1e-9) << name;
    EXPECT_GE(s["mean_turns"].get<double>(), 1.0) << name;
  }
  EXPECT_NEAR(result["builtin_over_pi"].get<double>(),
              result["scaffolds"]["builtin"]["episodes_per_s"].get<double>() /
                  result["scaffolds"]["pi"]["episodes_per_s"].get<double>(),
              1e-9);
  const Json& startup = result["startup"];
  EXPECT_GT(startup["empty_episode_s"].get<double>(), 0.0);
  EXPECT_NEAR(startup["pi_start_s"].get<double>(),
              startup["pi_episode_s"].get<double>() - startup["empty_episode_s"].get<double>(),
              1e-9);
}

}  // namespace
}  // namespace loom
