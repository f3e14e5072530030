#pragma once
// Leases: the leased sessions of a worker, through which a new stream takes
// over an episode (loom.v1 `attach`) whose client went away.
//
// The episode's thread registers its session when the episode starts, and
// before every exchange with its client takes the stream that attached since
// (TakeAttached); when its client is gone it waits, for at most the lease,
// for one to attach (Await). An attaching stream's handler calls Attach:
// it greets its client, cuts off the stream the episode used so far, hands
// its own over and blocks until the episode releases it — so the stream
// stays open while the episode's thread uses it. Thread-safe.

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/base/thread_annotations.h"
#include "loom/v1/sandbox.grpc.pb.h"
#include "sandbox/watchdog.h"

namespace loom::sandbox {

using SessionStream = grpc::ServerReaderWriter<v1::WorkerMessage, v1::ClientMessage>;

// A client's stream, as the episode uses it.
struct ClientLink {
  SessionStream* stream = nullptr;
  grpc::ServerContext* context = nullptr;
  Watchdog::Watch* watch = nullptr;
};

class Leases {
 public:
  // A stream handed to an episode by Attach.
  class Handover {
   public:
    const ClientLink& link() const { return link_; }
    // The episode is done with the stream; its Attach returns `status`.
    void Release(grpc::Status status);

   private:
    friend class Leases;
    Handover(Leases& leases, ClientLink link) : leases_(leases), link_(link) {}
    Leases& leases_;
    const ClientLink link_;
    bool released_ = false;
    grpc::Status status_;
  };

  // Episode thread: session `id` may be attached to from now until
  // Unregister; `context` is its first client's stream.
  void Register(const std::string& id, grpc::ServerContext* context);
  void Unregister(const std::string& id);

  // Episode thread: the stream that attached since the last call, or null.
  std::shared_ptr<Handover> TakeAttached(const std::string& id);
  // Episode thread: its client is gone. Waits up to `lease_s` for a stream
  // to attach; null when the lease lapsed (counted), the session was
  // released, or the worker stops.
  std::shared_ptr<Handover> Await(const std::string& id, double lease_s);

  // Attaching handler: NOT_FOUND when session `id` is not registered.
  // Otherwise runs `greet` on the new stream (false: its client left), then
  // hands the stream over and blocks until the episode releases it, and
  // returns the status it was released with.
  grpc::Status Attach(const std::string& id, const std::string& worker, ClientLink link,
                      const std::function<bool()>& greet);

  // Ends session `id`'s wait for a client, now or when it starts, and cuts
  // off its current stream. False when no such session is registered.
  bool Release(const std::string& id);

  // Every Await returns null and every Attach is refused from now on.
  void Shutdown();

  int detached() const;    // episodes waiting in Await
  int64_t lapsed() const;  // Awaits that ended with no stream

 private:
  struct Entry {
    grpc::ServerContext* current = nullptr;  // the stream the episode uses now
    std::shared_ptr<Handover> attached;      // waiting to be taken
    bool waiting = false;
    bool released = false;
  };

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Entry> sessions_ ABSL_GUARDED_BY(mu_);
  int64_t lapsed_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace loom::sandbox
