// `loom bench rollout [--json] [--quick] [--prefix] [--model DIR]`: rollout
// engine throughput, interruption latency, resume vs re-prefill, KV
// efficiency; or, with --prefix, prefix sharing without and with it side by
// side. The JSON result is the last line of stdout.

#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "loom/bench/rollout_bench.h"

namespace loom::cli {
namespace {

struct BenchRolloutFlags {
  bool json = false;
  bool quick = false;
  bool prefix = false;
  std::string model;
};

int RunBenchRollout(const BenchRolloutFlags& flags) {
  bench::RolloutBenchOptions options =
      flags.quick ? bench::QuickRolloutBench() : bench::RolloutBenchOptions{};
  options.model_dir = flags.model;
  options.prefix = flags.prefix;
  auto result = bench::RunRolloutBench(options);
  if (!result.ok()) {
    std::cerr << "bench rollout: " << result.status().message() << "\n";
    return result.status().code() == absl::StatusCode::kInvalidArgument ||
                   result.status().code() == absl::StatusCode::kNotFound
               ? kExitUsage
               : kExitFailure;
  }
  if (!flags.json) std::cout << nlohmann::json::parse(*result).dump(2) << "\n";
  std::cout << *result << "\n";
  return kExitOk;
}

void SetupBenchRollout(CLI::App& app, Context& context) {
  CLI::App* bench = GroupCommand(app, "bench", "Run benchmarks (JSON results)");
  auto flags = std::make_shared<BenchRolloutFlags>();
  CLI::App* cmd = bench->add_subcommand(
      "rollout", "Rollout engine: decode throughput, interrupt latency, resume vs re-prefill");
  cmd->add_flag("--json", flags->json, "Print only the JSON result line");
  cmd->add_flag("--quick", flags->quick, "Smaller runs (under a minute on 2 cores)");
  cmd->add_flag("--prefix", flags->prefix,
                "Prefix sharing instead: a GRPO group of 16 on one 2,048-token prompt and 64 "
                "agent episodes on one 4,096-token system prompt, each without and with sharing");
  cmd->add_option("--model", flags->model, "Model directory (default: a small random llama)");
  cmd->callback([flags, &context] { context.exit_code = RunBenchRollout(*flags); });
}

}  // namespace

LOOM_REGISTER_COMMAND("bench-rollout", SetupBenchRollout);

}  // namespace loom::cli
