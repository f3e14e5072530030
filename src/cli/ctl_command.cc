// `loom ctl RUN_DIR set KEY=VALUE... [--reason TEXT]`, `loom ctl RUN_DIR
// pause|unpause [--reason TEXT]` and `loom ctl RUN_DIR show`: change a
// running trainer's live config, hold it still, and look at it
// (docs/operations.md, live changes). Exit codes: 0 accepted or shown, 1 no
// trainer answered, 2 the change was refused (the run goes on as it was).

#include <iostream>
#include <memory>

#include "cli/command.h"
#include "loom/train/control.h"

namespace loom::cli {
namespace {

struct CtlOptions {
  std::string run_dir;
  std::vector<std::string> assignments;
  std::string reason;
  double timeout_s = 120;
  bool json = false;
};

std::string ChangeText(const nlohmann::json& change) {
  const std::string from = change.value("from", ""), to = change.value("to", "");
  return change.value("key", "") + ": " + (from.empty() ? "(new)" : from) + " -> " +
         (to.empty() ? "(removed)" : to);
}

int RunSet(const CtlOptions& options) {
  auto reply = train::SendControlRequest(options.run_dir,
                                         {{"set", options.assignments}, {"reason", options.reason}},
                                         options.timeout_s);
  if (!reply.ok()) {
    std::cerr << "loom ctl: " << reply.status().message() << "\n";
    return kExitFailure;
  }
  const bool accepted = reply->value("accepted", false);
  if (options.json) {
    std::cout << reply->dump() << "\n";
    return accepted ? kExitOk : kExitUsage;
  }
  if (!accepted) {
    std::cerr << "refused; the run goes on at config version "
              << reply->value("config_version", int64_t{-1}) << ":\n";
    for (const auto& error : reply->value("errors", nlohmann::json::array())) {
      std::cerr << "  " << error.get<std::string>() << "\n";
    }
    return kExitUsage;
  }
  std::cout << "config version " << reply->value("config_version", int64_t{-1}) << ":\n";
  for (const auto& change : reply->value("changes", nlohmann::json::array())) {
    std::cout << "  " << ChangeText(change) << "\n";
  }
  return kExitOk;
}

int RunPause(const CtlOptions& options, bool pause) {
  auto reply = train::SendControlRequest(
      options.run_dir, {{"pause", pause}, {"reason", options.reason}}, options.timeout_s);
  if (!reply.ok()) {
    std::cerr << "loom ctl: " << reply.status().message() << "\n";
    return kExitFailure;
  }
  if (options.json) {
    std::cout << reply->dump() << "\n";
  } else {
    std::cout << (pause ? "paused" : "running") << " at config version "
              << reply->value("config_version", int64_t{-1}) << "\n";
  }
  return reply->value("accepted", false) ? kExitOk : kExitUsage;
}

int RunShow(const CtlOptions& options) {
  auto live = train::ReadLiveConfig(options.run_dir);
  if (!live.ok()) {
    std::cerr << "loom ctl: " << live.status().message() << "\n";
    return kExitFailure;
  }
  if (options.json) {
    std::cout << live->dump() << "\n";
    return kExitOk;
  }
  const nlohmann::json& current = (*live)["current"];
  std::cout << options.run_dir << ": config version " << current.value("config_version", 0)
            << (current.value("running", false)
                    ? " (trainer running, pid " + std::to_string(current.value("pid", 0)) +
                          (current.value("paused", false) ? ", paused)" : ")")
                    : " (no trainer running)")
            << "\nlive values:\n";
  for (const auto& assignment : current.value("assignments", nlohmann::json::array())) {
    std::cout << "  " << assignment.get<std::string>() << "\n";
  }
  std::cout << "teacher slots:\n";
  int slot = 0;
  for (const auto& teacher : current.value("teacher_slots", nlohmann::json::array())) {
    std::cout << "  " << slot++ << " " << teacher.value("name", "") << " "
              << teacher.value("path", "") << "\n";
  }
  std::cout << "history:\n";
  for (const auto& entry : (*live)["history"]) {
    std::cout << "  v" << entry.value("config_version", 0) << " " << entry.value("time", "");
    const std::string event = entry.value("event", "");
    if (event == "resumed") {
      std::cout << " resumed here; later versions were lost with their checkpoint\n";
      continue;
    }
    if (!event.empty()) std::cout << " " << event;
    std::cout << " at policy version " << entry.value("policy_version", 0);
    const std::string reason = entry.value("reason", "");
    if (!reason.empty()) std::cout << " (" << reason << ")";
    std::cout << "\n";
    for (const auto& change : entry.value("changes", nlohmann::json::array())) {
      std::cout << "      " << ChangeText(change) << "\n";
    }
  }
  return kExitOk;
}

void SetupCtl(CLI::App& app, Context& context) {
  auto options = std::make_shared<CtlOptions>();
  CLI::App* cmd =
      app.add_subcommand("ctl", "Change a running trainer's live config, pause it, or show it");
  cmd->add_option("run_dir", options->run_dir, "The run directory of `loom train`")->required();
  cmd->require_subcommand(1);

  CLI::App* set = cmd->add_subcommand(
      "set",
      "Apply KEY=VALUE changes (--set syntax; +list=VALUE appends, ~key removes) as the "
      "next config version, and wait for the trainer's verdict");
  set->add_option("assignments", options->assignments, "KEY=VALUE, +LIST=VALUE or ~KEY")
      ->required();
  set->add_option("--reason", options->reason, "Why: kept in the run's live/history.jsonl");
  set->add_option("--timeout", options->timeout_s,
                  "Seconds to wait for the trainer to take the request (default 120)")
      ->check(CLI::PositiveNumber);
  set->add_flag("--json", options->json, "Print the trainer's reply as JSON");
  set->callback([options, &context] { context.exit_code = RunSet(*options); });

  for (const bool pause : {true, false}) {
    CLI::App* sub = cmd->add_subcommand(
        pause ? "pause" : "unpause",
        pause ? "Hold rollout and training still at the next boundary; requests are still "
                "answered, and a signal still checkpoints and stops the run"
              : "Let a paused run go on");
    sub->add_option("--reason", options->reason, "Why: kept in the run's live/history.jsonl");
    sub->add_option("--timeout", options->timeout_s,
                    "Seconds to wait for the trainer to take the request (default 120)")
        ->check(CLI::PositiveNumber);
    sub->add_flag("--json", options->json, "Print the trainer's reply as JSON");
    sub->callback([options, &context, pause] { context.exit_code = RunPause(*options, pause); });
  }

  CLI::App* show = cmd->add_subcommand("show", "Print the live config, its version and history");
  show->add_flag("--json", options->json, "Print {current, history} as JSON");
  show->callback([options, &context] { context.exit_code = RunShow(*options); });
}

}  // namespace

LOOM_REGISTER_COMMAND("ctl", SetupCtl);

}  // namespace loom::cli
