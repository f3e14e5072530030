#include "loom/train/control.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <optional>
#include <thread>

#include <spdlog/spdlog.h>

#include "loom/config/files.h"
#include "loom/metrics/metrics_writer.h"
#include "loom/metrics/progress.h"
#include "loom/train/live_config.h"
#include "loom/train/preemption.h"

namespace loom::train {
namespace fs = std::filesystem;
namespace {

constexpr double kPollInterval = 0.2;  // seconds between looks at ctl/requests

std::string CtlDir(const std::string& run_dir) { return run_dir + "/ctl"; }
std::string RequestsDir(const std::string& run_dir) { return run_dir + "/ctl/requests"; }
std::string RepliesDir(const std::string& run_dir) { return run_dir + "/ctl/replies"; }
std::string LiveDir(const std::string& run_dir) { return run_dir + "/live"; }
std::string HistoryPath(const std::string& run_dir) { return run_dir + "/live/history.jsonl"; }
std::string CurrentPath(const std::string& run_dir) { return run_dir + "/live/current.json"; }

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

bool Alive(pid_t pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM); }

// A request as `loom ctl` writes it: a change of the live config, or a pause.
struct Request {
  std::vector<std::string> set;
  std::optional<bool> pause;
  std::string reason;
};

absl::StatusOr<Request> ParseRequest(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError("not a JSON object");
  Request request;
  const auto assignments = j.find("set");
  const auto pause = j.find("pause");
  if ((assignments == j.end()) == (pause == j.end())) {
    return absl::InvalidArgumentError(
        "expected either set (a list of KEY=VALUE strings) or pause (true or false)");
  }
  if (pause != j.end()) {
    if (!pause->is_boolean()) return absl::InvalidArgumentError("pause: expected true or false");
    request.pause = pause->get<bool>();
  } else {
    if (!assignments->is_array() || assignments->empty()) {
      return absl::InvalidArgumentError("set: expected a non-empty list of KEY=VALUE strings");
    }
    for (const auto& a : *assignments) {
      if (!a.is_string()) {
        return absl::InvalidArgumentError("set: expected a non-empty list of KEY=VALUE strings");
      }
      request.set.push_back(a.get<std::string>());
    }
  }
  if (const auto r = j.find("reason"); r != j.end()) {
    if (!r->is_string()) return absl::InvalidArgumentError("reason: expected a string");
    request.reason = r->get<std::string>();
  }
  return request;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find('\n', start), text.size());
    if (end > start) lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

absl::StatusOr<pid_t> TrainerPid(const std::string& run_dir) {
  auto text = ReadFile(CtlDir(run_dir) + "/pid");
  if (!text.ok()) {
    return absl::FailedPreconditionError("no trainer is running in " + run_dir +
                                         " (no ctl/pid: it never started, or it ended)");
  }
  const pid_t pid = static_cast<pid_t>(std::atol(text->c_str()));
  if (!Alive(pid)) {
    return absl::FailedPreconditionError("no trainer is running in " + run_dir +
                                         " (ctl/pid: " + std::to_string(pid) + " is gone)");
  }
  return pid;
}

}  // namespace

ControlInbox::~ControlInbox() {
  if (pid_path_.empty()) return;
  auto text = ReadFile(pid_path_);
  if (text.ok() && std::atol(text->c_str()) == ::getpid()) ::unlink(pid_path_.c_str());
}

absl::Status ControlInbox::Start() {
  const std::string& run = run_dir_.path();
  std::error_code ec;
  for (const std::string& dir : {RequestsDir(run), RepliesDir(run), LiveDir(run)}) {
    fs::create_directories(dir, ec);
    if (ec) return absl::UnavailableError("cannot create " + dir + ": " + ec.message());
  }
  // Claimed by a trainer that died before answering: nobody waits for them now.
  for (const auto& entry : fs::directory_iterator(RequestsDir(run), ec)) {
    if (entry.path().extension() == ".claimed") fs::remove(entry.path(), ec);
  }
  // Versions recorded after the checkpoint this run resumed from are not in effect.
  const int64_t version = live_.version();
  if (auto history = metrics::ReadMetrics(HistoryPath(run)); history.ok() && !history->empty()) {
    const nlohmann::json& last = history->back();
    const int64_t recorded = last.value("config_version", int64_t{0});
    if (recorded > version) {
      spdlog::warn(
          "live config: resumed at version {}; versions {}..{} in {} came after that checkpoint "
          "and are not in effect (apply them again with `loom ctl`)",
          version, version + 1, recorded, HistoryPath(run));
      auto writer = metrics::MetricsWriter::Open(HistoryPath(run));
      if (!writer.ok()) return writer.status();
      if (absl::Status s = writer->Write({{"config_version", version},
                                          {"time", UtcNow()},
                                          {"event", "resumed"},
                                          {"dropped_versions", {version + 1, recorded}}});
          !s.ok()) {
        return s;
      }
    }
  }
  pid_path_ = CtlDir(run) + "/pid";
  if (absl::Status s = WriteFileAtomic(pid_path_, std::to_string(::getpid()) + "\n"); !s.ok()) {
    return s;
  }
  metrics_.SetCommon("config_version", version);
  WriteCurrent();
  return absl::OkStatus();
}

