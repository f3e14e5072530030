#pragma once
// Live changes to a running `loom train`, through files in its run
// directory — no open port:
//
//   RUN_DIR/ctl/pid               the running trainer's pid
//   RUN_DIR/ctl/requests/ID.json  {"set": ["KEY=VALUE", ...], "reason": "..."} or
//                                 {"pause": true|false, "reason": "..."}, written by
//                                 `loom ctl` under a temporary name and renamed
//   RUN_DIR/ctl/replies/ID.json   the verdict: {"accepted": true, "config_version",
//                                 "changes", "paused"} or {"accepted": false, "errors"}
//   RUN_DIR/live/history.jsonl    every accepted change: version, time, reason, the
//                                 assignments, the resolved diff, apply_seconds; and
//                                 every pause and unpause (an "event" line)
//   RUN_DIR/live/current.json     the live version and its values, and whether paused
//
// The trainer claims a request by renaming it (ID.json.claimed) before it
// reads it, so `loom ctl` can still withdraw a request nobody took (its
// unlink succeeds) and otherwise waits for the reply.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "loom/config/live.h"
#include "loom/metrics/metrics_writer.h"
#include "loom/train/live_config.h"
#include "loom/train/run_dir.h"

namespace loom::train {

// The trainer's side. Run loop thread only.
class ControlInbox {
 public:
  // Borrows the run's directory, its live config (which requests change) and
  // its metrics (which record each change).
  ControlInbox(const RunDir& run_dir, LiveConfig& live, metrics::MetricsWriter& metrics)
      : run_dir_(run_dir), live_(live), metrics_(metrics) {}
  ~ControlInbox();

  // Creates ctl/ and live/, writes ctl/pid and live/current.json, and puts
  // config_version on every metrics line.
  absl::Status Start();

  // Handles every pending request, looking at most every 0.2 s; called where
  // the run may change course (between engine steps, between SFT steps).
  // While a `loom ctl pause` holds, it keeps answering requests and returns
  // only once unpaused or a preemption signal arrived: rollout and training
  // stand still meanwhile. True when the config version changed. A malformed
  // request is answered with an error; file trouble is logged — neither
  // stops the run. A resumed run starts unpaused. `policy_version`: where
  // training stands, for the history.
  bool Poll(int64_t policy_version);

 private:
  void HandlePending();
  void Handle(const std::string& id, const std::string& claimed_path);
  // Sets the pause, recording a change of it in the history.
  void Pause(bool paused, const std::string& reason, nlohmann::json& reply);
  // Records an applied change (`apply_seconds`: the checks and the switch,
  // the time rollout stood still for it) and fills the reply.
  void Accepted(const std::vector<std::string>& assignments, const std::string& reason,
                const std::vector<config::LiveChange>& changes, double apply_seconds,
                nlohmann::json& reply);
  // Appends `record` to live/history.jsonl; trouble is logged.
  void AppendHistory(const nlohmann::json& record) const;
  void WriteCurrent() const;

  const RunDir& run_dir_;
  LiveConfig& live_;
  metrics::MetricsWriter& metrics_;
  int64_t policy_version_ = 0;  // as of the last Poll
  std::string pid_path_;
  double last_poll_ = -1;
  bool paused_ = false;
};

// `loom ctl`'s side: sends a request `body` ({"set": [...]} or {"pause":
// bool}, with its "reason") to the trainer of `run_dir` and waits up to `timeout_s`
// for its verdict (the reply, accepted or not). FAILED_PRECONDITION when no
// trainer is running there, DEADLINE_EXCEEDED when none took the request in
// time (it is withdrawn, nothing changed).
absl::StatusOr<nlohmann::json> SendControlRequest(const std::string& run_dir,
                                                  const nlohmann::json& body, double timeout_s);

// The live config of `run_dir` as `loom ctl show` prints it: current.json
// and the history. NOT_FOUND when the run never wrote one.
absl::StatusOr<nlohmann::json> ReadLiveConfig(const std::string& run_dir);

}  // namespace loom::train
