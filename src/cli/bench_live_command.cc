// `loom bench live [--quick] [--tokenizer F] [--batch N] [--rounds R]`: the
// pause a live change costs the run loop, against one engine decode step.
// JSON on the last line.

#include <memory>

#include "cli/bench_json.h"
#include "loom/bench/live_bench.h"

namespace loom::cli {
namespace {

struct LiveCommandOptions {
  int threads = 0;
  bench::LiveBenchOptions bench_options;
};

void SetupBenchLive(CLI::App& app, Context& context) {
  CLI::App* bench = GroupCommand(app, "bench", "Run benchmarks (JSON results)");
  auto options = std::make_shared<LiveCommandOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "live", "What a live change (loom ctl set) pauses rollout for, in engine steps");
  cmd->add_flag("--quick", options->bench_options.quick, "A small student, few rounds");
  cmd->add_option("--tokenizer", options->bench_options.tokenizer,
                  "tokenizer.json of student and teachers (default: the tiny one)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--batch", options->bench_options.batch, "Samples in the timed decode step")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--rounds", options->bench_options.rounds, "Timings per kind (median)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--threads", options->threads, "Intra-op threads (default: LibTorch's)");
  cmd->callback([options, &context] {
    context.exit_code = RunJsonBench("live", options->threads,
                                     [&] { return bench::RunLiveBench(options->bench_options); });
  });
}

}  // namespace

LOOM_REGISTER_COMMAND("bench_live", SetupBenchLive);

}  // namespace loom::cli
