#pragma once
// How subcommands join the `loom` binary: each src/cli/*_command.cc defines a
// setup function and registers it with LOOM_REGISTER_COMMAND. main() adds
// every registered command to the CLI11 app in name order, parses, and
// returns the exit code the chosen command's callback stored.
//
// Exit codes shared by all commands: 0 success, 1 runtime failure,
// 2 bad arguments or bad config; commands document any others.

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/status/status.h"

namespace loom::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// The exit code of a command's final status: 0, 2 for INVALID_ARGUMENT (the
// caller's input is wrong), 1 for anything else.
inline int StatusExitCode(const absl::Status& status) {
  if (status.ok()) return kExitOk;
  return status.code() == absl::StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
}

// Shared state of one invocation.
struct Context {
  int exit_code = kExitOk;
  std::string log_level = "info";
  bool log_level_given = false;  // --log-level on the command line wins over the config
};

using CommandSetup = void (*)(CLI::App& app, Context& context);

struct CommandRegistrar {
  CommandRegistrar(const char* name, CommandSetup setup);
};

// Returns the subcommand `name` of `parent`, adding it (with `description`
// and require_subcommand) if it is not there yet. Commands that group others,
// like `bench`, are shared this way: each *_command.cc adds its own child.
CLI::App* GroupCommand(CLI::App& parent, const std::string& name, const std::string& description);

// Registered commands, sorted by name.
std::vector<std::pair<std::string, CommandSetup>> RegisteredCommands();

}  // namespace loom::cli

#define LOOM_REGISTER_COMMAND(name, setup) \
  static const ::loom::cli::CommandRegistrar loom_registrar_##setup(name, setup)
