// `loom bench live --quick`: every kind of change is timed and set against
// the engine step it is counted in; a bad tokenizer fails clearly.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "testing/temp_dir.h"

namespace loom {
namespace {

TEST(LiveBenchTest, QuickRunTimesEveryKindOfChangeAgainstAnEngineStep) {
  auto run = testing::RunLoom("bench live --quick --batch 8 --threads 1");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json result = nlohmann::json::parse(run.out);
  const double step = result["engine_step_s"];
  EXPECT_GT(step, 0);
  EXPECT_EQ(result["batch"], 8);
  EXPECT_EQ(result["rounds"], 5);
  for (const char* kind : {"mix", "teacher_switch", "teacher_add"}) {
    const double apply = result[std::string("apply_") + kind + "_s"];
    EXPECT_GT(apply, 0) << kind;
    EXPECT_LT(apply, 10) << kind;
    EXPECT_NEAR(result[std::string(kind) + "_in_engine_steps"].get<double>(), apply / step,
                1e-9 * apply / step)
        << kind;
  }
}

TEST(LiveBenchTest, ATokenizerThatIsNotOneFailsNamingIt) {
  testing::TempDir dir;
  const std::string path = dir.Write("tokenizer.json", "{\"model\": 3}");
  auto run = testing::RunLoom("bench live --quick --tokenizer " + path);
  EXPECT_EQ(run.exit_code, 2) << "a bad input file is a usage error";
  EXPECT_NE(run.err.find(path), std::string::npos) << run.err;
}

}  // namespace
}  // namespace loom
