#include "loom/train/preemption.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

namespace loom::train {
namespace {

std::atomic<int> g_signal{0};
std::atomic<bool> g_watchdog_started{false};
constexpr char kPreemptedPrefix[] = "preempted; checkpoint written to ";

static_assert(std::atomic<int>::is_always_lock_free, "signal handler needs a lock-free flag");

void OnPreemptSignal(int signal_number) {
  int expected = 0;
  g_signal.compare_exchange_strong(expected, signal_number);  // the first one wins
}

}  // namespace

void InstallPreemptionHandlers() {
  struct sigaction action;
  std::memset(&action, 0, sizeof action);
  action.sa_handler = OnPreemptSignal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);
}

bool PreemptionRequested() { return g_signal.load() != 0; }

int PreemptionSignal() { return g_signal.load(); }

void StartPreemptDeadline(double deadline_s) {
  if (g_watchdog_started.exchange(true)) return;
  std::thread([deadline_s] {
    // Polling keeps the handler async-signal-safe (it only stores the flag).
    while (g_signal.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::this_thread::sleep_for(std::chrono::duration<double>(deadline_s));
    spdlog::error(
        "preemption deadline of {} s passed before the checkpoint was complete; "
        "exiting (resume will use the previous checkpoint)",
        deadline_s);
    spdlog::default_logger()->flush();
    ::_exit(1);
  }).detach();
}

absl::Status PreemptedStatus(const std::string& checkpoint_dir) {
  return absl::CancelledError(kPreemptedPrefix + checkpoint_dir);
}

bool IsPreempted(const absl::Status& status) {
  return absl::IsCancelled(status) &&
         status.message().substr(0, sizeof kPreemptedPrefix - 1) == kPreemptedPrefix;
}

void ResetPreemptionForTesting() { g_signal.store(0); }

}  // namespace loom::train
