#include "loom/metrics/report.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "loom/base/child_process.h"
#include "loom/config/files.h"
#include "loom/metrics/metrics_writer.h"
#include "loom/tasks/ledger.h"

namespace loom::metrics {
namespace {

namespace fs = std::filesystem;

// What a plot shows: keys of training-step lines or of evaluation lines; a
// trailing "/*" expands an object into one series per entry.
struct PlotSpec {
  const char* file;
  const char* title;
  const char* ylabel;
  bool eval;  // from held-out evaluation lines
  std::vector<const char*> keys;
  bool by_stage = false;  // a series per stage (the stages' losses differ in kind)
};

const std::vector<PlotSpec>& Plots() {
  static const std::vector<PlotSpec> plots = {
      {"reward",
       "Reward (task and length parts)",
       "reward",
       false,
       {"reward_mean", "reward_task_mean", "reward_length_mean"}},
      {"accuracy",
       "Held-out accuracy (greedy)",
       "accuracy",
       true,
       {"eval_accuracy", "eval_accuracy_by_dataset/*", "eval_accuracy_by_effort/*"}},
      {"agent_accuracy",
       "Held-out agent tasks, pass@1 under each dataset's harness (greedy)",
       "pass@1",
       true,
       {"eval_agent_pass@1_by_dataset/*"}},
      {"length",
       "Response and reasoning length by effort",
       "tokens",
       false,
       {"response_length_mean", "response_length_by_effort/*", "reasoning_length_by_effort/*"}},
      {"reward_by_effort", "Reward by effort", "reward", false, {"reward_by_effort/*"}},
      {"reward_by_harness",
       "Agent reward by harness",
       "reward",
       false,
       {"reward_by_harness/*", "episodes_masked"}},
      {"eval_reasoning",
       "Held-out reasoning length by effort (greedy)",
       "tokens",
       true,
       {"eval_reasoning_length_by_effort/*"}},
      {"inflight",
       "In flight and staleness",
       "samples / versions",
       false,
       {"inflight_mean", "inflight_min", "inflight_max", "staleness_mean", "staleness_max"}},
      {"throughput",
       "Throughput",
       "tokens/s",
       false,
       {"rollout_tokens_per_s", "train_tokens_per_s"}},
      {"time",
       "Time split per step",
       "seconds",
       false,
       {"time_rollout_s", "time_train_s", "time_teacher_s", "time_student_s"}},
      {"loss", "Loss (a series per stage)", "loss", false, {"loss"}, true},
      {"kl", "KL", "nats/token", false, {"kl", "kl_by_dataset/*", "kl_by_teacher/*"}},
  };
  return plots;
}

struct Run {
  std::string dir;
  std::vector<nlohmann::json> lines;
  std::string config;
  std::vector<nlohmann::json> evaluations;  // `loom eval --save`'s lines
  // Its task ledger's per-task pass rates by dataset (training and
  // evaluation attempts), when the run directory holds ledger.sqlite.
  std::map<std::string, std::vector<double>> task_pass_rates;
  std::string ledger_error;  // why the ledger could not be read ("" = it was, or none)
};

struct Series {
  std::string label;
  std::vector<std::pair<double, double>> points;
};

// A training eval line's held-out agent rows (train::AgentCellsJson).
constexpr char kAgentRows[] = "eval_agent_results";

bool IsEvalLine(const nlohmann::json& line) {
  return !line.contains("event") && line.contains("eval_accuracy");
}
bool IsStepLine(const nlohmann::json& line) {
  return !line.contains("event") && !line.contains("eval_accuracy") && line.contains("step");
}

// The series `key` names in `run` (several for "name/*"); with
// `plot.by_stage`, one per stage, labelled with it, when the run logged the
// key in more than one stage.
std::vector<Series> Extract(const Run& run, const PlotSpec& plot, const std::string& key,
                            bool label_run) {
  const bool expand = key.size() > 2 && key.substr(key.size() - 2) == "/*";
  const std::string name = expand ? key.substr(0, key.size() - 2) : key;
  std::map<std::pair<std::string, std::string>, Series> found;  // (stage, entry) -> series
  std::map<std::string, int> stages;
  for (const nlohmann::json& line : run.lines) {
    if (!(plot.eval ? IsEvalLine(line) : IsStepLine(line)) || !line.contains(name)) continue;
    const double x = line.value("version", 0.0);
    const std::string stage = plot.by_stage ? line.value("stage", "") : "";
    const nlohmann::json& value = line[name];
    if (expand && value.is_object()) {
      for (const auto& [entry, number] : value.items()) {
        if (number.is_number()) found[{stage, entry}].points.push_back({x, number.get<double>()});
      }
    } else if (!expand && value.is_number()) {
      found[{stage, ""}].points.push_back({x, value.get<double>()});
    }
  }
  for (const auto& [id, series] : found) ++stages[id.first];
  std::vector<Series> out;
  for (auto& [id, series] : found) {
    series.label = name + (id.second.empty() ? "" : "/" + id.second);
    if (stages.size() > 1) series.label += " [" + id.first + "]";
    if (label_run) series.label = run.dir + ": " + series.label;
    out.push_back(std::move(series));
  }
  return out;
}

absl::StatusOr<Run> LoadRun(const std::string& dir) {
  const std::string path = dir + "/metrics.jsonl";
  if (!fs::exists(path)) {
    return absl::NotFoundError(path + " does not exist: " + dir +
                               " is not a run directory, or its run has not logged a line yet");
  }
  auto lines = ReadMetrics(path);
  if (!lines.ok()) return lines.status();
  bool any = false;
  for (const nlohmann::json& line : *lines) any = any || IsStepLine(line) || IsEvalLine(line);
  if (!any) return absl::InvalidArgumentError(path + ": no training step or evaluation to plot");
  auto config = ReadFile(dir + "/config.yaml");
  Run run{dir, *std::move(lines), config.ok() ? *config : "(no config.yaml)", {}, {}, ""};
  const std::string evaluations = dir + "/" + kEvaluationsFile;
  if (fs::exists(evaluations)) {
    auto read = ReadMetrics(evaluations);
    if (!read.ok()) return read.status();
    run.evaluations = *std::move(read);
  }
  const std::string ledger = dir + "/ledger.sqlite";
  if (fs::exists(ledger)) {
    auto opened = tasks::TaskLedger::Open(ledger);
    auto attempts = opened.ok()
                        ? (*opened)->Read()
                        : absl::StatusOr<std::vector<tasks::LedgerAttempt>>(opened.status());
    if (!attempts.ok()) {
      run.ledger_error = std::string(attempts.status().message());
      return run;
    }
    std::vector<tasks::LedgerAttempt> runs_own;
    for (tasks::LedgerAttempt& a : *attempts) {
      if (a.split == "train" || a.split == "eval") runs_own.push_back(std::move(a));
    }
    const nlohmann::json stats = tasks::LedgerStats(runs_own);
    for (const nlohmann::json& task : stats["tasks"]) {
      if (task["attempts"].get<int64_t>() == 0) continue;
      run.task_pass_rates[task["dataset"]].push_back(task["pass_rate"].get<double>());
    }
  }
  return run;
}

// The histogram of `rates` in [0, 1]: tasks per tenth, the last tenth
// holding 1.0 too; as (bin centre, tasks).
std::vector<std::pair<double, double>> Histogram(const std::vector<double>& rates) {
  std::vector<std::pair<double, double>> bins;
  for (int b = 0; b < 10; ++b) bins.emplace_back(0.05 + 0.1 * b, 0.0);
  for (double r : rates) bins[std::clamp(static_cast<int>(r * 10), 0, 9)].second += 1;
  return bins;
}

// A gnuplot string literal.
std::string Quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

std::string Html(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

// The first executable `name` on the PATH, or "".
std::string FindOnPath(const std::string& name) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

absl::Status RunGnuplot(const std::string& gnuplot, const std::string& script,
                        const std::string& log) {
  ChildOptions child;
  child.argv = {gnuplot, script};
  child.output = log;
  absl::StatusOr<pid_t> pid = StartChild(child);
  if (!pid.ok()) return pid.status();
  absl::StatusOr<int> code = WaitChild(*pid);
  if (code.ok() && *code == 0) return absl::OkStatus();
  auto text = ReadFile(log);
  return absl::FailedPreconditionError(gnuplot + " " + script +
                                       " failed: " + (text.ok() ? *text : "(no output)"));
}

// `rows` (JSON objects) as an HTML table: a column per key, what a row is
// (dataset, scaffold, effort) and its headline figures first, then the rest
// in name order; numbers to 4 significant digits.
std::string Table(const nlohmann::json& rows) {
  std::vector<std::string> columns;
  for (const char* first : {"dataset", "scaffold", "effort", "tasks", "problems", "episodes",
                            "pass@1", "pass@1_stderr", "pass@K"}) {
    const bool named = std::any_of(rows.begin(), rows.end(), [&](const nlohmann::json& row) {
      return row.is_object() && row.contains(first);
    });
    if (named) columns.push_back(first);
  }
  for (const nlohmann::json& row : rows) {
    if (!row.is_object()) continue;
    for (const auto& [key, value] : row.items()) {
      if (std::find(columns.begin(), columns.end(), key) == columns.end()) columns.push_back(key);
    }
  }
  std::string html = "<table border=\"1\" cellpadding=\"3\">\n<tr>";
  for (const std::string& column : columns) html += "<th>" + Html(column) + "</th>";
  html += "</tr>\n";
  for (const nlohmann::json& row : rows) {
    if (!row.is_object()) continue;
    html += "<tr>";
    for (const std::string& column : columns) {
      std::string cell;
      if (const auto it = row.find(column); it != row.end()) {
        if (it->is_string()) {
          cell = it->get<std::string>();
        } else if (it->is_number_float()) {
          char text[32];
          std::snprintf(text, sizeof text, "%.4g", it->get<double>());
          cell = text;
        } else {
          cell = it->dump();
        }
      }
      html += "<td>" + Html(cell) + "</td>";
    }
    html += "</tr>\n";
  }
  return html + "</table>\n";
}

// The run's last numbers: the final evaluation and training step,
// flattened, then the final evaluation's held-out agent rows as a table.
std::string FinalNumbers(const Run& run) {
  const nlohmann::json* eval = nullptr;
  const nlohmann::json* step = nullptr;
  for (const nlohmann::json& line : run.lines) {
    if (IsEvalLine(line)) eval = &line;
    if (IsStepLine(line)) step = &line;
  }
  std::string rows;
  for (const nlohmann::json* line : {eval, step}) {
    if (line == nullptr) continue;
    nlohmann::json numbers = *line;
    numbers.erase(kAgentRows);
    const nlohmann::json flat = numbers.flatten();
    for (const auto& [key, value] : flat.items()) {
      if (!value.is_number() && !value.is_string()) continue;
      rows += "<tr><td>" + Html(key.substr(1)) + "</td><td>" +
              Html(value.is_string() ? value.get<std::string>() : value.dump()) + "</td></tr>\n";
    }
  }
  std::string html = "<table>\n" + rows + "</table>\n";
  if (eval != nullptr && eval->contains(kAgentRows)) {
    html += "<h3>Held-out agent tasks</h3>\n" + Table(eval->at(kAgentRows));
  }
  return html;
}

// The held-out evaluations `loom eval --save` left in the run directory:
// a table per evaluation, agent rows (dataset × scaffold × effort) first.
std::string Evaluations(const Run& run) {
  std::string html;
  for (const nlohmann::json& evaluation : run.evaluations) {
    html += "<h2>Held-out evaluation: " + Html(evaluation.value("model", std::string("?"))) + " (" +
            Html(run.dir) + ")</h2>\n";
    for (const char* key : {"agent_results", "results"}) {
      const auto rows = evaluation.find(key);
      if (rows != evaluation.end() && rows->is_array() && !rows->empty()) html += Table(*rows);
    }
  }
  return html;
}

}  // namespace

absl::StatusOr<Report> WriteReport(const ReportOptions& options) {
  if (options.runs.empty()) return absl::InvalidArgumentError("report: no run directory given");
  std::vector<Run> runs;
  for (const std::string& dir : options.runs) {
    auto run = LoadRun(dir);
    if (!run.ok()) return run.status();
    runs.push_back(*std::move(run));
  }
  const std::string gnuplot = FindOnPath(options.gnuplot);
  if (gnuplot.empty()) {
    return absl::FailedPreconditionError(
        "report: " + options.gnuplot +
        " is not on the PATH; install Debian's gnuplot-nox (scripts/setup.sh does)");
  }
  const std::string out = options.out_dir.empty() ? runs[0].dir + "/report" : options.out_dir;
  std::error_code ec;
  fs::create_directories(out + "/data", ec);
  if (ec) return absl::UnavailableError("cannot create " + out + "/data: " + ec.message());

  Report report;
  std::string script = "set terminal pngcairo noenhanced size " + std::to_string(options.width) +
                       "," + std::to_string(options.height) +
                       "\nset grid\nset key outside below\n" +
                       "set xlabel 'policy version (optimizer steps over all stages)'\n";
  std::string figures;
  for (const PlotSpec& plot : Plots()) {
    std::vector<Series> series;
    for (const Run& run : runs) {
      for (const char* key : plot.keys) {
        for (Series& s : Extract(run, plot, key, runs.size() > 1)) series.push_back(std::move(s));
      }
    }
    if (series.empty()) continue;
    const std::string png = out + "/" + plot.file + ".png";
    script += "set output " + Quoted(png) + "\nset title " + Quoted(plot.title) + "\nset ylabel " +
              Quoted(plot.ylabel) + "\nplot ";
    for (size_t i = 0; i < series.size(); ++i) {
      const std::string data = out + "/data/" + plot.file + "-" + std::to_string(i) + ".dat";
      std::ofstream file(data);
      for (const auto& [x, y] : series[i].points) file << x << " " << y << "\n";
      if (!file) return absl::UnavailableError("cannot write " + data);
      script += std::string(i == 0 ? "" : ", ") + Quoted(data) + " using 1:2 with " +
                (series[i].points.size() > 1 ? "lines" : "points") + " lw 2 title " +
                Quoted(series[i].label);
    }
    script += "\n";
    report.plots.push_back(png);
    figures += "<h2>" + Html(plot.title) + "</h2>\n<img src=\"" + std::string(plot.file) +
               ".png\" width=\"" + std::to_string(options.width) + "\" height=\"" +
               std::to_string(options.height) + "\">\n";
  }
  // The task ledger: how many tasks of each dataset pass how often.
  std::vector<Series> pass_rates;
  for (const Run& run : runs) {
    for (const auto& [dataset, rates] : run.task_pass_rates) {
      pass_rates.push_back({(runs.size() > 1 ? run.dir + ": " : "") + dataset, Histogram(rates)});
    }
  }
  if (!pass_rates.empty()) {
    const std::string png = out + "/task_pass_rates.png";
    script += "set output " + Quoted(png) +
              "\nset title 'Tasks by pass rate (task ledger: training and held-out attempts)'" +
              "\nset ylabel 'tasks'\nset xlabel 'pass rate'\nset xrange [0:1]\n" +
              "set style fill transparent solid 0.4\nset boxwidth 0.1\nplot ";
    for (size_t i = 0; i < pass_rates.size(); ++i) {
      const std::string data = out + "/data/task_pass_rates-" + std::to_string(i) + ".dat";
      std::ofstream file(data);
      for (const auto& [x, y] : pass_rates[i].points) file << x << " " << y << "\n";
      if (!file) return absl::UnavailableError("cannot write " + data);
      script += std::string(i == 0 ? "" : ", ") + Quoted(data) + " using 1:2 with boxes title " +
                Quoted(pass_rates[i].label);
    }
    script += "\n";
    report.plots.push_back(png);
    figures += "<h2>Tasks by pass rate</h2>\n<img src=\"task_pass_rates.png\" width=\"" +
               std::to_string(options.width) + "\" height=\"" + std::to_string(options.height) +
               "\">\n";
  }
  for (const Run& run : runs) {
    if (!run.ledger_error.empty()) {
      figures +=
          "<p>Task ledger of " + Html(run.dir) + " not read: " + Html(run.ledger_error) + "</p>\n";
    }
  }
  const std::string script_path = out + "/data/plots.gp";
  if (absl::Status s = WriteFileAtomic(script_path, script); !s.ok()) return s;
  if (absl::Status s = RunGnuplot(gnuplot, script_path, out + "/data/gnuplot.log"); !s.ok()) {
    return s;
  }

  std::string html = "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>loom report: " +
                     Html(runs[0].dir) +
                     "</title></head><body>\n<h1>loom report: " + Html(runs[0].dir) + "</h1>\n" +
                     figures;
  for (const Run& run : runs) html += Evaluations(run);
  for (const Run& run : runs) {
    html += "<h2>Final numbers: " + Html(run.dir) + "</h2>\n" + FinalNumbers(run) +
            "<h2>Config: " + Html(run.dir) + "</h2>\n<pre>" + Html(run.config) + "</pre>\n";
  }
  html += "</body></html>\n";
  report.index = out + "/index.html";
  if (absl::Status s = WriteFileAtomic(report.index, html); !s.ok()) return s;
  return report;
}

}  // namespace loom::metrics
