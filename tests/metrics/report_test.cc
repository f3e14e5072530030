// `loom report`'s plots through the real gnuplot: PNGs of the asked size for
// the keys a run logged (none for keys it did not), an index.html that shows
// them with the config and final numbers, overlays with --compare, and clear
// errors for what is missing or malformed.

#include "loom/metrics/report.h"
#include "loom/tasks/ledger.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <tuple>

#include "testing/temp_dir.h"

namespace loom::metrics {
namespace {

using loom::testing::ReadAll;
using loom::testing::TempDir;

// Width and height from a PNG's IHDR chunk; {0, 0} when it is not a PNG.
std::pair<int, int> PngSize(const std::string& path) {
  const std::string bytes = ReadAll(path);
  if (bytes.size() < 24 || bytes.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) return {0, 0};
  auto be32 = [&](size_t at) {
    int value = 0;
    for (size_t i = 0; i < 4; ++i) value = value * 256 + static_cast<unsigned char>(bytes[at + i]);
    return value;
  };
  return {be32(16), be32(20)};
}

// A run directory with SFT then GRPO lines and evaluations.
std::string WriteRun(const TempDir& dir, const std::string& name, double scale) {
  const std::string run = dir / name;
  std::filesystem::create_directories(run);
  std::ofstream metrics(run + "/metrics.jsonl");
  metrics
      << R"({"stage":"sft","step":0,"version":0,"eval_accuracy":0.1,"eval_accuracy_by_dataset":{"a":0.1}})"
      << "\n";
  for (int step = 1; step <= 5; ++step) {
    metrics << R"({"stage":"sft","step":)" << step << R"(,"version":)" << step << R"(,"loss":)"
            << 2.0 / step << "}\n";
  }
  for (int step = 1; step <= 5; ++step) {
    metrics << R"({"stage":"grpo","step":)" << step << R"(,"version":)" << 5 + step
            << R"(,"loss":0.1,"reward_mean":)" << scale * step
            << R"(,"reward_by_effort":{"25":0.1,"100":0.2},"inflight_mean":12,"staleness_max":1,)"
            << R"("rollout_tokens_per_s":900,"time_rollout_s":0.5,"time_train_s":0.25})"
            << "\n";
  }
  metrics << R"({"event":"resume","stage":"grpo","inflight_restored":3})"
          << "\n";
  metrics
      << R"({"stage":"grpo","step":5,"version":10,"eval_accuracy":0.75,"eval_accuracy_by_dataset":{"a":0.75},)"
      << R"("eval_agent_pass@1_by_dataset":{"code":0.25},"eval_agent_results":[)"
      << R"({"dataset":"code","scaffold":"pi","effort":100,"tasks":4,"pass@1":0.25,"failures":1}]})"
      << "\n";
  std::ofstream(run + "/config.yaml") << "run:\n  name: " << name << " <&>\n";
  return run;
}

TEST(ReportTest, WritesAPngPerLoggedPlotAndAnIndex) {
  TempDir dir;
  const std::string run = WriteRun(dir, "one", 0.1);
  auto report = WriteReport({{run}, "", "gnuplot", 640, 360});
  ASSERT_TRUE(report.ok()) << report.status();
  std::vector<std::string> names;
  for (const std::string& png : report->plots) {
    names.push_back(std::filesystem::path(png).stem().string());
    EXPECT_EQ(PngSize(png), std::make_pair(640, 360)) << png;
    EXPECT_GT(std::filesystem::file_size(png), 1000u) << png;
  }
  // No KL, no lengths were logged: no such plots.
  EXPECT_EQ(names,
            (std::vector<std::string>{"reward", "accuracy", "agent_accuracy", "reward_by_effort",
                                      "inflight", "throughput", "time", "loss"}));
  EXPECT_EQ(report->index, run + "/report/index.html");
  const std::string html = ReadAll(report->index);
  for (const std::string& name : names) {
    EXPECT_NE(html.find("<img src=\"" + name + ".png\""), std::string::npos) << name;
  }
  EXPECT_NE(html.find("name: one &lt;&amp;&gt;"), std::string::npos) << "the config, escaped";
  EXPECT_NE(html.find("<td>eval_accuracy</td><td>0.75</td>"), std::string::npos)
      << "the final evaluation";
  // SFT and GRPO both logged `loss`: one series per stage; an evaluation
  // curve runs on across stages.
  const std::string script = ReadAll(run + "/report/data/plots.gp");
  EXPECT_NE(script.find("title 'loss [sft]'"), std::string::npos) << script;
  EXPECT_NE(script.find("title 'loss [grpo]'"), std::string::npos) << script;
  EXPECT_NE(script.find("title 'eval_accuracy'"), std::string::npos) << script;
  EXPECT_EQ(ReadAll(run + "/report/data/accuracy-0.dat"), "0 0.1\n10 0.75\n");
  EXPECT_NE(script.find("title 'eval_agent_pass@1_by_dataset/code'"), std::string::npos) << script;
  // The final evaluation's agent rows are a table, not flattened numbers.
  EXPECT_NE(html.find("<tr><th>dataset</th><th>scaffold</th><th>effort</th><th>tasks</th>"
                      "<th>pass@1</th><th>failures</th></tr>\n<tr><td>code</td><td>pi</td>"
                      "<td>100</td><td>4</td><td>0.25</td><td>1</td></tr>"),
            std::string::npos)
      << html;
  EXPECT_EQ(html.find("eval_agent_results/"), std::string::npos);
}

// `loom eval --save` lines: a table per evaluation, agent rows first, a
// column per field.
TEST(ReportTest, HeldOutEvaluationsAreTables) {
  TempDir dir;
  const std::string run = WriteRun(dir, "one", 0.1);
  std::ofstream(run + "/evaluations.jsonl")
      << R"({"model":"runs/one/stages/grpo","results":[{"dataset":"add","effort":100,"pass@1":0.5}],)"
      << R"("agent_results":[{"dataset":"code","scaffold":"builtin","effort":100,"pass@1":0.25,)"
      << R"("failures_by_cause":{}},{"dataset":"code","scaffold":"pi","effort":100,)"
      << R"("pass@1":0.123456,"failures_by_cause":{"harness_crashed":1}}]})"
      << "\n";
  auto report = WriteReport({{run}, "", "gnuplot", 640, 360});
  ASSERT_TRUE(report.ok()) << report.status();
  const std::string html = ReadAll(report->index);
  const size_t heading = html.find("<h2>Held-out evaluation: runs/one/stages/grpo");
  ASSERT_NE(heading, std::string::npos) << html;
  const size_t agent = html.find("<th>scaffold</th>", heading);
  const size_t single = html.find("<td>add</td>", heading);
  ASSERT_NE(agent, std::string::npos);
  ASSERT_NE(single, std::string::npos);
  EXPECT_LT(agent, single) << "agent rows first";
  EXPECT_NE(html.find("<td>code</td><td>pi</td><td>100</td><td>0.1235</td>"
                      "<td>{\"harness_crashed\":1}</td>"),
            std::string::npos)
      << html;
  EXPECT_NE(html.find("<td>code</td><td>builtin</td><td>100</td><td>0.25</td><td>{}</td>"),
            std::string::npos)
      << html;

  std::ofstream(run + "/evaluations.jsonl") << "{\"model\": \n";
  auto malformed = WriteReport({{run}, "", "gnuplot", 640, 360});
  ASSERT_FALSE(malformed.ok());
  EXPECT_EQ(malformed.status().message(),
            run + "/evaluations.jsonl:1: not a JSON object on one line");
}

// The run's task ledger: a histogram of its tasks' pass rates per dataset
// (training and held-out attempts; a check's are not the run's). An
// unreadable ledger is named on the page, and the rest is reported.
TEST(ReportTest, TheTaskLedgerIsAHistogramOfPassRates) {
  TempDir dir;
  const std::string run = WriteRun(dir, "one", 0.1);
  {
    auto ledger = tasks::TaskLedger::Open(run + "/ledger.sqlite");
    ASSERT_TRUE(ledger.ok()) << ledger.status();
    std::vector<tasks::LedgerAttempt> attempts;
    // (task, split, passed): a 2 of 2, b 0 of 2, c 1 of 2, d 1 of 3; e only checked.
    for (const auto& [task, split, passed] :
         std::vector<std::tuple<std::string, std::string, bool>>{{"a", "train", true},
                                                                 {"a", "eval", true},
                                                                 {"b", "train", false},
                                                                 {"b", "train", false},
                                                                 {"c", "train", true},
                                                                 {"c", "eval", false},
                                                                 {"d", "train", true},
                                                                 {"d", "train", false},
                                                                 {"d", "train", false},
                                                                 {"e", "reference", true}}) {
      tasks::LedgerAttempt& a = attempts.emplace_back();
      a.task_key = task;
      a.task_id = task;
      a.dataset = "code";
      a.split = split;
      a.passed = passed;
      a.reward = passed ? 1 : 0;
    }
    ASSERT_TRUE((*ledger)->Append(attempts).ok());
  }
  auto report = WriteReport({{run}, "", "gnuplot", 640, 360});
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(std::filesystem::path(report->plots.back()).filename(), "task_pass_rates.png");
  EXPECT_EQ(PngSize(report->plots.back()), std::make_pair(640, 360));
  // Tenths: 0 (b), 0.333 (d), 0.5 (c), 1.0 (a, in the last tenth).
  EXPECT_EQ(ReadAll(run + "/report/data/task_pass_rates-0.dat"),
            "0.05 1\n0.15 0\n0.25 0\n0.35 1\n0.45 0\n0.55 1\n0.65 0\n0.75 0\n0.85 0\n"
            "0.95 1\n");
  EXPECT_NE(ReadAll(report->index).find("<img src=\"task_pass_rates.png\""), std::string::npos);

  std::ofstream(run + "/ledger.sqlite", std::ios::trunc) << std::string(8192, 'x');
  std::filesystem::remove(run + "/ledger.sqlite-wal");
  std::filesystem::remove(run + "/ledger.sqlite-shm");
  auto unread = WriteReport({{run}, "", "gnuplot", 640, 360});
  ASSERT_TRUE(unread.ok()) << unread.status();
  const std::string html = ReadAll(unread->index);
  EXPECT_NE(html.find("Task ledger of " + run + " not read: task ledger " + run + "/ledger.sqlite"),
            std::string::npos)
      << html;
}

TEST(ReportTest, CompareOverlaysRunsLabelledByDirectory) {
  TempDir dir;
  const std::string one = WriteRun(dir, "one", 0.1), two = WriteRun(dir, "two", 0.2);
  auto report = WriteReport({{one, two}, dir / "out", "gnuplot", 900, 500});
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(PngSize(dir / "out/reward.png"), std::make_pair(900, 500));
  const std::string script = ReadAll(dir / "out/data/plots.gp");
  EXPECT_NE(script.find("title '" + one + ": reward_mean'"), std::string::npos) << script;
  EXPECT_NE(script.find("title '" + two + ": reward_mean'"), std::string::npos) << script;
  const std::string html = ReadAll(report->index);
  EXPECT_NE(html.find("Final numbers: " + two), std::string::npos);
}

TEST(ReportTest, MissingOrMalformedInputsAreClearErrors) {
  TempDir dir;
  auto missing = WriteReport({{dir / "nowhere"}, "", "gnuplot", 900, 500});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(dir / "nowhere/metrics.jsonl"), std::string::npos);

