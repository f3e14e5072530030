#include "sandbox/leases.h"

#include <chrono>

#include "absl/strings/str_cat.h"

namespace loom::sandbox {

void Leases::Handover::Release(grpc::Status status) {
  {
    std::lock_guard<std::mutex> lock(leases_.mu_);
    released_ = true;
    status_ = std::move(status);
  }
  leases_.cv_.notify_all();
}

void Leases::Register(const std::string& id, grpc::ServerContext* context) {
  std::lock_guard<std::mutex> lock(mu_);
  sessions_[id].current = context;
}

void Leases::Unregister(const std::string& id) {
  std::shared_ptr<Handover> late;  // attached after the episode's last exchange
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sessions_.find(id);
    if (it == sessions_.end()) return;
    late = std::move(it->second.attached);
    sessions_.erase(it);
  }
  if (late != nullptr) {
    late->Release(grpc::Status(grpc::StatusCode::NOT_FOUND, "the episode ended"));
  }
}

std::shared_ptr<Leases::Handover> Leases::TakeAttached(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second.attached == nullptr) return nullptr;
  std::shared_ptr<Handover> handover = std::move(it->second.attached);
  it->second.current = handover->link().context;
  return handover;
}

std::shared_ptr<Leases::Handover> Leases::Await(const std::string& id, double lease_s) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::microseconds(static_cast<int64_t>(lease_s * 1e6));
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto it = sessions_.find(id);
    if (it == sessions_.end()) return nullptr;
    Entry& entry = it->second;
    entry.waiting = true;
    cv_.wait_until(lock, deadline,
                   [&] { return stopping_ || entry.released || entry.attached != nullptr; });
    entry.waiting = false;
    if (entry.attached == nullptr || entry.released) {
      if (!stopping_ && !entry.released) ++lapsed_;
      lock.unlock();
      Unregister(id);  // no attach may come now
      return nullptr;
    }
  }
  return TakeAttached(id);
}

grpc::Status Leases::Attach(const std::string& id, const std::string& worker, ClientLink link,
                            const std::function<bool()>& greet) {
  const grpc::Status not_found(
      grpc::StatusCode::NOT_FOUND,
      absl::StrCat("no episode of session ", id, " waits on worker ", worker,
                   ": it ended, its lease lapsed, or it had none"));
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sessions_.find(id);
    if (stopping_ || it == sessions_.end() || it->second.released) return not_found;
  }
  if (!greet()) return grpc::Status::OK;  // its client left already
  auto handover = std::shared_ptr<Handover>(new Handover(*this, link));
  std::shared_ptr<Handover> replaced;
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto it = sessions_.find(id);
    if (stopping_ || it == sessions_.end() || it->second.released) return not_found;
    Entry& entry = it->second;
    replaced = std::move(entry.attached);  // an earlier attach not yet taken
    entry.attached = handover;
    // The earlier client, if still there, is cut off: one client at a time.
    if (entry.current != nullptr) entry.current->TryCancel();
  }
  cv_.notify_all();
  if (replaced != nullptr) {
    replaced->Release(grpc::Status(grpc::StatusCode::CANCELLED, "another client attached"));
  }
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return handover->released_; });
  return handover->status_;
}

bool Leases::Release(const std::string& id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sessions_.find(id);
    if (it == sessions_.end()) return false;
    it->second.released = true;
    if (it->second.current != nullptr) it->second.current->TryCancel();
  }
  cv_.notify_all();
  return true;
}

void Leases::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
}

int Leases::detached() const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const auto& [id, entry] : sessions_) n += entry.waiting;
  return n;
}

int64_t Leases::lapsed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lapsed_;
}

}  // namespace loom::sandbox
