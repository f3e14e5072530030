// `loom tasks check` through the real binary, on real local workers and
// bubblewrap sandboxes: the shipped task set is every task fine (its tests
// fail as given and pass with its reference), and a file of broken tasks is
// reported task by task with what is wrong. A malformed file never reaches
// a worker.

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "testing/temp_dir.h"

namespace loom {
namespace {

using Json = nlohmann::json;
using testing::TempDir;

const char kTrain[] = LOOM_SOURCE_DIR "/configs/tasks/code-train.jsonl";
const char kEval[] = LOOM_SOURCE_DIR "/configs/tasks/code-eval.jsonl";

std::vector<Json> ReadLines(const std::string& path) {
  std::vector<Json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(Json::parse(line));
  return lines;
}

// The JSON summary: the last line of stdout.
Json Summary(const std::string& out) {
  std::istringstream in(out);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  return Json::parse(last, nullptr, false);
}

TEST(TaskCheckTest, EveryShippedTaskFailsAsGivenAndPassesWithItsReference) {
  const auto run =
      testing::RunLoom(std::string("tasks check --json --jobs 4 ") + kTrain + " " + kEval);
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const Json summary = Summary(run.out);
  EXPECT_EQ(summary["tasks"], ReadLines(kTrain).size() + ReadLines(kEval).size());
  EXPECT_EQ(summary["ok"], summary["tasks"]);
  EXPECT_EQ(summary["without_reference"], 0);
}

// Four tasks made from shipped ones: one left fine, one whose reference is
// the buggy file itself, one whose bug is fixed already, one whose setup
// fails. Each broken one is named with its cause.
TEST(TaskCheckTest, BrokenTasksAreNamedWithWhatIsWrong) {
  std::vector<Json> tasks = ReadLines(kEval);
  ASSERT_GE(tasks.size(), 4u);
  tasks.resize(4);
  auto solution = [](const Json& task) { return task["reference"]["files"].begin(); };
  tasks[1]["reference"]["files"][solution(tasks[1]).key()] =
      tasks[1]["environment"]["files"][solution(tasks[1]).key()];
  tasks[2]["environment"]["files"][solution(tasks[2]).key()] = solution(tasks[2]).value();
  tasks[3]["environment"]["setup"] = "echo no such service >&2; exit 3";
  TempDir dir;
  std::string text;
  for (const Json& task : tasks) text += task.dump() + "\n";
  const std::string path = dir.Write("tasks.jsonl", text);

  const auto run =
      testing::RunLoom("tasks check --json --ledger " + (dir / "ledger.sqlite") + " " + path);
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json summary = Summary(run.out);
  ASSERT_FALSE(summary.is_discarded()) << run.out;
  EXPECT_EQ(summary["ok"], 1);
  ASSERT_EQ(summary["broken"].size(), 3u) << summary.dump(1);
  std::map<std::string, std::string> problems;
  for (const Json& b : summary["broken"]) {
    problems[b["id"]] = b["problem"];
    EXPECT_EQ(b["source"].get<std::string>().rfind(path + ":", 0), 0u) << b.dump();
  }
  EXPECT_EQ(problems[tasks[1]["id"]].rfind("its reference solution fails: fail_to_pass ", 0), 0u)
      << problems[tasks[1]["id"]];
  EXPECT_EQ(problems[tasks[2]["id"]].rfind("its verification passes with nothing done", 0), 0u)
      << problems[tasks[2]["id"]];
  EXPECT_EQ(problems[tasks[3]["id"]],
            "its environment's setup_failed: exit status 3: no such service\n");
  EXPECT_EQ(problems.count(tasks[0]["id"]), 0u);

  // The ledger holds both episodes of each task; its audit finds the same
  // three broken tasks, under the file's name.
  const auto audit = testing::RunLoom("tasks audit --json " + (dir / "ledger.sqlite"));
  ASSERT_EQ(audit.exit_code, 0) << audit.err;
  const Json flags = Summary(audit.out);
  EXPECT_EQ(flags["tasks"], 4);
  std::set<std::string> broken;
  for (const Json& f : flags["flags"]) {
    EXPECT_EQ(f["flag"], "broken") << f.dump();
    EXPECT_EQ(f["dataset"], "tasks") << f.dump();
    broken.insert(f["task_id"].get<std::string>());
  }
  EXPECT_EQ(broken, (std::set<std::string>{tasks[1]["id"], tasks[2]["id"], tasks[3]["id"]}));
}

TEST(TaskCheckTest, AMalformedFileIsRefusedBeforeAnySandbox) {
  TempDir dir;
  const std::string path = dir.Write("tasks.jsonl", "{\"id\": \"x\"}\n");
  const auto run = testing::RunLoom("tasks check " + path);
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find(path + ":1: problem: is required"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find(path + ":1: verification: is required"), std::string::npos) << run.err;
}

}  // namespace
}  // namespace loom
