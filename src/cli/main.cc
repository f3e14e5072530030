// The `loom` binary: parses the command line and runs one subcommand.
// Module borders turn expected failures into Status; anything that still
// escapes as an exception is reported in one line, never as a stack trace.

#include <c10/util/Exception.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>

#include "cli/command.h"
#include "loom/config/logging.h"
#include "loom/config/run_section.h"
#include "loom/model/cpu_allocator.h"

namespace loom::cli {
namespace {

std::map<std::string, CommandSetup>& Registry() {
  static std::map<std::string, CommandSetup> registry;
  return registry;
}

}  // namespace

CommandRegistrar::CommandRegistrar(const char* name, CommandSetup setup) {
  Registry()[name] = setup;
}

CLI::App* GroupCommand(CLI::App& parent, const std::string& name, const std::string& description) {
  for (CLI::App* sub : parent.get_subcommands([](CLI::App*) { return true; })) {
    if (sub->get_name() == name) return sub;
  }
  CLI::App* group = parent.add_subcommand(name, description);
  group->require_subcommand(1);
  return group;
}

std::vector<std::pair<std::string, CommandSetup>> RegisteredCommands() {
  return {Registry().begin(), Registry().end()};
}

int Main(int argc, char** argv) {
  CLI::App app{
      "loom: asynchronous RL post-training for LLMs (SFT, GRPO, on-policy distillation) on "
      "LibTorch"};
  app.require_subcommand(1);
  app.fallthrough();
  Context context;
  app.add_option_function<std::string>(
         "--log-level",
         [&](const std::string& level) {
           context.log_level = level;
           context.log_level_given = true;
         },
         "Log verbosity: trace, debug, info, warn, error, off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  for (const auto& [name, setup] : RegisteredCommands()) setup(app, context);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }
  return context.exit_code;
}

// libgomp and OpenBLAS read their threading settings when they load, before
// main. By default both keep idle threads spinning (OpenMP at every barrier,
// OpenBLAS in a sched_yield loop after each GEMM); on 2 cores shared by the two
// pools, and by anything else running, that spin took 76% of an SFT step. So
// unless the user chose otherwise, re-execute once with both set to sleep when
// idle. If the re-exec fails, carry on with the defaults.
void PreferSleepingThreadPools(char** argv) {
  bool changed = false;
  for (const auto& [name, value] :
       {std::pair<const char*, const char*>{"OMP_WAIT_POLICY", "PASSIVE"},
        {"OPENBLAS_THREAD_TIMEOUT", "4"}}) {
    if (std::getenv(name) != nullptr) continue;
    ::setenv(name, value, 1);
    changed = true;
  }
  if (changed) ::execv("/proc/self/exe", argv);
}

}  // namespace loom::cli

int main(int argc, char** argv) {
  loom::cli::PreferSleepingThreadPools(argv);
  // Every command reuses large CPU tensor blocks; `loom train` sets the cap from run.cpu_cache_mib.
  loom::model::UseCachingCpuAllocator(loom::config::RunSection{}.cpu_cache_mib << 20);
  try {
    return loom::cli::Main(argc, argv);
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "loom: error: %s\n", e.what_without_backtrace());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom: error: %s\n", e.what());
  }
  return loom::cli::kExitFailure;
}
