// `loom config check FILE [--set k=v]...` and `loom config docs`.

#include <cstdio>
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "loom/config/run_config.h"

namespace loom::cli {
namespace {

struct CheckOptions {
  std::string file;
  std::vector<std::string> overrides;
};

int RunCheck(const CheckOptions& options) {
  auto config = config::LoadRunConfig(options.file, options.overrides);
  if (!config.ok()) {
    std::cerr << config.status().message() << "\n";
    return kExitUsage;
  }
  std::cout << config::ResolvedYaml(*config);
  return kExitOk;
}

void SetupConfig(CLI::App& app, Context& context) {
  CLI::App* cmd = app.add_subcommand("config", "Validate configs and print their reference");
  cmd->require_subcommand(1);

  auto options = std::make_shared<CheckOptions>();
  CLI::App* check = cmd->add_subcommand(
      "check", "Validate a config and print it fully resolved (every default filled in)");
  check->add_option("file", options->file, "YAML config file")->required();
  check->add_option("--set", options->overrides, "Override a key: a.b.c=value (repeatable)");
  check->callback([options, &context] { context.exit_code = RunCheck(*options); });

  CLI::App* docs = cmd->add_subcommand("docs", "Print the config reference (docs/config.md)");
  docs->callback([&context] {
    std::cout << config::ConfigReferenceMarkdown();
    context.exit_code = kExitOk;
  });
}

}  // namespace

LOOM_REGISTER_COMMAND("config", SetupConfig);

}  // namespace loom::cli