  const std::string bad = dir / "bad";
  std::filesystem::create_directories(bad);
  std::ofstream(bad + "/metrics.jsonl") << "{\"stage\":\"sft\",\"step\":1}\n{\"stage\": \n";
  auto malformed = WriteReport({{bad}, "", "gnuplot", 900, 500});
  ASSERT_FALSE(malformed.ok());
  EXPECT_EQ(malformed.status().message(), bad + "/metrics.jsonl:2: not a JSON object on one line");

  const std::string events = dir / "events";
  std::filesystem::create_directories(events);
  std::ofstream(events + "/metrics.jsonl") << "{\"event\":\"resume\"}\n";
  auto nothing = WriteReport({{events}, "", "gnuplot", 900, 500});
  ASSERT_FALSE(nothing.ok());
  EXPECT_NE(nothing.status().message().find("no training step or evaluation to plot"),
            std::string::npos);

  const std::string run = WriteRun(dir, "run", 1);
  auto no_gnuplot = WriteReport({{run}, "", "gnuplot-that-is-not-installed", 900, 500});
  ASSERT_FALSE(no_gnuplot.ok());
  EXPECT_EQ(no_gnuplot.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(no_gnuplot.status().message().find("gnuplot-nox"), std::string::npos);
  auto failing = WriteReport({{run}, "", "/bin/false", 900, 500});
  ASSERT_FALSE(failing.ok());
  EXPECT_NE(failing.status().message().find("/bin/false"), std::string::npos);
}

}  // namespace
}  // namespace loom::metrics
