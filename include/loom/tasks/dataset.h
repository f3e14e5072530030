#pragma once
// Dataset: random access to the problems of one entry of `tasks.datasets`,
// split into training and held-out evaluation problems that never share a
// prompt. Everything is a pure function of (config, run seed, index), so a
// data cursor is just an index and a resumed run sees the same problems.
//
//  * Generated datasets are infinite: Train(i) draws a difficulty and a
//    problem from a seed derived from (run seed, dataset name, i), skipping
//    problems whose prompt hashes into the held-out share (eval_fraction).
//    The eval set is the first eval_size problems that do hash there.
//  * Agentic datasets (`environment: sandbox`) are infinite too: Train(i)
//    names a built-in task by a seed derived the same way (task_seed); the
//    episode itself runs on a sandbox worker. They hold nothing out.
//  * Agent task files (`kind: agent_jsonl`, loom/tasks/agent_jsonl.h) are
//    split and walked like JSONL files; each problem carries its task.
//  * JSONL datasets are finite: Train(i) walks the training lines in a fresh
//    seeded shuffle every epoch. The eval set is `eval_path` if given, else
//    the lines whose prompt hashes into the held-out share.
//
// Immutable after Load (but for a cache of the current epoch's order); thread-safe.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/config/tasks_section.h"
#include "loom/tasks/problem.h"

namespace loom::tasks {

class Dataset {
 public:
  virtual ~Dataset() = default;

  const std::string& name() const { return name_; }

  // The i-th training problem (any i >= 0).
  virtual Problem Train(uint64_t index) const = 0;

  // Distinct training problems: a file's training lines; 0 for the
  // unbounded generators.
  virtual uint64_t TrainSize() const { return 0; }

  // The held-out problems, in a fixed order.
  const std::vector<Problem>& Eval() const { return eval_; }

 protected:
  explicit Dataset(std::string name) : name_(std::move(name)) {}
  std::string name_;
  std::vector<Problem> eval_;
};

// Builds the dataset `spec` describes. Errors (INVALID_ARGUMENT / NOT_FOUND)
// name the dataset and, for files, the file and line.
absl::StatusOr<std::unique_ptr<Dataset>> LoadDataset(const config::DatasetSection& spec,
                                                     uint64_t run_seed);

// Every dataset of the mix, in config order; the first error stops.
absl::StatusOr<std::vector<std::unique_ptr<Dataset>>> LoadDatasets(
    const config::TasksSection& tasks, uint64_t run_seed);

// True when the hash of `problem`'s prompt (its messages, and its own effort
// when it has one) falls in the held-out share `fraction` (0..1).
bool IsHeldOut(const Problem& problem, double fraction);

}  // namespace loom::tasks
