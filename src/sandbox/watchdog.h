#pragma once
// Ends sessions that hold a worker thread without using it: a client that
// goes quiet (no message for `idle_s` while the worker waits on it) or a
// session older than `max_session_s`, whatever deadline the client set.
// One thread checks every session twice a second and cancels the stream
// (grpc::ServerContext::TryCancel), which makes the handler's next Read
// fail and its sandbox go away.

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"

namespace loom::sandbox {

class Watchdog {
 public:
  Watchdog(double idle_s, double max_session_s);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Registration of one session for as long as it lives.
  class Watch {
   public:
    // `first_idle_s` > 0: the idle limit until the first Working(), for a
    // stream that has not yet said what it is for (it holds a thread).
    Watch(Watchdog& dog, grpc::ServerContext* context, double first_idle_s = 0);
    ~Watch();
    // The worker waits on the client from now (idle time counts) or works
    // for it (idle time does not count) until the next call.
    void Waiting();
    void Working();
    // Why the session was cancelled, "" if it was not.
    std::string cancelled() const;

   private:
    Watchdog& dog_;
    int64_t id_;
  };

 private:
  using Clock = std::chrono::steady_clock;
  struct Session {
    grpc::ServerContext* context;
    Clock::time_point started;
    Clock::time_point waiting_since;  // max() while working
    std::string cancelled;
    Clock::duration idle;  // the limit now
  };
  void Loop();

  const Clock::duration idle_, max_session_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int64_t, Session> sessions_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace loom::sandbox
