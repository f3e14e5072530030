#include "loom/rpc/worker_pool.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "loom/rpc/channel.h"

namespace loom::rpc {
namespace {

using SystemClock = std::chrono::system_clock;
using Clock = std::chrono::steady_clock;

SystemClock::time_point In(double seconds) {
  return SystemClock::now() + std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6));
}

bool Retryable(const absl::Status& status) {
  return absl::IsResourceExhausted(status) || absl::IsUnavailable(status) ||
         absl::IsDeadlineExceeded(status);
}

v1::Trajectory PenaltyTrajectory(const std::string& task_id, const std::string& reason) {
  v1::Trajectory trajectory;
  trajectory.set_task_id(task_id);
  trajectory.set_failure_reason(reason);
  trajectory.set_penalty(true);
  return trajectory;
}

}  // namespace

struct WorkerPool::Worker {
  std::string target;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::SandboxWorker::Stub> stub;
  // Guarded by the pool's mu_.
  v1::StatusReply report;
  Clock::time_point reported_at{};
  Clock::time_point down_until{};
  int opened_since_report = 0;
  bool refreshing = false;
};

WorkerPool::WorkerPool(PoolOptions options) : options_(std::move(options)) {
  for (const std::string& target : options_.targets) {
    auto worker = std::make_unique<Worker>();
    worker->target = target;
    worker->channel = MakeChannel({target, options_.auth_token, options_.tls_ca_pem});
    worker->stub = v1::SandboxWorker::NewStub(worker->channel);
    workers_.push_back(std::move(worker));
  }
}

WorkerPool::~WorkerPool() = default;

void WorkerPool::RefreshIfStale(Worker& worker) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto age = std::chrono::duration<double>(Clock::now() - worker.reported_at).count();
    if (worker.refreshing || age < options_.load_refresh_s) return;
    worker.refreshing = true;
  }
  grpc::ClientContext context;
  PrepareContext(context, options_.auth_token, In(options_.status_timeout_s));
  v1::StatusReply reply;
  grpc::Status status = worker.stub->Status(&context, v1::StatusRequest(), &reply);
  std::lock_guard<std::mutex> lock(mu_);
  worker.refreshing = false;
  worker.reported_at = Clock::now();
  if (status.ok()) {
    worker.report = reply;
    worker.opened_since_report = 0;
  } else {
    worker.report.set_capacity(0);  // unknown load: placed last
  }
}

WorkerPool::Worker* WorkerPool::Pick() {
  for (auto& worker : workers_) RefreshIfStale(*worker);
  std::lock_guard<std::mutex> lock(mu_);
  Worker* best = nullptr;
  double best_score = 0;
  const Clock::time_point now = Clock::now();
  for (auto& worker : workers_) {
    double capacity = std::max(1, worker->report.capacity());
    double score = (worker->report.live_sandboxes() + worker->opened_since_report) / capacity;
    if (worker->report.capacity() == 0) score += 1e3;  // no report: last resort
    if (worker->down_until > now) score += 1e6;        // recently down: only if nothing else
    if (best == nullptr || score < best_score) {
      best = worker.get();
      best_score = score;
    }
  }
  if (best != nullptr) ++best->opened_since_report;
  return best;
}

absl::StatusOr<WorkerPool::Worker*> WorkerPool::Find(const std::string& target) {
  for (auto& worker : workers_) {
    if (worker->target == target) return worker.get();
  }
  return absl::NotFoundError(absl::StrCat("worker ", target, " is not among this run's workers"));
}

void WorkerPool::MarkDown(Worker& worker, double backoff_s) {
  std::lock_guard<std::mutex> lock(mu_);
  worker.down_until =
      Clock::now() + std::chrono::microseconds(static_cast<int64_t>(backoff_s * 1e6));
  worker.reported_at = Clock::time_point{};  // ask again next time
}

absl::StatusOr<std::unique_ptr<WorkerSession>> WorkerPool::OpenSession(
    const v1::OpenSession& open) {
  if (workers_.empty()) return absl::FailedPreconditionError("no sandbox workers configured");
  absl::Status last = absl::UnavailableError("no attempt made");
  double backoff = options_.backoff_initial_s;
  for (int attempt = 0; attempt < options_.max_attempts; ++attempt) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cancelled_) return absl::CancelledError("the trainer is stopping");
    }
    Worker* worker = Pick();
    auto session = WorkerSession::Open(worker->channel, options_.auth_token, open,
                                       In(options_.episode_timeout_s));
    if (session.ok()) (*session)->set_target(worker->target);
    if (session.ok() || !Retryable(session.status())) return session;
    last = session.status();
    MarkDown(*worker, backoff);
    std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(backoff * 1e6)));
    backoff = std::min(options_.backoff_max_s, backoff * 2);
  }
  return absl::Status(last.code(), absl::StrCat("after ", options_.max_attempts,
                                                " placement attempts: ", last.message()));
}