bool ControlInbox::Poll(int64_t policy_version) {
  policy_version_ = policy_version;
  const int64_t before = live_.version();
  HandlePending();
  while (paused_ && !PreemptionRequested()) {
    std::this_thread::sleep_for(std::chrono::duration<double>(kPollInterval));
    HandlePending();
  }
  return live_.version() != before;
}

void ControlInbox::HandlePending() {
  const double now = metrics::ProgressLine::SteadySeconds();
  if (last_poll_ >= 0 && now - last_poll_ < kPollInterval) return;
  last_poll_ = now;
  std::error_code ec;
  std::vector<fs::path> requests;
  for (const auto& entry : fs::directory_iterator(RequestsDir(run_dir_.path()), ec)) {
    if (entry.path().extension() == ".json") requests.push_back(entry.path());
  }
  std::sort(requests.begin(), requests.end());  // ids start with the time they were made
  for (const fs::path& request : requests) {
    const std::string claimed = request.string() + ".claimed";
    if (::rename(request.c_str(), claimed.c_str()) != 0) continue;  // withdrawn meanwhile
    Handle(request.stem().string(), claimed);
    ::unlink(claimed.c_str());
  }
}

void ControlInbox::Handle(const std::string& id, const std::string& claimed_path) {
  const double start = metrics::ProgressLine::SteadySeconds();
  nlohmann::json reply = {{"id", id}, {"accepted", false}};
  auto text = ReadFile(claimed_path);
  auto request = text.ok() ? ParseRequest(*text) : absl::StatusOr<Request>(text.status());
  if (!request.ok()) {
    reply["errors"] = {"request " + id + ": " + std::string(request.status().message())};
  } else if (request->pause) {
    Pause(*request->pause, request->reason, reply);
  } else if (auto changes = live_.Apply(request->set); !changes.ok()) {
    reply["errors"] = Lines(std::string(changes.status().message()));
    reply["config_version"] = live_.version();
    spdlog::warn("live change refused, config stays at version {}: {}", live_.version(),
                 std::string(changes.status().message()));
  } else {
    Accepted(request->set, request->reason, *changes,
             metrics::ProgressLine::SteadySeconds() - start, reply);
  }
  const std::string path = RepliesDir(run_dir_.path()) + "/" + id + ".json";
  if (absl::Status s = WriteFileAtomic(path, reply.dump(2) + "\n"); !s.ok()) {
    spdlog::warn("live change {}: cannot write its reply: {}", id, std::string(s.message()));
  }
}

void ControlInbox::Pause(bool paused, const std::string& reason, nlohmann::json& reply) {
  const int64_t version = live_.version();
  reply["accepted"] = true;
  reply["config_version"] = version;
  reply["paused"] = paused;
  if (paused == paused_) return;
  paused_ = paused;
  if (paused) {
    spdlog::info(
        "paused at policy version {}{}: rollout and training stand still until `loom ctl {} "
        "unpause` (or a signal to stop)",
        policy_version_, reason.empty() ? "" : " (reason: " + reason + ")", run_dir_.path());
  } else {
    spdlog::info("unpaused at policy version {}{}", policy_version_,
                 reason.empty() ? "" : " (reason: " + reason + ")");
  }
  const nlohmann::json record = {{"config_version", version},
                                 {"time", UtcNow()},
                                 {"event", paused ? "paused" : "unpaused"},
                                 {"reason", reason},
                                 {"policy_version", policy_version_}};
  AppendHistory(record);
  WriteCurrent();
}

void ControlInbox::Accepted(const std::vector<std::string>& assignments, const std::string& reason,
                            const std::vector<config::LiveChange>& changes, double apply_seconds,
                            nlohmann::json& reply) {
  const int64_t version = live_.version();
  nlohmann::json diff = nlohmann::json::array();
  std::string summary;
  for (const config::LiveChange& change : changes) {
    diff.push_back({{"key", change.key}, {"from", change.from}, {"to", change.to}});
    summary += (summary.empty() ? "" : ", ") + change.key + " " +
               (change.from.empty() ? "(new)" : change.from) + " -> " +
               (change.to.empty() ? "(removed)" : change.to);
  }
  spdlog::info("config version {}: {}{}", version, summary,
               reason.empty() ? "" : " (reason: " + reason + ")");
  const nlohmann::json record = {{"config_version", version},
                                 {"time", UtcNow()},
                                 {"reason", reason},
                                 {"set", assignments},
                                 {"changes", diff},
                                 {"policy_version", policy_version_},
                                 {"apply_seconds", apply_seconds}};
  AppendHistory(record);
  WriteCurrent();
  metrics_.SetCommon("config_version", version);
  if (absl::Status s = metrics_.Write({{"event", "config_change"},
                                       {"reason", reason},
                                       {"changes", diff},
                                       {"apply_seconds", apply_seconds}});
      !s.ok()) {
    spdlog::warn("{}", std::string(s.message()));
  }
  reply["accepted"] = true;
  reply["config_version"] = version;
  reply["changes"] = diff;
}

