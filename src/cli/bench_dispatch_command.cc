// `loom bench dispatch [--quick] [--json]`: sample-level dispatch vs sync on a long tail.

#include <ATen/Parallel.h>

#include <iostream>
#include <memory>

#include "cli/command.h"
#include "cli/threads.h"
#include "loom/bench/dispatch_bench.h"

namespace loom::cli {
namespace {

struct DispatchCommandOptions {
  bool quick = false;
  bool json = false;
  int threads = 0;
  bench::DispatchBenchOptions bench_options;
};

int RunBench(DispatchCommandOptions& options) {
  if (options.threads > 0) SetComputeThreads(options.threads);
  if (options.quick) options.bench_options.train_steps = 4;
  options.bench_options.quick = options.quick;
  auto result = bench::RunDispatchBench(options.bench_options);
  if (!result.ok()) {
    std::cerr << "bench dispatch: " << result.status().message() << "\n";
    return kExitFailure;
  }
  if (!options.json) {
    for (const auto& [mode, r] : (*result)["modes"].items()) {
      std::cout << mode << ": " << r["samples_per_s"].get<double>() << " samples/s, in-flight cv "
                << r["inflight_cv"].get<double>() << "\n";
    }
  }
  std::cout << result->dump() << "\n";
  return kExitOk;
}

void SetupBenchDispatch(CLI::App& app, Context& context) {
  CLI::App* bench = GroupCommand(app, "bench", "Run benchmarks (JSON results)");
  auto options = std::make_shared<DispatchCommandOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "dispatch", "Dispatch policies (sync, batch, prompt, sample) on a long-tail workload");
  cmd->add_flag("--quick", options->quick, "Fewer training steps (ends within a minute)");
  cmd->add_flag("--json", options->json, "Print only the JSON result line");
  cmd->add_option("--threads", options->threads, "Intra-op threads (default: LibTorch's)");
  cmd->add_option("--train-steps", options->bench_options.train_steps, "Training steps per mode");
  cmd->add_option("--max-inflight", options->bench_options.max_inflight, "Samples in flight");
  cmd->add_option("--batch-samples", options->bench_options.batch_samples,
                  "Samples per training step");
  cmd->add_option("--max-staleness", options->bench_options.max_staleness,
                  "async.max_staleness (lag bound)");
  cmd->add_option("--max-length", options->bench_options.max_length, "Longest response (tail cap)");
  cmd->callback([options, &context] { context.exit_code = RunBench(*options); });
}

}  // namespace

LOOM_REGISTER_COMMAND("bench_dispatch", SetupBenchDispatch);

}  // namespace loom::cli
