#pragma once
// TaskFilter: an async stage's side of online difficulty filtering
// (`tasks.datasets[].filter`, loom/dispatch/difficulty_filter.h). It gives
// the dispatcher each training problem's content key and each dataset's
// size, seeds the tallies from the task ledger (`filter.from_ledger`), and
// after every step hands the dispatcher the step's verdicts — gathered from
// every rank, so that every rank retires the same tasks and the ranks keep
// drawing one prompt stream — and records what retired:
// <run dir>/retired_tasks.jsonl and, in the step line,
// tasks_retired_by_dataset. Run loop thread only.

#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "loom/dispatch/dispatcher.h"
#include "loom/metrics/metrics_writer.h"
#include "loom/tasks/ledger.h"
#include "loom/train/async_loop.h"
#include "train/context.h"

namespace loom::train {

class TaskFilter {
 public:
  explicit TaskFilter(const TrainContext& context) : context_(context) {}

  // Whether some dataset's filter is on (live).
  bool on() const;
  // Problem keys and dataset sizes for the dispatcher.
  void Configure(dispatch::DispatchOptions& options) const;
  // Tallies from the ledger for the datasets with `filter.from_ledger`, and
  // the retirements they give (a resumed stage's checkpoint then replaces
  // them with its own state).
  absl::Status Seed(dispatch::Dispatcher& dispatcher) const;
  // After a step: the verdicts of `batch` (BatchAttempts: `attempts` starts
  // with its trained samples) from every rank, and what they retired.
  absl::Status Trained(const Batch& batch, const std::vector<tasks::LedgerAttempt>& attempts,
                       dispatch::Dispatcher& dispatcher, int64_t step);
  // tasks_retired_by_dataset, when some dataset filters.
  void AddStepFigures(nlohmann::json& record, const dispatch::Dispatcher& dispatcher) const;

 private:
  // This rank's verdicts, then the other ranks' (rebuilt from their problem
  // indices), in rank order.
  absl::StatusOr<std::vector<dispatch::TaskVerdict>> Verdicts(
      const Batch& batch, const std::vector<tasks::LedgerAttempt>& attempts) const;
  dispatch::TaskVerdict Verdict(int dataset, const tasks::Problem& problem, bool passed) const;
  absl::Status Record(std::vector<dispatch::Retirement> retired, int64_t step);

  const TrainContext& context_;
  std::optional<metrics::MetricsWriter> retired_;  // opened at the first retirement
};

}  // namespace loom::train
