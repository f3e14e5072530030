// LiveConfig: the mix a run may change mid-run, behind a version. A valid
// replacement bumps the version; an invalid one names the key and changes
// nothing.

#include "loom/train/live_config.h"

#include <gtest/gtest.h>

namespace loom::train {
namespace {

config::TasksSection TwoDatasets() {
  config::TasksSection tasks;
  tasks.datasets.resize(2);
  tasks.datasets[0].name = "sort";
  tasks.datasets[0].weight = 2;
  tasks.datasets[1].name = "reverse";
  tasks.datasets[1].max_inflight = 8;
  return tasks;
}

TEST(LiveConfigTest, StartsFromTheConfigAtTheGivenVersion) {
  LiveConfig live(TwoDatasets(), 4);
  EXPECT_EQ(live.version(), 4);
  ASSERT_EQ(live.datasets().size(), 2u);
  EXPECT_EQ(live.datasets()[0].name, "sort");
  EXPECT_EQ(live.datasets()[0].weight, 2);
  EXPECT_EQ(live.datasets()[1].max_inflight, 8);
}

TEST(LiveConfigTest, AReplacementBumpsTheVersion) {
  LiveConfig live(TwoDatasets(), 0);
  std::vector<dispatch::DatasetQuota> mix = live.datasets();
  mix[0].weight = 0;  // park sort
  mix[1].max_inflight = 16;
  ASSERT_TRUE(live.Replace(mix).ok());
  EXPECT_EQ(live.version(), 1);
  EXPECT_EQ(live.datasets()[0].weight, 0);
  EXPECT_EQ(live.datasets()[1].max_inflight, 16);
}

TEST(LiveConfigTest, AnInvalidReplacementNamesTheKeyAndChangesNothing) {
  LiveConfig live(TwoDatasets(), 2);
  const auto before = live.datasets();
  auto expect_rejected = [&](std::vector<dispatch::DatasetQuota> mix, const std::string& key) {
    absl::Status s = live.Replace(std::move(mix));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(key), std::string::npos) << s;
    EXPECT_EQ(live.version(), 2);
    EXPECT_EQ(live.datasets()[0].weight, before[0].weight);
  };
  auto mix = before;
  mix.pop_back();
  expect_rejected(mix, "tasks.datasets: 1 datasets given");
  mix = before;
  std::swap(mix[0], mix[1]);
  expect_rejected(mix, "tasks.datasets.0.name");
  mix = before;
  mix[1].weight = -1;
  expect_rejected(mix, "tasks.datasets.1.weight");
  mix = before;
  mix[0].max_inflight = -3;
  expect_rejected(mix, "tasks.datasets.0.max_inflight");
  mix = before;
  mix[0].weight = mix[1].weight = 0;
  expect_rejected(mix, "every weight is 0");
}

}  // namespace
}  // namespace loom::train
