// `loom launch --nproc N [--master-port P] [--grace-s S] -- train --config F ...`:
// runs N local ranks of a loom command, torchrun-style (loom/dist/launch.h).
// Exit status: 0 when every rank exited 0, else the first failing rank's.

#include <iostream>
#include <memory>

#include "cli/command.h"
#include "cli/self_binary.h"
#include "loom/dist/launch.h"

namespace loom::cli {
namespace {

int RunLaunch(dist::LaunchOptions options) {
  options.binary = SelfBinary();
  if (options.binary.empty()) {
    std::cerr << "loom launch: cannot find its own binary (/proc/self/exe)\n";
    return kExitFailure;
  }
  auto code = dist::LaunchLocal(options);
  if (!code.ok()) {
    std::cerr << "loom launch: " << code.status().message() << "\n";
    return StatusExitCode(code.status());
  }
  return *code;
}

void SetupLaunch(CLI::App& app, Context& context) {
  auto options = std::make_shared<dist::LaunchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "launch", "Run N local ranks of a loom command (loom launch --nproc 2 -- train --config F)");
  cmd->add_option("--nproc", options->nproc, "Ranks to start on this machine")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--master-port", options->master_port,
                  "Rendezvous port on 127.0.0.1 (default: a free one)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--grace-s", options->grace_s,
                  "After a rank fails, seconds the others get to exit before they are killed")
      ->check(CLI::Range(0.0, 86400.0));
  cmd->add_option("command", options->args, "The loom command every rank runs, after --")
      ->required();
  cmd->callback([options, &context] { context.exit_code = RunLaunch(*options); });
}

}  // namespace

LOOM_REGISTER_COMMAND("launch", SetupLaunch);

}  // namespace loom::cli
