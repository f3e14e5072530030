#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "loom/base/stats.h"
#include "loom/tasks/ledger.h"

namespace loom::tasks {
namespace {

// Passes over attempts, infrastructure failures apart.
struct Tally {
  int64_t attempts = 0, passes = 0, infrastructure = 0;
  void Add(const LedgerAttempt& a) {
    if (a.failure_kind == "infrastructure") {
      ++infrastructure;
      return;
    }
    ++attempts;
    passes += a.passed ? 1 : 0;
  }
  double rate() const { return attempts > 0 ? static_cast<double>(passes) / attempts : 0.0; }
  nlohmann::json Json() const {
    return {{"attempts", attempts}, {"pass_rate", rate()}, {"infrastructure", infrastructure}};
  }
};

struct RunTally {
  Tally tally;
  int64_t first_version = 0, last_version = 0;
};

struct DatasetTally {
  Tally tally;
  std::map<std::string, Tally> by_split, by_effort, by_harness;
  std::vector<std::pair<std::string, RunTally>> by_run;  // in order of first appearance
};

}  // namespace

nlohmann::json LedgerStats(const std::vector<LedgerAttempt>& attempts) {
  std::map<std::string, DatasetTally> datasets;
  // (dataset, task id, key) -> its tally
  std::map<std::tuple<std::string, std::string, std::string>, Tally> tasks;
  for (const LedgerAttempt& a : attempts) {
    DatasetTally& d = datasets[a.dataset];
    d.tally.Add(a);
    d.by_split[a.split].Add(a);
    d.by_effort[std::to_string(a.effort)].Add(a);
    d.by_harness[a.harness.empty() ? "single-turn" : a.harness].Add(a);
    auto run = std::find_if(d.by_run.begin(), d.by_run.end(),
                            [&](const auto& r) { return r.first == a.run_id; });
    if (run == d.by_run.end()) {
      run = d.by_run.insert(d.by_run.end(), {a.run_id, RunTally()});
      run->second.first_version = a.policy_version;
    }
    run->second.tally.Add(a);
    run->second.first_version = std::min(run->second.first_version, a.policy_version);
    run->second.last_version = std::max(run->second.last_version, a.policy_version);
    tasks[{a.dataset, a.task_id, a.task_key}].Add(a);
  }
  nlohmann::json out = {{"datasets", nlohmann::json::array()}, {"tasks", nlohmann::json::array()}};
  for (const auto& [name, d] : datasets) {
    std::vector<double> rates;
    int64_t count = 0;
    for (const auto& [key, t] : tasks) {
      if (std::get<0>(key) != name) continue;
      ++count;
      if (t.attempts > 0) rates.push_back(t.rate());
    }
    nlohmann::json row = {{"dataset", name},
                          {"tasks", count},
                          {"attempts", d.tally.attempts},
                          {"pass_rate", d.tally.rate()},
                          {"pass_rate_stderr", MeanAndStderr(rates).second},
                          {"infrastructure", d.tally.infrastructure}};
    for (const auto& [split, t] : d.by_split) row["by_split"][split] = t.Json();
    for (const auto& [effort, t] : d.by_effort) row["by_effort"][effort] = t.Json();
    for (const auto& [harness, t] : d.by_harness) row["by_harness"][harness] = t.Json();
    row["by_run"] = nlohmann::json::array();
    for (const auto& [run_id, r] : d.by_run) {
      nlohmann::json run = r.tally.Json();
      run["run_id"] = run_id;
      run["first_version"] = r.first_version;
      run["last_version"] = r.last_version;
      row["by_run"].push_back(std::move(run));
    }
    out["datasets"].push_back(std::move(row));
  }
  for (const auto& [key, t] : tasks) {
    const double p = t.rate();
    out["tasks"].push_back(
        {{"task_key", std::get<2>(key)},
         {"task_id", std::get<1>(key)},
         {"dataset", std::get<0>(key)},
         {"attempts", t.attempts},
         {"passes", t.passes},
         {"pass_rate", p},
         {"pass_rate_stderr", t.attempts > 0 ? std::sqrt(p * (1 - p) / t.attempts) : 0.0},
         {"infrastructure", t.infrastructure}});
  }
  return out;
}

}  // namespace loom::tasks
