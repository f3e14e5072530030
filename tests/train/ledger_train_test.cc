// The task ledger of real `loom train` runs (configs/test/e2e.yaml's GRPO
// stage on a tiny model): every trained and every evaluated sample is one
// attempt, two runs share one ledger, and a ledger that cannot be opened never stops a run
// that was told to go on (nor loses its training data), while one told to
// stop does, naming the file.

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "loom/metrics/metrics_writer.h"
#include "loom/tasks/ledger.h"
#include "testing/json_lines.h"
#include "testing/temp_dir.h"

namespace loom {
namespace {

using Json = nlohmann::json;
using testing::RunLoom;
using testing::TempDir;

testing::CommandResult Train(const TempDir& dir, const std::string& run,
                             const std::string& extra = "") {
  return RunLoom("train --config configs/test/e2e.yaml --run-dir " + (dir / run) +
                 " --set model.path=" + (dir / "model") +
                 " --set train.stages=[grpo] --set train.grpo.steps=2 --set tasks.eval_every=0 " +
                 extra);
}

// Trained samples per dataset, from the run's samples.jsonl.
std::map<std::string, int> TrainedByDataset(const std::string& run_dir) {
  std::map<std::string, int> count;
  for (const Json& line : testing::ReadJsonLines(run_dir + "/samples.jsonl")) {
    ++count[line["dataset"].get<std::string>()];
  }
  return count;
}

Json Stats(const std::string& ledger) {
  auto stats = RunLoom("tasks stats --json " + ledger);
  EXPECT_EQ(stats.exit_code, 0) << stats.out << stats.err;
  const size_t last = stats.out.rfind("\n{");
  return last == std::string::npos ? Json() : Json::parse(stats.out.substr(last + 1));
}

TEST(LedgerTrainTest, EveryTrainedSampleIsAnAttemptAndRunsShareALedger) {
  TempDir dir;
  ASSERT_EQ(Train(dir, "first").exit_code, 0);
  const std::map<std::string, int> first = TrainedByDataset(dir / "first");
  ASSERT_EQ(first.size(), 2u);              // arithmetic and sort
  const Json stats = Stats(dir / "first");  // the run directory's default ledger
  ASSERT_EQ(stats["datasets"].size(), 2u) << stats.dump();
  for (const Json& d : stats["datasets"]) {
    // Every trained sample, then the held-out problems evaluated at the
    // stage's end: 8 per dataset at each of the two efforts (configs/test/e2e.yaml).
    EXPECT_EQ(d["by_split"]["train"]["attempts"], first.at(d["dataset"])) << d.dump();
    EXPECT_EQ(d["by_split"]["eval"]["attempts"], 16) << d.dump();
    ASSERT_EQ(d["by_run"].size(), 1u);
    EXPECT_NE(d["by_run"][0]["run_id"].get<std::string>().find("first"), std::string::npos);
    EXPECT_EQ(d["by_effort"].size(), 2u) << "configs/test/e2e.yaml: levels 50 and 100";
  }
  for (const Json& task : stats["tasks"])
    EXPECT_EQ(task["task_key"].get<std::string>().size(), 64u);

  // A second run appends to the first one's ledger.
  ASSERT_EQ(Train(dir, "second", "--set tasks.ledger=" + (dir / "first/ledger.sqlite")).exit_code,
            0);
  const Json both = Stats(dir / "first/ledger.sqlite");
  for (const Json& d : both["datasets"]) {
    ASSERT_EQ(d["by_run"].size(), 2u) << d.dump();
    EXPECT_NE(d["by_run"][1]["run_id"].get<std::string>().find("second"), std::string::npos);
    EXPECT_EQ(d["by_split"]["train"]["attempts"].get<int>(),
              first.at(d["dataset"]) + TrainedByDataset(dir / "second").at(d["dataset"]));
  }
  // Without --dataset every dataset; with it one.
  auto only = RunLoom("tasks stats --dataset sort " + (dir / "first"));
  EXPECT_EQ(only.exit_code, 0);
  EXPECT_EQ(only.out.find("arithmetic"), std::string::npos) << only.out;
  EXPECT_NE(only.out.find("sort"), std::string::npos) << only.out;
}

TEST(LedgerTrainTest, ACorruptLedgerGoesOnWithoutItOrStopsByConfig) {
  TempDir dir;
  const std::string corrupt = dir.Write("corrupt.sqlite", std::string(8192, 'x'));
  auto went_on = Train(dir, "on", "--set tasks.ledger=" + corrupt);
  ASSERT_EQ(went_on.exit_code, 0) << went_on.err;
  EXPECT_NE(went_on.err.find("goes on without the ledger"), std::string::npos) << went_on.err;
  EXPECT_EQ(testing::ReadAll(corrupt), std::string(8192, 'x'));
  auto metrics = metrics::ReadMetrics(dir / "on/metrics.jsonl");
  ASSERT_TRUE(metrics.ok());
  int steps = 0;
  for (const Json& r : *metrics) {
    if (!r.contains("loss")) continue;
    ++steps;
    EXPECT_EQ(r["ledger_errors"], 1) << r.dump();
  }
  EXPECT_EQ(steps, 2);
  EXPECT_FALSE(TrainedByDataset(dir / "on").empty());  // training data kept

  auto stopped =
      Train(dir, "stop", "--set tasks.ledger=" + corrupt + " --set tasks.ledger_errors=stop");
  EXPECT_NE(stopped.exit_code, 0);
  EXPECT_NE(stopped.err.find(corrupt), std::string::npos) << stopped.err;
  EXPECT_NE(stopped.err.find("tasks.ledger_errors: stop"), std::string::npos) << stopped.err;

  auto missing = RunLoom("tasks stats " + (dir / "nowhere.sqlite"));
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("no task ledger at"), std::string::npos) << missing.err;
  auto garbage = RunLoom("tasks stats " + corrupt);
  EXPECT_EQ(garbage.exit_code, 2);
  EXPECT_NE(garbage.err.find("not a loom task ledger"), std::string::npos) << garbage.err;
}

// `loom tasks dedup` on single-turn JSONL files: the generator's planted
// near-duplicates (a prompt again with a trailing period) are every pair it
// finds, named by the lines' ids; a malformed line is an error naming it.
TEST(LedgerTrainTest, DedupFindsThePlantedDuplicatesOfASingleTurnFile) {
  TempDir dir;
  auto made = testing::RunCommand("python3 " LOOM_SOURCE_DIR "/scripts/gen_filter_tasks.py --out " +
                                  (dir / "tasks") + " --duplicates 6");
  ASSERT_EQ(made.exit_code, 0) << made.err;
  auto found = RunLoom("tasks dedup --json " + (dir / "tasks/filter-train.jsonl"));
  ASSERT_EQ(found.exit_code, 0) << found.err;
  const Json out = Json::parse(found.out.substr(found.out.rfind("\n{") + 1));
  EXPECT_EQ(out["tasks"], 206);
  ASSERT_EQ(out["pairs"].size(), 6u) << out.dump();
  for (const Json& pair : out["pairs"]) {
    const std::string a = pair["a"], b = pair["b"];
    const std::string dup = a.rfind("dup-", 0) == 0 ? a : b, original = dup == a ? b : a;
    EXPECT_EQ(dup.substr(0, 4), "dup-") << pair.dump();
    EXPECT_EQ(original.substr(0, 7), "medium-") << pair.dump();
    EXPECT_DOUBLE_EQ(pair["jaccard"].get<double>(), 1.0);
  }
  const std::string bad = dir.Write("bad.jsonl", "{\"messages\": [], \"answer\": \"1\"}\n");
  auto refused = RunLoom("tasks dedup " + bad);
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find(bad + ":1: \"messages\" must be a non-empty array"), std::string::npos)
      << refused.err;
}

