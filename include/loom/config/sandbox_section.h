#pragma once
// `sandbox:` — where agent episodes run: remote `loom worker`s (a list of
// addresses or one dns:/// name), or N local workers the trainer starts on
// 127.0.0.1 and stops on exit; plus auth, retries and scaffold limits.

#include <string>
#include <vector>

#include "loom/config/schema.h"

namespace loom::config {

struct SandboxSection {
  std::vector<std::string> workers;  // gRPC targets: host:port or dns:///name:port
  int local = 0;                     // local workers to start; 0 = none
  int local_max_sandboxes = 8;       // sandbox slots per local worker
  std::string auth_token_file;       // "" = no auth
  std::string tls_ca_file;           // "" = plaintext
  int max_attempts = 5;              // placements tried per episode
  double episode_timeout_s = 900;    // deadline of one whole episode session
  int max_steps = 8;                 // assistant turns per episode
  int max_time_s = 300;              // scaffold time limit per episode
  int tool_timeout_s = 30;           // wall clock per tool call
  int max_turn_tokens = 0;           // generated tokens per assistant turn; 0 = no cap
  bool tool_schemas = true;          // list the tools' schemas in the system prompt
  std::string system_prompt;         // "" = the worker's default
  double lease_s = 600;              // remote workers keep a preempted trainer's episodes this long
  int snapshot_mb = 16;     // largest workspace a checkpoint snapshots per episode; 0 = none
  std::string harness_dir;  // local workers: npm harnesses mounted at /opt/loom/harness; "" = none

  template <class V>
  void Visit(V& v) {
    v.Field("workers", workers,
            Doc("Sandbox worker addresses (host:port), or one dns:///name:port target whose "
                "addresses are used round-robin (a Kubernetes headless service)."));
    v.Field("local", local,
            Doc("Start this many `loom worker` processes on 127.0.0.1 (stopped on exit) instead "
                "of using `workers`; with several ranks, each rank starts its own.")
                .Unit("workers")
                .Range(0, 256));
    v.Field("local_max_sandboxes", local_max_sandboxes,
            Doc("Live sandboxes per local worker; more requests are refused and placed elsewhere.")
                .Unit("sandboxes")
                .Range(1, 4096));
    v.Field("auth_token_file", auth_token_file,
            Doc("File holding the bearer token workers require (also given to local workers)."));
    v.Field("tls_ca_file", tls_ca_file,
            Doc("PEM CA certificate: connect to workers with TLS. Empty: plaintext."));
    v.Field("max_attempts", max_attempts,
            Doc("Placements tried for one episode when workers refuse (at capacity) or are "
                "unavailable, with exponential backoff between them.")
                .Range(1, 100));
    v.Field("episode_timeout_s", episode_timeout_s,
            Doc("Deadline of one episode's session; past it the episode fails with a penalty.")
                .Unit("s")
                .Min(1));
    v.Field(
        "max_steps", max_steps,
        Doc("Assistant turns per episode before it ends unsolved.").Unit("turns").Range(1, 1000));
    v.Field("max_time_s", max_time_s,
            Doc("Scaffold time limit per episode, tool calls included.").Unit("s").Min(1));
    v.Field("tool_timeout_s", tool_timeout_s,
            Doc("Wall-clock limit of one tool call; the sandbox's process tree is killed after it.")
                .Unit("s")
                .Min(1));
    v.Field("max_turn_tokens", max_turn_tokens,
            Doc("Generated tokens per assistant turn: a longer turn is cut there and answered as "
                "a format error, so the episode goes on. 0 = only rollout.max_new_tokens (over "
                "all turns) limits it.")
                .Unit("tokens")
                .Min(0));
    v.Field("system_prompt", system_prompt,
            Doc("The system prompt of every episode (the tool schemas follow it). Empty: the "
                "worker's default, which says the agent works in a Linux sandbox with its files "
                "in /workspace and submits its answer with the submit tool."));
    v.Field("tool_schemas", tool_schemas,
            Doc("List the tools' JSON schemas in each episode's system prompt (about 1k tokens "
                "in the DSML format). false leaves them out, for a model that learned its tools "
                "from demonstrations (SFT on the dataset's built-in demonstrations); the tools "
                "stay callable."));
    v.Field("lease_s", lease_s,
            Doc("How long a remote worker keeps a running episode after the trainer went away "
                "(preempted): a run resumed within it attaches to the episode, which goes on "
                "where it stopped; after it the worker frees the sandbox and the resumed run "
                "starts the episode again. Capped by the worker's --max-lease-s. Local workers "
                "stop with the trainer, so their episodes always start again. 0 = no lease.")
                .Unit("s")
                .Min(0));
    v.Field("harness_dir", harness_dir,
            Doc("Local workers: a directory of npm packages (scripts/setup.sh fills "
                "third_party/npm with Pi, Claude Code, Codex and OpenCode) mounted read-only at "
                "/opt/loom/harness in every sandbox (`loom worker --harness-dir`), for episodes "
                "run by an external harness. Relative to the working directory. \"\" = none."));
    v.Field("snapshot_mb", snapshot_mb,
            Doc("Every checkpoint also snapshots each remote leased episode that goes on, as it "
                "waits for its next turn: its workspace (as a tar archive up to this size), its "
                "record so far and the request it waits on, kept in the checkpoint and in memory "
                "until the episode's next turn. A resumed run that cannot attach to the episode "
                "(its worker is gone, or the lease lapsed) goes on from the snapshot on any "
                "worker; without one it starts the episode again. /tmp and running processes are "
                "not kept. Capped by the worker's --max-snapshot-mb. 0 = no snapshots.")
                .Unit("MiB")
                .Range(0, 60));
  }

  void Validate(ErrorSink& errors) const {
    if (local > 0 && !workers.empty()) {
      errors.Error("local", "use either `workers` or `local`, not both");
    }
    if (local > 0 && !tls_ca_file.empty()) {
      errors.Error("tls_ca_file", "local workers serve plaintext on 127.0.0.1; drop tls_ca_file");
    }
  }
};

}  // namespace loom::config
