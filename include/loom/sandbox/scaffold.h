#pragma once
// The scaffold: the agent loop a worker runs for one task in one sandbox.
// It builds the conversation (system prompt with the tool list, the
// problem), asks the policy for each assistant turn through `generate`, runs
// the turn's tool calls in the sandbox, and stops on submit, on a turn
// without tool calls (its content is the answer), at the step limit or the
// time limit. Then it verifies and returns the normalised Trajectory.
//
// An episode with `resume` (a snapshot of one that ran elsewhere) restores
// the workspace over the task's environment, takes the snapshot's record as
// its own, with the time it had spent, and asks again for the turn it was
// waiting on.
//
// The messages it sends are loom/tasks/conversation.h's, which the trainer
// side rebuilds for demonstrations.
//
// Tokens never appear here: the policy (the trainer) owns the token
// sequence and receives, with each request, the messages to append.

#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/sandbox/sandbox.h"
#include "loom/v1/sandbox.pb.h"

namespace loom::sandbox {

// Returns the policy's reply to one request; a non-OK status means the
// policy is gone (stream broken, deadline passed): the episode fails with a
// penalty. `so_far` is the episode's record up to the request (its
// duration_ms the time spent), for a snapshot.
using GenerateFn = std::function<absl::StatusOr<v1::GenerateReply>(
    const v1::GenerateRequest& request, const v1::Trajectory& so_far)>;

// Called after every tool call the scaffold runs (the worker's load statistics).
using ToolObserver = std::function<void(const v1::ToolResult&)>;

v1::Trajectory RunScaffold(const Sandbox& sandbox, const v1::RunEpisode& episode,
                           const GenerateFn& generate, const ToolObserver& on_tool = nullptr);

}  // namespace loom::sandbox
