#pragma once
// External agent harnesses as loom runs them: the harness is the episode's
// main process inside the sandbox (v1::RunHarness), started
// non-interactively on the task's problem ($LOOM_PROBLEM) with its model
// endpoint at 127.0.0.1:8000 in the sandbox's own network namespace (the
// worker sets OPENAI_BASE_URL, OPENAI_API_KEY, ANTHROPIC_BASE_URL,
// ANTHROPIC_API_KEY). A HarnessSpec is the command, its environment and the
// configuration files it needs (written under its HOME, /tmp).
//
// Built in (installed from npm by scripts/setup.sh into third_party/npm, and
// mounted read-only at /opt/loom/harness by `loom worker --harness-dir`):
//   pi           `pi -p` over Chat Completions (its models.json names the provider)
//   claude-code  `claude -p` over Anthropic Messages
//   codex        `codex exec` over the Responses API (its config.toml names the provider)
//   opencode     `opencode run` over Chat Completions (its opencode.json names the provider)
// Any other is a command: {name, command, env}.
//
// RunHarnessEpisode runs one task under one harness on a sandbox worker,
// its model calls served by a session of an Endpoint, then verified by the
// worker; the session's record (segments, calls) comes back with it.

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "loom/agent/outcome.h"
#include "loom/rpc/worker_pool.h"
#include "loom/serve/endpoint.h"
#include "loom/v1/sandbox.pb.h"

namespace loom::agent {

struct HarnessSpec {
  std::string name;
  std::string package;  // a built-in one's npm package ("" for a command)
  std::string command;  // bash, in /workspace
  std::map<std::string, std::string> env;
  std::map<std::string, std::string> files;  // path under HOME (/tmp) -> text
};

// A harness given as a bash command.
HarnessSpec CommandHarness(const std::string& name, const std::string& command);

// Adds `arguments` (bash words) to a built-in harness's command, before
// the problem: Pi's `--tools bash --system-prompt '...'`, for instance.
void AddArguments(HarnessSpec& spec, const std::string& arguments);

// The version of `spec`'s npm package under `harness_dir` (its
// package.json), or "" when it is not a built-in one or cannot be read.
std::string HarnessVersion(const HarnessSpec& spec, const std::string& harness_dir);

// The harnesses built in, by name.
std::vector<std::string> BuiltinHarnessNames();

// Built-in harness `name` set up for a model of `context_window` tokens that
// generates at most `max_tokens` a turn (Pi's provider entry wants both).
// INVALID_ARGUMENT naming the known ones for an unknown name.
absl::StatusOr<HarnessSpec> BuiltinHarness(const std::string& name, int64_t context_window,
                                           int64_t max_tokens);

// Ends a running episode from another thread: its sandbox session is
// cancelled and the episode ends as `cancelled` (infrastructure). Thread-safe.
class EpisodeCancel {
 public:
  void Cancel();

  // RunHarnessEpisode's: the episode's session while it runs (null: none);
  // false when it was cancelled already.
  bool Attach(rpc::WorkerSession* session);

 private:
  mutable std::mutex mu_;
  rpc::WorkerSession* session_ = nullptr;  // guarded by mu_
  bool cancelled_ = false;                 // guarded by mu_
};

struct HarnessEpisodeOptions {
  std::string effort;  // the session's effort name ("" = the harness's own)
  std::optional<double> temperature;
  int64_t max_turn_tokens = 0;                  // 0 = the harness's max_tokens
  double timeout_s = 600;                       // the harness's wall clock
  std::chrono::milliseconds close_wait{10000};  // for the session's last segments
  EpisodeCancel* cancel = nullptr;              // borrowed; null: not cancellable
};

// One episode's end. `failure` is "" for a harness that exited 0, else
// "cause: detail": time_limit, sandbox_limit, harness_exit (a non-zero
// status: verified and scored like any end), or one that is not the
// policy's doing, with `infrastructure` set, and is masked, not scored:
// endpoint, no_sandbox, setup_failed, worker_lost, harness_failed_to_start
// (it could not be set up, or its command was not found: status 126, 127),
// harness_crashed (killed by a signal that was not the time limit's).
struct HarnessEpisode {
  std::string harness;          // HarnessSpec::name
  std::string task_id;          // v1::Task::id, as the built-in loop's trajectories name it
  v1::HarnessDone done;         // with its verdict
  serve::SessionRecord record;  // segments and calls of its session
  std::string failure;
  bool infrastructure = false;
  double reward() const { return done.verdict().reward(); }
};

// What the trainer keeps of an episode: the verdict's reward, the harness's
// stdout as its answer, its calls that asked for tools as steps, the calls
// the chat format rejected as format errors, and its failure.
EpisodeOutcome OutcomeOf(const HarnessEpisode& episode);
// The episode for the trajectory log: harness, exit status, duration, every
// call (its segment, times, tokens, finish), the verdict with the checks the
// worker ran, the failure and the tail of the harness's stderr.
nlohmann::json HarnessEpisodeJson(const HarnessEpisode& episode);

// Runs `task` under `harness` on a session of `pool` (the environment with
// the open), its calls served by a new session of `endpoint` that this call
// opens and closes. Thread-safe (one episode per thread).
HarnessEpisode RunHarnessEpisode(rpc::WorkerPool& pool, serve::Endpoint& endpoint,
                                 const HarnessSpec& harness, const v1::Task& task,
                                 const HarnessEpisodeOptions& options);

}  // namespace loom::agent
