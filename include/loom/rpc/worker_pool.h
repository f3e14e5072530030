#pragma once
// WorkerPool: the trainer's view of its sandbox workers. It places each new
// session on the worker with the lowest recent load (from Status reports,
// refreshed when older than `load_refresh_s`, plus the sessions it opened
// since), and on refusal (RESOURCE_EXHAUSTED) or UNAVAILABLE retries on
// another worker with exponential backoff, up to `max_attempts`. A worker
// that was unavailable is avoided until its backoff passes.
//
// RunEpisode never throws and never hangs: every call has a deadline, and an
// episode whose worker or sandbox dies comes back as a Trajectory with
// `penalty` set and a `failure_reason`, so the run goes on.
// Thread-safe: many episodes may run at once from different threads.

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "loom/rpc/session.h"

namespace loom::rpc {

struct PoolOptions {
  std::vector<std::string> targets;  // host:port or dns:///name:port
  std::string auth_token;
  std::string tls_ca_pem;
  double episode_timeout_s = 900;  // a whole session
  double status_timeout_s = 1;     // one load report
  int max_attempts = 5;            // placements tried per session
  double backoff_initial_s = 0.05;
  double backoff_max_s = 2;
  double load_refresh_s = 0.5;
  double lease_s = 0;  // asked for every episode's session (see RunEpisode)
};

struct WorkerLoad {
  std::string target;
  int live = 0;
  int episodes = 0;  // of `live`, sessions inside an episode
  int detached = 0;  // of `live`, sessions kept for a client that went away
  int64_t leases_lapsed = 0;
  int capacity = 0;
  double p50_ms = 0;
  bool reachable = false;
};

class WorkerPool {
 public:
  explicit WorkerPool(PoolOptions options);
  const PoolOptions& options() const { return options_; }
  ~WorkerPool();

  // Opens a session on the best worker, retrying elsewhere on refusal.
  absl::StatusOr<std::unique_ptr<WorkerSession>> OpenSession(const v1::OpenSession& open);

  // Runs one episode (or, with `episode.resume`, goes on with a snapshot's);
  // infrastructure failures give a penalty trajectory.
  // `on_opened`, when given, gets the session before the first turn: where
  // the episode runs (its target() as configured, and its session id) —
  // with `lease_s`, a later client may attach there (ResumeEpisode) after
  // this one went away — and the session the policy may ask for a Snapshot.
  // `on_done`, when given, gets the trajectory before the session closes;
  // false leaves the session to its lease instead (the trajectory was not
  // kept, so the worker must be able to send it again).
  using OnOpened = std::function<void(WorkerSession& session)>;
  using OnDone = std::function<bool(const v1::Trajectory& trajectory)>;
  v1::Trajectory RunEpisode(const v1::RunEpisode& episode, const Policy& policy,
                            const OnOpened& on_opened = nullptr, const OnDone& on_done = nullptr);

  // Attaches to the episode of session `session_id` on `target`, left by an
  // earlier client, and drives it to its end. An error (NOT_FOUND: the lease
  // lapsed or the episode ended; UNAVAILABLE: the worker is gone; CANCELLED)
  // means nothing was resumed; a failure after attaching gives a penalty
  // trajectory, as in RunEpisode. `on_opened` as there, once attached.
  absl::StatusOr<v1::Trajectory> ResumeEpisode(const std::string& target,
                                               const std::string& session_id, const Policy& policy,
                                               const OnDone& on_done = nullptr,
                                               const OnOpened& on_opened = nullptr);

  // Ends leased sessions on `target` (worker and session as RunEpisode's
  // `on_opened` named them) that no client will attach to again. Returns how
  // many were still there.
  absl::StatusOr<int> ReleaseSessions(const std::string& target,
                                      const std::vector<std::string>& session_ids);

  // From any thread: breaks every running episode's stream and fails later
  // ones at once (`cancelled`), so a stopping trainer need not wait for a
  // tool call to end. The worker ends the sessions as clients that left.
  void CancelEpisodes();

  // Fresh load reports of every worker (for logs and tests).
  std::vector<WorkerLoad> Loads();

 private:
  struct Worker;
  Worker* Pick();
  // The worker configured as `target`; NOT_FOUND if none is.
  absl::StatusOr<Worker*> Find(const std::string& target);
  void RefreshIfStale(Worker& worker);
  void MarkDown(Worker& worker, double backoff_s);
  // Drives an open session's episode (`run` sends it off) with cancellation.
  absl::StatusOr<v1::Trajectory> Drive(
      WorkerSession& session,
      const std::function<absl::StatusOr<v1::Trajectory>(WorkerSession&)>& run,
      const OnDone& on_done);

  const PoolOptions options_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::mutex mu_;
  std::set<WorkerSession*> running_ ABSL_GUARDED_BY(mu_);  // episodes in progress
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

// "setup_failed: ..." when the environment's setup command of a session
// failed or timed out (the task's doing, never the policy's); "" otherwise.
std::string SetupFailure(const v1::Opened& opened);

}  // namespace loom::rpc
