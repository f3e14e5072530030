#include "sandbox/watchdog.h"

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"

namespace loom::sandbox {
namespace {

std::chrono::steady_clock::duration Seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s));
}

}  // namespace

Watchdog::Watchdog(double idle_s, double max_session_s)
    : idle_(Seconds(idle_s)), max_session_(Seconds(max_session_s)), thread_([this] { Loop(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Watchdog::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::milliseconds(500));
    const Clock::time_point now = Clock::now();
    for (auto& [id, session] : sessions_) {
      if (!session.cancelled.empty()) continue;
      if (now - session.started > max_session_) {
        session.cancelled = "the session outlived the worker's --max-session-s";
      } else if (session.waiting_since != Clock::time_point::max() &&
                 now - session.waiting_since > session.idle) {
        session.cancelled = session.idle == idle_
                                ? "the client sent nothing for --idle-timeout-s"
                                : "the stream sent no open within --open-timeout-s";
      } else {
        continue;
      }
      spdlog::warn("cancelling a session: {}", session.cancelled);
      session.context->TryCancel();
    }
  }
}

Watchdog::Watch::Watch(Watchdog& dog, grpc::ServerContext* context, double first_idle_s)
    : dog_(dog) {
  std::lock_guard<std::mutex> lock(dog_.mu_);
  id_ = dog_.next_id_++;
  const Clock::time_point now = Clock::now();
  const Clock::duration idle = first_idle_s > 0 ? Seconds(first_idle_s) : dog_.idle_;
  dog_.sessions_[id_] = Session{context, now, now, "", idle};
}

Watchdog::Watch::~Watch() {
  std::lock_guard<std::mutex> lock(dog_.mu_);
  dog_.sessions_.erase(id_);
}

void Watchdog::Watch::Waiting() {
  std::lock_guard<std::mutex> lock(dog_.mu_);
  dog_.sessions_[id_].waiting_since = Clock::now();
}

void Watchdog::Watch::Working() {
  std::lock_guard<std::mutex> lock(dog_.mu_);
  Session& session = dog_.sessions_[id_];
  session.waiting_since = Clock::time_point::max();
  session.idle = dog_.idle_;
}

std::string Watchdog::Watch::cancelled() const {
  std::lock_guard<std::mutex> lock(dog_.mu_);
  return dog_.sessions_[id_].cancelled;
}

}  // namespace loom::sandbox
