#include "loom/sandbox/scaffold.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "health.h"
#include "loom/sandbox/tools.h"
#include "loom/sandbox/verify.h"
#include "loom/tasks/conversation.h"

namespace loom::sandbox {
namespace {

using Clock = std::chrono::steady_clock;

// The largest record an episode may leave: its `episode_done` (and a
// snapshot, with a workspace archive of up to 32 MiB) must cross the
// transport's 64 MiB message limit. An agent that fills its record past it
// (hundreds of tool calls at the output caps) ends with `size_limit`, a
// failure of its own, scored like the step limit; never an infrastructure
// failure, which the trainer would mask.
constexpr size_t kMaxTrajectoryBytes = 24 << 20;

// The health probe's limit (the task's tool limit when lower).
constexpr double kHealthTimeoutS = 10;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// One episode's evolving state.
class Episode {
 public:
  Episode(const Sandbox& sandbox, const v1::RunEpisode& episode, const GenerateFn& generate,
          const ToolObserver& on_tool)
      : sandbox_(sandbox),
        task_(episode.task()),
        options_(tasks::WithDefaults(episode.options())),
        generate_(generate),
        on_tool_(on_tool) {
    trajectory_.set_task_id(task_.id());
  }

  v1::Trajectory Run(const v1::EpisodeSnapshot* resume) {
    if (!task_.verification().answer_paths().empty()) {
      // What verification restores outside the answer; a failure shows in its verdict.
      if (absl::Status s = sandbox_.Snapshot(); !s.ok()) spdlog::warn("snapshot: {}", s.ToString());
    }
    int first_turn = 0;
    if (resume == nullptr) {
      Start();
    } else if (absl::Status s = Restore(*resume); !s.ok()) {
      Fail(absl::StrCat("sandbox_error: ", s.message()), true);
    } else {
      first_turn = resume->pending().turn();
    }
    for (int turn = first_turn; turn < options_.max_steps() && !done_; ++turn) {
      if (SecondsSince(start_) >= options_.max_time_s()) {
        Fail("time_limit", false);
        break;
      }
      Turn(turn);
    }
    if (!done_) Fail("step_limit", false);
    if (!trajectory_.penalty() && trajectory_.repercussion().empty()) CheckHealth();
    if (!trajectory_.repercussion().empty()) {
      v1::Verdict* verdict = trajectory_.mutable_verdict();
      verdict->set_reward(0);
      verdict->set_passed(false);
      verdict->set_details("not verified: the agent broke its environment (" +
                           trajectory_.repercussion() + ")");
    } else if (!trajectory_.penalty()) {
      *trajectory_.mutable_verdict() =
          Verify(sandbox_, task_.verification(), trajectory_.answer(), RemainingToolTime(true),
                 trajectory_.mutable_commands());
    }
    trajectory_.set_duration_ms(static_cast<int64_t>(SecondsSince(start_) * 1000));
    return std::move(trajectory_);
  }

 private:
  void Start() {
    for (v1::Message& message : tasks::OpeningMessages(task_, options_)) Add(std::move(message));
  }

  // Takes over a snapshot's episode: its workspace, record and elapsed time,
  // with the messages of the request it waits on still to send.
  absl::Status Restore(const v1::EpisodeSnapshot& snapshot) {
    absl::Status restored =
        sandbox_.RestoreWorkspace(snapshot.workspace(), options_.tool_timeout_s());
    if (!restored.ok()) return restored;
    trajectory_ = snapshot.trajectory();
    trajectory_.set_task_id(task_.id());
    start_ -= std::chrono::milliseconds(snapshot.trajectory().duration_ms());
    pending_.assign(snapshot.pending().append().begin(), snapshot.pending().append().end());
    return absl::OkStatus();
  }

  void Turn(int turn) {
    v1::GenerateRequest request;
    request.set_turn(turn);
    *request.mutable_append() = {pending_.begin(), pending_.end()};
    pending_.clear();
    trajectory_.set_duration_ms(static_cast<int64_t>(SecondsSince(start_) * 1000));
    absl::StatusOr<v1::GenerateReply> reply = generate_(request, trajectory_);
    trajectory_.set_steps(turn + 1);
    if (!reply.ok()) return Fail(absl::StrCat("policy_lost: ", reply.status().message()), true);
    if (reply->stop()) return Fail("stopped_by_policy", false);
    if (reply->result_case() != v1::GenerateReply::kAssistant) return FormatError(*reply);
    v1::Message assistant = reply->assistant();
    assistant.set_role("assistant");
    *trajectory_.add_messages() = assistant;
    if (assistant.tool_calls().empty()) return Submit(assistant.content());
    for (const v1::ToolCall& call : assistant.tool_calls()) {
      RunCall(call);
      if (!done_ && trajectory_.ByteSizeLong() > kMaxTrajectoryBytes) {
        Fail(absl::StrCat("size_limit: the episode's record is over ", kMaxTrajectoryBytes >> 20,
                          " MiB"),
             false);
      }
    }
  }

