#pragma once
// LedgerWriter: a training run's side of the task ledger (tasks.ledger,
// loom/tasks/ledger.h). Every trained sample of a GRPO or OPD step, every
// agent sample masked as an infrastructure failure, and every held-out sample
// of a training evaluation is appended as an attempt at its task, with its
// task reward, failure kind, length, policy version and the run. A ledger
// that cannot be opened or written never costs training data: with
// `tasks.ledger_errors: continue` the run says so in its log, counts it
// (ledger_errors in the step line) and goes on without the ledger; with
// `stop` the run stops with the error.
// Run loop thread only.

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "loom/config/run_config.h"
#include "loom/tasks/ledger.h"
#include "loom/tokenizer/tokenizer.h"
#include "loom/train/async_loop.h"

namespace loom::train {

// The attempts of a training step: `batch`'s trained samples, in order, then
// the samples masked as infrastructure failures since the previous step; each
// judged once, with its dataset, harness and policy version (not the run's
// fields, which LedgerWriter adds).
std::vector<tasks::LedgerAttempt> BatchAttempts(const Batch& batch, const config::RunConfig& config,
                                                const tokenizer::Tokenizer& tokenizer);

class LedgerWriter {
 public:
  // Null with `tasks.ledger: off`. `run_dir` holds the default ledger and
  // names the run in its attempts.
  static absl::StatusOr<std::unique_ptr<LedgerWriter>> Open(const config::RunConfig& config,
                                                            const std::string& run_dir);

  // Appends a training step's attempts (BatchAttempts).
  absl::Status Trained(std::vector<tasks::LedgerAttempt> attempts);
  // Appends an evaluation's attempts (EvalOptions::attempts), made by the
  // weights of `policy_version` under live config `config_version`.
  absl::Status Evaluated(std::vector<tasks::LedgerAttempt> attempts, int64_t policy_version,
                         int64_t config_version);
  // Every attempt the ledger holds (FAILED_PRECONDITION once it failed).
  absl::StatusOr<std::vector<tasks::LedgerAttempt>> History() const;
  // ledger_errors (1 once the ledger failed and the run went on without it;
  // absent before).
  void AddStepFigures(nlohmann::json& record) const;

 private:
  LedgerWriter(const config::RunConfig& config, std::string run_id)
      : config_(config), run_id_(std::move(run_id)) {}
  // `status` of an open or append: OK, or the run's error under `stop`.
  absl::Status Failed(absl::Status status);

  const config::RunConfig& config_;
  std::string run_id_;
  std::unique_ptr<tasks::TaskLedger> ledger_;  // null once it failed
  int64_t errors_ = 0;
};

}  // namespace loom::train
