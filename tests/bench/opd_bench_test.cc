// `loom bench opd`'s driver on a small case: the figures it reports follow
// from the pool's rules (each teacher brought in at most once per step,
// resident teachers used first), not from timing.

#include "loom/bench/opd_bench.h"

#include <gtest/gtest.h>

namespace loom::bench {
namespace {

TEST(OpdBenchTest, EachStepLoadsEveryTeacherNotResidentOnce) {
  OpdBenchOptions options;
  options.quick = true;
  options.teachers = 8;
  options.resident = 2;
  auto result = RunOpdBench(options);
  ASSERT_TRUE(result.ok()) << result.status();
  const nlohmann::json& r = *result;
  // The two teachers left resident by the previous step go first; the other
  // six are loaded once each, each load evicting one.
  EXPECT_EQ(r["teacher_loads_per_step"].get<double>(), 6.0) << r;
  EXPECT_EQ(r["teacher_evictions_per_step"].get<double>(), 6.0) << r;
  EXPECT_LE(r["peak_resident_bytes"].get<int64_t>(), r["teacher_memory_bytes"].get<int64_t>());
  EXPECT_GT(r["step_s_one_teacher"].get<double>(), 0);
  EXPECT_GT(r["step_s_many_teachers"].get<double>(), 0);
  EXPECT_LT(r["teacher_state_bytes_compact"].get<int64_t>(),
            r["teacher_state_bytes_logprobs"].get<int64_t>());
  // Both forms of the teacher give the same KL.
  EXPECT_LT(r["kl_relative_difference"].get<double>(), 1e-5) << r;
}

TEST(OpdBenchTest, BudgetMustHoldFewerTeachersThanThereAre) {
  OpdBenchOptions options;
  options.quick = true;
  options.teachers = 4;
  options.resident = 4;
  EXPECT_EQ(RunOpdBench(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace loom::bench