void ControlInbox::AppendHistory(const nlohmann::json& record) const {
  auto history = metrics::MetricsWriter::Open(HistoryPath(run_dir_.path()));
  absl::Status written = history.ok() ? history->Write(record) : history.status();
  if (!written.ok()) {
    spdlog::warn("live config: cannot record {} in the history: {}", record.dump(),
                 std::string(written.message()));
  }
}

void ControlInbox::WriteCurrent() const {
  nlohmann::json current = live_.State();
  current["config_version"] = live_.version();
  current["time"] = UtcNow();
  current["pid"] = ::getpid();
  current["paused"] = paused_;
  const std::string path = CurrentPath(run_dir_.path());
  if (absl::Status s = WriteFileAtomic(path, current.dump(2) + "\n"); !s.ok()) {
    spdlog::warn("live config: {}", std::string(s.message()));
  }
}

absl::StatusOr<nlohmann::json> SendControlRequest(const std::string& run_dir,
                                                  const nlohmann::json& body, double timeout_s) {
  if (!fs::exists(run_dir + "/config.yaml")) {
    return absl::NotFoundError(run_dir + " is not a run directory (no config.yaml)");
  }
  auto pid = TrainerPid(run_dir);
  if (!pid.ok()) return pid.status();
  const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
  const std::string id =
      std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(since_epoch).count()) +
      "-" + std::to_string(::getpid());
  const std::string request = RequestsDir(run_dir) + "/" + id + ".json";
  const std::string reply_path = RepliesDir(run_dir) + "/" + id + ".json";
  if (absl::Status s = WriteFileAtomic(request, body.dump() + "\n"); !s.ok()) {
    return s;
  }
  using Clock = std::chrono::steady_clock;
  auto wait_for_reply = [&](Clock::time_point deadline) -> std::optional<nlohmann::json> {
    while (Clock::now() < deadline) {
      if (auto text = ReadFile(reply_path); text.ok()) {
        ::unlink(reply_path.c_str());
        nlohmann::json reply = nlohmann::json::parse(*text, nullptr, false);
        if (!reply.is_discarded()) return reply;
      }
      if (!Alive(*pid)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return std::nullopt;
  };
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  if (auto reply = wait_for_reply(Clock::now() + timeout)) return *reply;
  if (::unlink(request.c_str()) == 0) {
    return Alive(*pid) ? absl::DeadlineExceededError(
                             "the trainer (pid " + std::to_string(*pid) + ") did not take the " +
                             "request within " + std::to_string(static_cast<int>(timeout_s)) +
                             " s (it picks requests up between steps); it is withdrawn, nothing "
                             "changed")
                       : absl::FailedPreconditionError(
                             "the trainer (pid " + std::to_string(*pid) +
                             ") exited before taking the request; nothing changed");
  }
  // Taken: the verdict is on its way.
  if (auto reply = wait_for_reply(Clock::now() + std::chrono::seconds(30))) return *reply;
  return absl::DeadlineExceededError("the trainer took the request but gave no verdict; see " +
                                     HistoryPath(run_dir) + " and its log");
}

absl::StatusOr<nlohmann::json> ReadLiveConfig(const std::string& run_dir) {
  auto text = ReadFile(CurrentPath(run_dir));
  if (!text.ok()) {
    return absl::NotFoundError(run_dir + " has no live config (" + CurrentPath(run_dir) +
                               "): no trainer has run there yet");
  }
  nlohmann::json current = nlohmann::json::parse(*text, nullptr, false);
  if (current.is_discarded() || !current.is_object()) {
    return absl::DataLossError(CurrentPath(run_dir) + ": not a JSON object");
  }
  nlohmann::json history = nlohmann::json::array();
  if (fs::exists(HistoryPath(run_dir))) {
    auto lines = metrics::ReadMetrics(HistoryPath(run_dir));
    if (!lines.ok()) return lines.status();
    for (nlohmann::json& line : *lines) history.push_back(std::move(line));
  }
  current["running"] = TrainerPid(run_dir).ok();
  // A pause holds one trainer process: the next one starts unpaused.
  current["paused"] = current["running"].get<bool>() && current.value("paused", false);
  return nlohmann::json{{"current", current}, {"history", history}};
}

}  // namespace loom::train
