#include "train/task_filter.h"

#include <map>

#include <spdlog/spdlog.h>

#include "loom/config/check.h"
#include "loom/tasks/agent_jsonl.h"

namespace loom::train {
namespace {}  // namespace

bool TaskFilter::on() const {
  for (const config::DatasetSection& d : context_.live.config().tasks.datasets) {
    if (d.filter.after_attempts > 0) return true;
  }
  return false;
}

void TaskFilter::Configure(dispatch::DispatchOptions& options) const {
  const std::vector<std::unique_ptr<tasks::Dataset>>& datasets = context_.datasets;
  options.problem_key = [&datasets](int dataset, uint64_t index) {
    return tasks::TaskKey(datasets[dataset]->Train(index));
  };
  for (size_t d = 0; d < datasets.size(); ++d) {
    options.datasets[d].problems = datasets[d]->TrainSize();
  }
}

absl::Status TaskFilter::Seed(dispatch::Dispatcher& dispatcher) const {
  const std::vector<config::DatasetSection>& specs = context_.config.tasks.datasets;
  bool seeded = false;
  for (const config::DatasetSection& d : specs) seeded = seeded || d.filter.from_ledger;
  if (!seeded) return absl::OkStatus();
  LOOM_CHECK(context_.ledger != nullptr, "filter.from_ledger without a ledger passed validation");
  auto history = context_.ledger->History();
  if (!history.ok()) {
    spdlog::warn("difficulty filters start without the task ledger's history: {}",
                 std::string(history.status().message()));
    return absl::OkStatus();
  }
  struct Tally {
    std::string name;
    int64_t attempts = 0, passes = 0;
  };
  std::map<std::string, Tally> by_key;
  for (const tasks::LedgerAttempt& a : *history) {
    if (a.failure_kind == "infrastructure" || (a.split != "train" && a.split != "eval")) continue;
    Tally& tally = by_key[a.task_key];
    tally.name = a.task_id;
    ++tally.attempts;
    tally.passes += a.passed ? 1 : 0;
  }
  for (size_t d = 0; d < specs.size(); ++d) {
    if (!specs[d].filter.from_ledger) continue;
    const tasks::Dataset& dataset = *context_.datasets[d];
    const auto seed = [&](const std::string& key, const Tally& tally) {
      dispatcher.SeedFilter(static_cast<int>(d), key, tally.name, tally.attempts, tally.passes);
    };
    if (dataset.TrainSize() == 0) {  // a generator: any task of the ledger may come up
      for (const auto& [key, tally] : by_key) seed(key, tally);
      continue;
    }
    std::map<std::string, std::string> keys;  // the file's training tasks (one epoch: all of them)
    for (uint64_t i = 0; i < dataset.TrainSize(); ++i) {
      const tasks::Problem problem = dataset.Train(i);
      keys.emplace(tasks::TaskKey(problem), problem.TaskId());
    }
    for (const auto& [key, name] : keys) {
      const auto it = by_key.find(key);
      if (it != by_key.end()) seed(key, {name, it->second.attempts, it->second.passes});
    }
  }
  dispatcher.RetireOutsideBands();
  spdlog::info("difficulty filters: {} tasks of the ledger's history seeded",
               static_cast<int64_t>(by_key.size()));
  return absl::OkStatus();
}

dispatch::TaskVerdict TaskFilter::Verdict(int dataset, const tasks::Problem& problem,
                                          bool passed) const {
  return {dataset, tasks::TaskKey(problem), problem.TaskId(), passed};
}

absl::StatusOr<std::vector<dispatch::TaskVerdict>> TaskFilter::Verdicts(
    const Batch& batch, const std::vector<tasks::LedgerAttempt>& attempts) const {
  std::vector<dispatch::TaskVerdict> mine;
  std::vector<double> flat;  // (dataset, problem index, passed) per verdict
  for (size_t i = 0; i < batch.samples.size(); ++i) {
    const tasks::LedgerAttempt& a = attempts[i];
    if (a.failure_kind == "infrastructure") continue;
    const SampleEntry& info = batch.samples[i].info;
    mine.push_back({info.dataset, a.task_key, info.problem->TaskId(), a.passed});
    flat.insert(flat.end(), {static_cast<double>(info.dataset),
                             static_cast<double>(info.problem_index), a.passed ? 1.0 : 0.0});
  }
  dist::Group* group = context_.group;
  if (group == nullptr) return mine;
  auto longest = group->Max({static_cast<double>(flat.size())});
  if (!longest.ok()) return longest.status();
  flat.resize(static_cast<size_t>(longest->at(0)), -1.0);  // Gather takes equal lengths
  auto all = group->Gather(flat);
  if (!all.ok()) return all.status();
  std::vector<dispatch::TaskVerdict> verdicts;
  for (size_t r = 0; r < all->size(); ++r) {
    if (static_cast<int>(r) == group->rank()) {
      verdicts.insert(verdicts.end(), mine.begin(), mine.end());
      continue;
    }
    const std::vector<double>& row = (*all)[r];
    for (size_t k = 0; k + 2 < row.size() && row[k] >= 0; k += 3) {
      const int dataset = static_cast<int>(row[k]);
      const auto index = static_cast<uint64_t>(row[k + 1]);
      verdicts.push_back(
          Verdict(dataset, context_.datasets[dataset]->Train(index), row[k + 2] > 0));
    }
  }
  return verdicts;
}

absl::Status TaskFilter::Trained(const Batch& batch,
                                 const std::vector<tasks::LedgerAttempt>& attempts,
                                 dispatch::Dispatcher& dispatcher, int64_t step) {
  if (on()) {
    auto verdicts = Verdicts(batch, attempts);
    if (!verdicts.ok()) return verdicts.status();
    dispatcher.RecordVerdicts(*verdicts);
  }
  return Record(dispatcher.TakeRetirements(), step);
}

absl::Status TaskFilter::Record(std::vector<dispatch::Retirement> retired, int64_t step) {
  if (retired.empty() || context_.rank() != 0) return absl::OkStatus();
  if (!retired_) {
    auto writer = metrics::MetricsWriter::Open(context_.run_dir.retired_tasks_path());
    if (!writer.ok()) return writer.status();
    retired_.emplace(*std::move(writer));
  }
  for (const dispatch::Retirement& r : retired) {
    const nlohmann::json line = {{"step", step},
                                 {"dataset", context_.config.tasks.datasets[r.dataset].name},
                                 {"task", r.name},
                                 {"task_key", r.key},
                                 {"attempts", r.attempts},
                                 {"passes", r.passes},
                                 {"pass_rate", r.pass_rate},
                                 {"from_ledger", r.from_history}};
    if (absl::Status s = retired_->Write(line); !s.ok()) return s;
  }
  return absl::OkStatus();
}

void TaskFilter::AddStepFigures(nlohmann::json& record,
                                const dispatch::Dispatcher& dispatcher) const {
  const std::vector<config::DatasetSection>& specs = context_.config.tasks.datasets;
  bool any = on();
  for (size_t d = 0; d < specs.size(); ++d) any = any || dispatcher.retired(static_cast<int>(d));
  if (!any) return;
  for (size_t d = 0; d < specs.size(); ++d) {
    record["tasks_retired_by_dataset"][specs[d].name] = dispatcher.retired(static_cast<int>(d));
  }
}

}  // namespace loom::train