// `loom tasks reverify` on a ledger built by hand: after an answer key
// changes, exactly the attempts whose stored response now judges otherwise
// flip; what cannot be judged again is counted by reason; an unchanged file
// flips nothing.
TEST(LedgerTrainTest, ReverifyFlipsExactlyTheAttemptsAChangedVerifierJudgesOtherwise) {
  TempDir dir;
  auto line = [](const std::string& id, const std::string& answer, const std::string& verifier) {
    return Json({{"id", id},
                 {"messages", {{{"role", "user"}, {"content", "question " + id}}}},
                 {"answer", answer},
                 {"verifier", verifier}})
               .dump() +
           "\n";
  };
  const std::string before =
      dir.Write("before.jsonl",
                line("a", "5", "numeric") + line("b", "7", "numeric") + line("c", "x", "exact"));
  const std::string after =
      dir.Write("after.jsonl",
                line("a", "6", "numeric") + line("b", "7", "numeric") + line("c", "x|y", "regex"));
  auto config = [&](const std::string& name, const std::string& file) {
    return dir.Write(name, "base: " LOOM_SOURCE_DIR
                           "/configs/quickstart.yaml\n"
                           "tasks:\n  datasets:\n    - {name: qa, kind: jsonl, path: " +
                               file + ", eval_fraction: 0}\n");
  };
  const std::string ledger_path = dir / "ledger.sqlite";
  {
    auto ledger = tasks::TaskLedger::Open(ledger_path);
    ASSERT_TRUE(ledger.ok()) << ledger.status();
    auto attempt = [](const std::string& id, const std::string& response, bool passed,
                      const std::string& failure_kind = "") {
      tasks::LedgerAttempt a;
      a.task_key = "k-" + id;
      a.task_id = id;
      a.dataset = "qa";
      a.effort = 100;
      a.reward = passed ? 1 : 0;
      a.passed = passed;
      a.failure_kind = passed ? "" : (failure_kind.empty() ? "agent" : failure_kind);
      a.response = response;
      return a;
    };
    tasks::LedgerAttempt agent = attempt("a", "", true);
    agent.harness = "builtin";
    agent.steps = 3;
    ASSERT_TRUE(
        (*ledger)
            ->Append({attempt("a", "5", true), attempt("a", "6", false), attempt("a", "5", true),
                      attempt("b", "7", true), attempt("c", "y", false),
                      attempt("c", "", false, "format"), attempt("gone", "1", true), agent})
            .ok());
  }
  auto reverify = [&](const std::string& config_file) {
    auto run = RunLoom("tasks reverify --json --config " + config_file + " " + ledger_path);
    EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
    return Json::parse(run.out.substr(run.out.rfind("\n{") + 1));
  };
  const Json same = reverify(config("before.yaml", before));
  EXPECT_EQ(same["rejudged"], 5) << same.dump();
  EXPECT_EQ(same["flipped_to_pass"], 0);
  EXPECT_EQ(same["flipped_to_fail"], 0);

  const Json changed = reverify(config("after.yaml", after));
  EXPECT_EQ(changed["attempts"], 8);
  EXPECT_EQ(changed["rejudged"], 5) << changed.dump();
  EXPECT_EQ(changed["flipped_to_pass"], 2);  // a's "6"; c's "y" under x|y
  EXPECT_EQ(changed["flipped_to_fail"], 2);  // a's two "5"
  EXPECT_EQ(changed["skipped"], Json({{"agent task without its run's trajectories", 1},
                                      {"malformed response", 1},
                                      {"task no longer in the file", 1}}));
  ASSERT_EQ(changed["tasks"].size(), 2u);
  EXPECT_EQ(
      changed["tasks"][0],
      Json({{"dataset", "qa"}, {"task_id", "a"}, {"attempts", 3}, {"to_pass", 1}, {"to_fail", 2}}));
  EXPECT_EQ(changed["tasks"][1]["task_id"], "c");

  EXPECT_EQ(RunLoom("tasks reverify --config " + config("x.yaml", after) + " " + (dir / "none"))
                .exit_code,
            2);
  EXPECT_EQ(
      RunLoom("tasks reverify --config " + (dir / "missing.yaml") + " " + ledger_path).exit_code,
      2);
}

}  // namespace
}  // namespace loom