  void RunCall(const v1::ToolCall& call) {
    v1::ToolResult result;
    if (done_) {
      result.set_call_id(call.id());
      result.set_name(call.name());
      result.set_exit_code(-1);
      result.set_error(trajectory_.failure_reason().empty()
                           ? "not run: the answer was already submitted"
                           : "not run: the episode has ended (" + trajectory_.failure_reason() +
                                 ")");
    } else {
      result = ExecuteTool(sandbox_, call, RemainingToolTime(false));
      Record(call, result);
      spdlog::info("task {} tool {} exit {} {}ms{}", task_.id(), call.name(), result.exit_code(),
                   result.duration_ms(), result.timed_out() ? " timed-out" : "");
      if (on_tool_) on_tool_(result);
      // A cap or the timeout may have left the environment unusable.
      if (result.timed_out() || !result.limit().empty()) CheckHealth();
    }
    Add(tasks::ToolMessage(call, result));
    if (call.name() == "submit" && result.error().empty() && !done_)
      Submit(tasks::SubmittedAnswer(call));
  }

  void Record(const v1::ToolCall& call, const v1::ToolResult& result) {
    if (call.name() == "submit" || result.exit_code() == -1) return;  // nothing ran
    v1::CommandRecord* record = trajectory_.add_commands();
    record->set_phase("tool");
    record->set_command(absl::StrCat(call.name(), " ", call.arguments_json()));
    record->set_exit_code(result.exit_code());
    record->set_duration_ms(result.duration_ms());
    record->set_timed_out(result.timed_out());
    record->set_limit(result.limit());
  }

  void FormatError(const v1::GenerateReply& reply) {
    trajectory_.set_format_errors(trajectory_.format_errors() + 1);
    std::string why = reply.result_case() == v1::GenerateReply::kParseError
                          ? reply.parse_error()
                          : std::string("empty reply");
    Add(tasks::FormatErrorMessage(why));
  }

  void Submit(const std::string& answer) {
    trajectory_.set_answer(answer);
    done_ = true;
  }

  // The repercussion signal: an environment the agent broke ends its
  // episode as its own failure (see v1::Trajectory.repercussion). A probe
  // that cannot run for the worker's reasons finds nothing.
  void CheckHealth() {
    const double timeout_s =
        std::min(kHealthTimeoutS, static_cast<double>(options_.tool_timeout_s()));
    absl::StatusOr<std::string> finding = ProbeHealth(sandbox_, timeout_s);
    if (!finding.ok()) {
      spdlog::warn("task {}: health probe: {}", task_.id(), finding.status().ToString());
      return;
    }
    if (finding->empty()) return;
    spdlog::info("task {}: the agent broke its environment: {}", task_.id(), *finding);
    trajectory_.set_repercussion(*finding);
    Fail("broke_environment: " + *finding, false);
  }

  void Fail(std::string reason, bool penalty) {
    trajectory_.set_failure_reason(std::move(reason));
    trajectory_.set_penalty(penalty);
    done_ = true;
  }

  // Per-call timeout: the tool limit, but never past the episode's time limit
  // (verification gets at least the tool limit).
  double RemainingToolTime(bool for_verification) const {
    double left = options_.max_time_s() - SecondsSince(start_);
    double limit = options_.tool_timeout_s();
    return for_verification ? limit : std::max(1.0, std::min(limit, left));
  }

  void Add(v1::Message message) {
    *trajectory_.add_messages() = message;
    pending_.push_back(std::move(message));
  }

  const Sandbox& sandbox_;
  const v1::Task& task_;
  const v1::ScaffoldOptions options_;
  const GenerateFn& generate_;
  const ToolObserver& on_tool_;
  Clock::time_point start_ = Clock::now();
  v1::Trajectory trajectory_;
  std::vector<v1::Message> pending_;  // added since the last generate request
  bool done_ = false;
};

}  // namespace

v1::Trajectory RunScaffold(const Sandbox& sandbox, const v1::RunEpisode& episode,
                           const GenerateFn& generate, const ToolObserver& on_tool) {
  return Episode(sandbox, episode, generate, on_tool)
      .Run(episode.has_resume() ? &episode.resume() : nullptr);
}

}  // namespace loom::sandbox
