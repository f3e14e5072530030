// `loom bench rollout --quick --json`, the real binary, against the issue's
// targets. Labelled slow: about 20-60 s on 2 shared cores.

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "testing/temp_dir.h"

namespace loom::bench {
namespace {

TEST(RolloutBenchCliTest, QuickRunMeetsTheTargets) {
  auto result = loom::testing::RunLoom("bench rollout --quick --json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::string out = result.out;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  const std::string last = out.substr(out.rfind('\n') + 1);  // npos + 1 = 0: one line
  auto j = nlohmann::json::parse(last);
  EXPECT_LE(j["interrupt_latency_steps_p99"].get<double>(), 1.0);
  EXPECT_GE(j["resume_prefix_tokens"].get<int64_t>(), 1024);
  EXPECT_GE(j["resume_vs_reprefill_speedup"].get<double>(), 20.0);
  EXPECT_GE(j["kv_bytes_per_token_ratio"].get<double>(), 0.95);
}

}  // namespace
}  // namespace loom::bench
