#include "loom/agent/task_check.h"

#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "loom/tasks/conversation.h"

namespace loom::agent {
namespace {

// A policy that gives `replies` as the agent's, turn by turn, then stops.
rpc::Policy Replay(std::vector<v1::GenerateReply> replies) {
  return [replies = std::move(replies)](
             const v1::GenerateRequest& request) -> absl::StatusOr<v1::GenerateReply> {
    v1::GenerateReply reply;
    if (request.turn() >= 0 && static_cast<size_t>(request.turn()) < replies.size()) {
      reply = replies[request.turn()];
    } else {
      reply.set_stop(true);
    }
    reply.set_turn(request.turn());
    return reply;
  };
}

// A demonstration's turns as replies, each tool call given an id.
std::vector<v1::GenerateReply> Replies(const std::vector<tasks::DemonstrationTurn>& turns) {
  std::vector<v1::GenerateReply> replies(turns.size());
  for (size_t turn = 0; turn < turns.size(); ++turn) {
    v1::Message& assistant = *replies[turn].mutable_assistant();
    assistant = turns[turn].assistant;
    for (int i = 0; i < assistant.tool_calls_size(); ++i) {
      assistant.mutable_tool_calls(i)->set_id(absl::StrCat("call_", turn, "_", i));
    }
  }
  return replies;
}

// A failure that is the task's own doing, though no policy's: its setup.
bool SetupFailed(const v1::Trajectory& trajectory) {
  return absl::StartsWith(trajectory.failure_reason(), "setup_failed");
}

// An episode that says nothing about the task: the infrastructure failed it.
bool Unknown(const v1::Trajectory& trajectory) {
  return trajectory.penalty() && !SetupFailed(trajectory);
}

std::string Why(const v1::Trajectory& trajectory) {
  if (!trajectory.failure_reason().empty()) return trajectory.failure_reason();
  return trajectory.verdict().details();
}

}  // namespace

bool TaskCheck::checked() const {
  return !Unknown(unsolved) && !(has_reference && Unknown(reference));
}

std::string TaskCheck::Problem() const {
  if (!checked()) {
    const v1::Trajectory& failed = Unknown(unsolved) ? unsolved : reference;
    return "not checked: " + failed.failure_reason();
  }
  if (SetupFailed(unsolved)) return "its environment's " + unsolved.failure_reason();
  std::string problem;
  if (unsolved.verdict().passed()) {
    problem = "its verification passes with nothing done: " + unsolved.verdict().details();
  }
  if (has_reference && !reference.verdict().passed()) {
    absl::StrAppend(&problem, problem.empty() ? "" : "; ",
                    "its reference solution fails: ", Why(reference));
  }
  return problem;
}

TaskCheck CheckAgentTask(rpc::WorkerPool& pool, const tasks::AgentTask& task,
                         const v1::ScaffoldOptions& options) {
  TaskCheck check;
  check.id = task.task.id();
  check.source = task.source;
  v1::RunEpisode episode;
  *episode.mutable_task() = task.task;
  *episode.mutable_options() = options;

  std::vector<tasks::DemonstrationTurn> nothing(1);
  nothing[0].assistant.set_role("assistant");
  nothing[0].assistant.set_content("Done.");
  check.unsolved = pool.RunEpisode(episode, Replay(Replies(nothing)));

  const std::vector<tasks::DemonstrationTurn> turns = tasks::ReferenceDemonstration(task);
  check.has_reference = !turns.empty();
  if (check.has_reference) {
    if (episode.options().max_steps() < static_cast<int>(turns.size())) {
      episode.mutable_options()->set_max_steps(static_cast<int>(turns.size()));
    }
    check.reference = pool.RunEpisode(episode, Replay(Replies(turns)));
  }
  return check;
}

v1::Trajectory ReplayEpisode(rpc::WorkerPool& pool, const tasks::AgentTask& task,
                             const v1::ScaffoldOptions& options, const v1::Trajectory& trajectory) {
  // The policy's replies, turn by turn: its messages, and the completions
  // that did not parse, known by the scaffold's format-error observation.
  std::vector<v1::GenerateReply> replies;
  for (const v1::Message& message : trajectory.messages()) {
    if (message.role() == "assistant") {
      replies.emplace_back();
      *replies.back().mutable_assistant() = message;
    } else if (std::optional<std::string> why = tasks::FormatErrorReason(message)) {
      replies.emplace_back();
      replies.back().set_parse_error(*why);
    }
  }
  v1::RunEpisode episode;
  *episode.mutable_task() = task.task;
  *episode.mutable_options() = options;  // the run's limits: a turn past them ends it again
  return pool.RunEpisode(episode, Replay(std::move(replies)));
}

}  // namespace loom::agent
