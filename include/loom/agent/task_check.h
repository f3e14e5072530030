#pragma once
// Checking an agent task file against real sandboxes (`loom tasks check`):
// whether each task is broken before any model sees it. Two episodes per
// task on the workers, each verified exactly as a training episode is:
//  - unsolved: the agent answers at once without touching anything; the
//    verification must fail (a fail-to-pass test that already passes, or an
//    answer check that an empty answer wins, rewards doing nothing);
//  - reference: the reference solution's demonstration (write_file calls,
//    then an answer) is replayed as the agent's turns; the verification must
//    pass (otherwise the task is unsolvable as written, or its reference is
//    wrong).
// A setup command that fails breaks the task too. An episode the
// infrastructure failed (no worker, sandbox error) is neither: the task is
// reported as not checked.
//
// Thread-safe: CheckAgentTask may run on several threads over one pool.

#include <string>

#include "loom/rpc/worker_pool.h"
#include "loom/tasks/agent_jsonl.h"
#include "loom/v1/sandbox.pb.h"

namespace loom::agent {

struct TaskCheck {
  std::string id;
  std::string source;        // "FILE:LINE"
  v1::Trajectory unsolved;   // the episode that did nothing
  v1::Trajectory reference;  // the reference's episode; empty without a reference
  bool has_reference = false;

  // False when the infrastructure failed an episode: nothing is known of the task.
  bool checked() const;
  // What is wrong with the task, in words ("" = nothing found).
  std::string Problem() const;
};

// Runs both episodes of `task` on `pool` with the scaffold's `options`.
TaskCheck CheckAgentTask(rpc::WorkerPool& pool, const tasks::AgentTask& task,
                         const v1::ScaffoldOptions& options);

// `loom tasks reverify`: an episode of `task` (as its file has it now) in
// which the agent's turns of the built-in loop's `trajectory` are replayed,
// verified as a training episode is. Its workspace is the one the policy's
// tool calls made again, its verdict the one today's verification gives
// them.
v1::Trajectory ReplayEpisode(rpc::WorkerPool& pool, const tasks::AgentTask& task,
                             const v1::ScaffoldOptions& options, const v1::Trajectory& trajectory);

}  // namespace loom::agent