absl::StatusOr<v1::Trajectory> WorkerPool::Drive(
    WorkerSession& session,
    const std::function<absl::StatusOr<v1::Trajectory>(WorkerSession&)>& run,
    const OnDone& on_done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_) return absl::CancelledError("the trainer is stopping");
    running_.insert(&session);
  }
  absl::StatusOr<v1::Trajectory> trajectory = run(session);
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_.erase(&session);
    if (cancelled_ && !trajectory.ok()) return absl::CancelledError("the trainer is stopping");
  }
  if (trajectory.ok()) {
    if (!on_done || on_done(*trajectory)) {
      session.Close().IgnoreError();
    } else {
      session.Cancel();  // not kept: a leased session sends it again to whoever attaches
    }
  }
  return trajectory;
}

std::string SetupFailure(const v1::Opened& opened) {
  const v1::ToolResult& setup = opened.setup();
  if (setup.exit_code() == 0 && !setup.timed_out()) return "";
  return absl::StrCat(
      "setup_failed: ",
      setup.timed_out() ? "timed out" : absl::StrCat("exit status ", setup.exit_code()), ": ",
      setup.stderr().substr(0, 1000));
}

v1::Trajectory WorkerPool::RunEpisode(const v1::RunEpisode& episode, const Policy& policy,
                                      const OnOpened& on_opened, const OnDone& on_done) {
  v1::OpenSession open;
  *open.mutable_environment() = episode.task().environment();
  open.set_label(episode.task().id());
  open.set_lease_s(options_.lease_s);
  const std::string kCancelled = "cancelled: the trainer is stopping";
  auto session = OpenSession(open);
  const std::string& task_id = episode.task().id();
  if (absl::IsCancelled(session.status())) return PenaltyTrajectory(task_id, kCancelled);
  if (!session.ok()) {
    return PenaltyTrajectory(task_id, absl::StrCat("no_sandbox: ", session.status().message()));
  }
  // A task whose setup fails never reaches the policy: nothing it did.
  if (std::string failed = SetupFailure((*session)->opened()); !failed.empty()) {
    (*session)->Close().IgnoreError();
    return PenaltyTrajectory(task_id, std::move(failed));
  }
  if (on_opened) on_opened(**session);
  v1::RunEpisode without_env = episode;  // the environment already went with `open`
  without_env.mutable_task()->clear_environment();
  absl::StatusOr<v1::Trajectory> trajectory = Drive(
      **session, [&](WorkerSession& s) { return s.RunEpisode(without_env, policy); }, on_done);
  if (absl::IsCancelled(trajectory.status())) return PenaltyTrajectory(task_id, kCancelled);
  if (!trajectory.ok()) {
    return PenaltyTrajectory(task_id, absl::StrCat("worker_lost: ", trajectory.status().message()));
  }
  return *std::move(trajectory);
}

absl::StatusOr<v1::Trajectory> WorkerPool::ResumeEpisode(const std::string& target,
                                                         const std::string& session_id,
                                                         const Policy& policy,
                                                         const OnDone& on_done,
                                                         const OnOpened& on_opened) {
  absl::StatusOr<Worker*> worker = Find(target);
  if (!worker.ok()) return worker.status();
  auto session = WorkerSession::Attach((*worker)->channel, options_.auth_token, session_id,
                                       In(options_.episode_timeout_s));
  if (!session.ok()) return session.status();
  (*session)->set_target(target);
  if (on_opened) on_opened(**session);
  absl::StatusOr<v1::Trajectory> trajectory = Drive(
      **session, [&](WorkerSession& s) { return s.Continue(policy); }, on_done);
  if (trajectory.ok() || absl::IsCancelled(trajectory.status())) return trajectory;
  return PenaltyTrajectory("", absl::StrCat("worker_lost: ", trajectory.status().message()));
}

absl::StatusOr<int> WorkerPool::ReleaseSessions(const std::string& target,
                                                const std::vector<std::string>& session_ids) {
  absl::StatusOr<Worker*> worker = Find(target);
  if (!worker.ok()) return worker.status();
  grpc::ClientContext context;
  PrepareContext(context, options_.auth_token, In(options_.status_timeout_s));
  v1::ReleaseRequest request;
  for (const std::string& id : session_ids) request.add_session_ids(id);
  v1::ReleaseReply reply;
  grpc::Status status = (*worker)->stub->Release(&context, request, &reply);
  if (!status.ok()) return FromGrpc(status, "release");
  return reply.released();
}

void WorkerPool::CancelEpisodes() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  for (WorkerSession* session : running_) session->Cancel();
}

std::vector<WorkerLoad> WorkerPool::Loads() {
  std::vector<WorkerLoad> loads;
  for (auto& worker : workers_) {
    grpc::ClientContext context;
    PrepareContext(context, options_.auth_token, In(options_.status_timeout_s));
    v1::StatusReply reply;
    grpc::Status status = worker->stub->Status(&context, v1::StatusRequest(), &reply);
    WorkerLoad load;
    load.target = worker->target;
    load.live = reply.live_sandboxes();
    load.episodes = reply.episodes_running();
    load.detached = reply.detached();
    load.leases_lapsed = reply.leases_lapsed();
    load.capacity = reply.capacity();
    load.p50_ms = reply.p50_ms();
    load.reachable = status.ok();
    loads.push_back(load);
  }
  return loads;
}

}  // namespace loom::rpc
