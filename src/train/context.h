#pragma once
// TrainContext: what the stages of one `loom train` run share, inside the
// train module only. Built once by the runner; each stage borrows it and
// hands the parts it drives only what they read (StepInputs to a trainer,
// EvalInputs to the evaluator, the live config to the control inbox). While
// a stage runs it alone counts `policy_version`. Run loop thread only.

#include <memory>
#include <vector>

#include "loom/chat/special_tokens.h"
#include "loom/config/run_config.h"
#include "loom/dist/group.h"
#include "loom/metrics/metrics_writer.h"
#include "loom/metrics/progress.h"
#include "loom/model/transformer.h"
#include "loom/tasks/dataset.h"
#include "loom/tokenizer/tokenizer.h"
#include "loom/train/evaluator.h"
#include "loom/train/live_config.h"
#include "loom/train/run_dir.h"
#include "loom/train/step_inputs.h"
#include "train/ledger_writer.h"

namespace loom::algo {
class TeacherPool;
}  // namespace loom::algo

namespace loom::train {

class Checkpointer;
class ControlInbox;
class HeldOutAgentTasks;

struct TrainContext {
  const config::RunConfig& config;
  const RunDir& run_dir;
  model::Transformer& model;  // the policy; trained in place
  const tokenizer::Tokenizer& tokenizer;
  const std::vector<std::unique_ptr<tasks::Dataset>>& datasets;
  metrics::MetricsWriter& metrics;
  chat::SpecialTokenIds special_tokens;  // EOS, </think>: resolved once from the tokenizer
  Checkpointer& checkpointer;            // checkpoints and resume (checkpointer.h)
  LiveConfig& live;                      // the sections that may change mid-run (live_config.h)
  metrics::RunEta& run_eta;              // the progress line's whole-run part
  int64_t policy_version = 0;  // optimizer steps of the whole run; the running stage counts them
  // What only some runs have:
  algo::TeacherPool* teachers = nullptr;  // the opd stage's teachers (opd_stage.h); null without
  ControlInbox* control = nullptr;  // live-change requests (control.h); null in multi-rank runs
  dist::Group* group = nullptr;     // the ranks of a multi-rank run (borrowed); null for one rank
  HeldOutAgentTasks* agent_tasks = nullptr;  // held-out agent tasks; null when none
  LedgerWriter* ledger = nullptr;            // the task ledger (tasks.ledger); null when off

  StepInputs step_inputs() const { return {config, model, tokenizer, special_tokens, group}; }
  EvalInputs eval_inputs() const { return {config, tokenizer, datasets, special_tokens}; }
  int rank() const { return group != nullptr ? group->rank() : 0; }
  int world_size() const { return group != nullptr ? group->size() : 1; }
  // Evaluates the policy and logs it as `stage`'s step `step` (LogEvaluation),
  // its samples going to the task ledger.
  absl::Status LogEvaluation(const char* stage, int64_t step) const {
    std::vector<tasks::LedgerAttempt> attempts;
    if (absl::Status s =
            train::LogEvaluation(eval_inputs(), model, group, {stage, step, policy_version},
                                 metrics, agent_tasks, ledger != nullptr ? &attempts : nullptr);
        !s.ok()) {
      return s;
    }
    return ledger != nullptr
               ? ledger->Evaluated(std::move(attempts), policy_version, live.version())
               : absl::OkStatus();
  }
  // The gradient all-reduce's bucket size (dist.bucket_mb).
  int64_t bucket_bytes() const { return config.dist.bucket_mb << 20; }
};

}  // namespace loom::train
