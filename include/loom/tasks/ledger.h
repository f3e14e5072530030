#pragma once
// TaskLedger: every attempt at a task, across runs, in one SQLite file that
// concurrent runs share (a WAL journal; a writer waits out another's
// transaction up to a busy timeout). A task is keyed by the content hash of
// its problem, environment and verification (TaskKey), not by its file or
// line, so the same task in two files or two runs has one history.
//
// Schema 1 (`PRAGMA user_version` = 1), one table:
//   attempts(task_key, task_id, dataset, split, effort, harness, reward,
//            passed, failure_kind, failure, length, steps, policy_version,
//            run_id, config_version, unix_time)
// A ledger of a newer schema is refused, never rewritten.

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/tasks/problem.h"

struct sqlite3;

namespace loom::tasks {

// One attempt: a trained or evaluated sample of one task.
struct LedgerAttempt {
  std::string task_key;         // TaskKey
  std::string task_id;          // the task's own id, or the problem's ("arith/train/5")
  std::string dataset;          // the dataset's name in the run
  std::string split = "train";  // "train" or "eval"
  int effort = 0;               // 1..100
  std::string harness;          // agent tasks: "builtin" or the harness; "" for single-turn
  double reward = 0;            // the task reward (the verifier's), not the length-shaped one
  bool passed = false;          // reward > 0.5
  // Why it failed, when it did: "" (it did not), "agent" (the agent ended
  // without solving it), "format" (malformed tool calls or answer),
  // "limit" (a step, time or length limit), "infrastructure".
  std::string failure_kind;
  std::string failure;  // the detail ("time_limit", a worker's reason)
  int64_t length = 0;   // generated tokens
  int steps = -1;       // agent tasks: the tool calls the agent made; -1 for single-turn
  int64_t policy_version = 0;
  std::string run_id;  // the run's name and start time
  int64_t config_version = 0;
  double unix_time = 0;  // 0: Append stamps the time it writes the attempt
  // Single-turn: the response's final answer (what the verifier judged), so
  // that `loom tasks reverify` can judge it again; "" for agent tasks, whose
  // verdict comes from their workspace.
  std::string response;
};

class TaskLedger {
 public:
  // 2 added `response`; a schema-1 ledger is migrated when opened.
  static constexpr int kSchema = 2;

  // Opens the ledger at `path`, creating it (and its schema) when missing.
  // Errors name the path: UNAVAILABLE when another process holds it locked
  // past `busy_timeout_ms`, DATA_LOSS when the file is not a ledger (corrupt,
  // or not SQLite), FAILED_PRECONDITION when a newer loom wrote it.
  static absl::StatusOr<std::unique_ptr<TaskLedger>> Open(const std::string& path,
                                                          int busy_timeout_ms = 5000);
  ~TaskLedger();
  TaskLedger(const TaskLedger&) = delete;
  TaskLedger& operator=(const TaskLedger&) = delete;

  // Appends `attempts` in one transaction: all or none, an attempt without a
  // unix_time stamped with the current one. Errors as Open's.
  absl::Status Append(const std::vector<LedgerAttempt>& attempts);
  // Every attempt, oldest first; only `dataset`'s when it is not empty.
  absl::StatusOr<std::vector<LedgerAttempt>> Read(const std::string& dataset = "") const;

  const std::string& path() const { return path_; }

 private:
  TaskLedger(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}

  sqlite3* db_;
  std::string path_;
};

// The attempts of the ledger at `ledger_or_run_dir` (a file, or a run
// directory with ledger.sqlite), only `dataset`'s when it is not empty;
// never creates one (INVALID_ARGUMENT naming the path), else Open's errors.
absl::StatusOr<std::vector<LedgerAttempt>> ReadLedgerAt(const std::string& ledger_or_run_dir,
                                                        const std::string& dataset = "");

// What `loom tasks stats` prints, from a ledger's attempts (infrastructure
// failures counted apart, left out of the pass rates):
//   {"datasets": [{"dataset", "tasks", "attempts", "pass_rate",
//                  "pass_rate_stderr" (the spread of the per-task pass rates
//                  over √tasks), "infrastructure",
//                  "by_split": {"train": {"attempts", "pass_rate",
//                                         "infrastructure"}, "eval": ...},
//                  "by_effort": {"100": {...}, ...}, "by_harness": {...},
//                  "by_run": [{"run_id", "attempts", "pass_rate",
//                              "infrastructure", "first_version",
//                              "last_version"}, ...]}],
//    "tasks": [{"task_key", "task_id", "dataset", "attempts", "passes",
//               "pass_rate", "pass_rate_stderr" (binomial: √(p(1-p)/n)),
//               "infrastructure"}]}
// Datasets by name, runs in the order they first appear, tasks by dataset
// then id.
nlohmann::json LedgerStats(const std::vector<LedgerAttempt>& attempts);

// What `loom tasks audit` flags in a ledger, per task (its attempts of
// every run; a task's splits "reference" and "unsolved" are what `loom tasks
// check --ledger` recorded):
//  - always_solved / never_solved: every one, or none, of at least
//    `min_attempts` counted attempts (infrastructure failures left out)
//    passed;
//  - broken: its reference solution failed its own verification, or doing
//    nothing passed it;
//  - reward_jump: its pass rate moved by at least `jump` between the earlier
//    and the later half of its attempts (by policy version), each half of at
//    least min_attempts / 2: learning, or possible reward hacking;
//  - won_without_work: an agent attempt passed without a single tool call;
//  - infrastructure: at least `infrastructure_rate` of its attempts failed
//    for the infrastructure.
struct AuditOptions {
  int min_attempts = 4;
  double jump = 0.5;
  double infrastructure_rate = 0.2;
};
// {"tasks": audited, "counts": {flag: tasks}, "flags": [{"flag", "task_id",
//  "task_key", "dataset", "attempts", "passes", "detail"}, ...]}, by
// dataset and task id, a task's flags in the order above.
nlohmann::json LedgerAudit(const std::vector<LedgerAttempt>& attempts,
                           const AuditOptions& options = {});

// The content hash of a task (hex SHA-256): an agent task's problem,
// environment and verification (its id left out); a single-turn problem's
// messages, answer and verifier.
std::string TaskKey(const Problem& problem);
std::string TaskKey(const AgentTask& task);

// An attempt's failure kind: "" when it passed, else, first that holds:
// "infrastructure", "limit" (it hit a step, time or length limit), "format"
// (malformed), "agent".
std::string FailureKind(bool passed, bool infrastructure, bool limit, bool parsed);
// Whether an agent episode's failure cause (its reason's leading word) is
// a limit: step_limit, time_limit or sandbox_limit.
bool IsLimitCause(const std::string& cause);

}  // namespace loom::tasks
