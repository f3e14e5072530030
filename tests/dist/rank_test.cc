// RankFromEnvironment: torchrun's and Slurm's variables, which wins, and
// every malformed value named in the error.

#include "loom/dist/rank.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace loom::dist {
namespace {

using Env = std::map<std::string, std::string>;

absl::StatusOr<RankInfo> From(const Env& env) {
  return RankFromEnvironment([&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(RankTest, NoLauncherIsRankZeroOfOne) {
  auto info = From({});
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->rank, 0);
  EXPECT_EQ(info->world_size, 1);
  EXPECT_FALSE(info->distributed());
  EXPECT_EQ(info->source, "single");
}

TEST(RankTest, TorchrunVariables) {
  auto info = From({{"RANK", "3"},
                    {"WORLD_SIZE", "8"},
                    {"LOCAL_RANK", "1"},
                    {"MASTER_ADDR", "10.0.0.7"},
                    {"MASTER_PORT", "29400"}});
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->rank, 3);
  EXPECT_EQ(info->world_size, 8);
  EXPECT_EQ(info->local_rank, 1);
  EXPECT_EQ(info->master_addr, "10.0.0.7");
  EXPECT_EQ(info->master_port, 29400);
  EXPECT_EQ(info->source, "torchrun");
  EXPECT_TRUE(info->distributed());
}

TEST(RankTest, SlurmVariablesAndTheFirstNodeAsMaster) {
  auto info = From({{"SLURM_PROCID", "5"},
                    {"SLURM_NTASKS", "16"},
                    {"SLURM_LOCALID", "1"},
                    {"SLURM_JOB_NODELIST", "gpu[07-08,11],login1"}});
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->rank, 5);
  EXPECT_EQ(info->world_size, 16);
  EXPECT_EQ(info->local_rank, 1);
  EXPECT_EQ(info->master_addr, "gpu07");
  EXPECT_EQ(info->master_port, 29500);
  EXPECT_EQ(info->source, "slurm");
}

TEST(RankTest, TorchrunUnderSlurmReadsTorchrunsVariables) {
  auto info = From({{"SLURM_PROCID", "0"},
                    {"SLURM_NTASKS", "2"},
                    {"RANK", "6"},
                    {"WORLD_SIZE", "8"},
                    {"MASTER_ADDR", "node3"}});
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->rank, 6);
  EXPECT_EQ(info->world_size, 8);
  EXPECT_EQ(info->master_addr, "node3");
}

TEST(RankTest, MasterAddrWinsOverTheSlurmNodeList) {
  auto info = From({{"SLURM_PROCID", "1"},
                    {"SLURM_NTASKS", "2"},
                    {"SLURM_STEP_NODELIST", "a[1-2]"},
                    {"MASTER_ADDR", "head"},
                    {"MASTER_PORT", "1234"}});
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->master_addr, "head");
  EXPECT_EQ(info->master_port, 1234);
}

TEST(RankTest, SlurmNodeLists) {
  EXPECT_EQ(*FirstSlurmHost("node1"), "node1");
  EXPECT_EQ(*FirstSlurmHost("node1,node2"), "node1");
  EXPECT_EQ(*FirstSlurmHost("node[03-05,9]"), "node03");
  EXPECT_EQ(*FirstSlurmHost("rack[2-3]-gpu,other"), "rack2-gpu");
  EXPECT_EQ(*FirstSlurmHost("a,b[1-2]"), "a");
  for (const char* bad : {"", "node[", "[1-2]", "node[x-2]", "node[]"}) {
    EXPECT_EQ(FirstSlurmHost(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

// Each malformed environment, and the variable its error must name.
TEST(RankTest, MalformedValuesNameTheirVariable) {
  const std::vector<std::pair<Env, std::string>> cases = {
      {{{"RANK", "one"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}, "RANK"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2x"}, {"MASTER_ADDR", "h"}}, "WORLD_SIZE"},
      {{{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}, "RANK=2"},
      {{{"RANK", "-1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}, "RANK=-1"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE=0"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "-3"}, {"MASTER_ADDR", "h"}},
       "LOCAL_RANK"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}}, "MASTER_ADDR"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}},
       "MASTER_PORT=70000"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "http"}},
       "MASTER_PORT"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_JOB_NODELIST", "n[1-"}},
       "SLURM_JOB_NODELIST"},
      {{{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "4"}}, "SLURM_PROCID=4"},
  };
  for (const auto& [env, named] : cases) {
    auto info = From(env);
    ASSERT_FALSE(info.ok()) << named;
    EXPECT_EQ(info.status().code(), absl::StatusCode::kInvalidArgument) << named;
    EXPECT_NE(std::string(info.status().message()).find(named), std::string::npos) << info.status();
  }
}

}  // namespace
}  // namespace loom::dist
