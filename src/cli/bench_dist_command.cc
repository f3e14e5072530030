// `loom bench dist [--quick] [--steps N] [--dir D]`: 2 ranks × 1 thread
// against 1 rank × 1 thread on the same SFT work (loom/bench/dist_bench.h).
// JSON on the last line.

#include <memory>

#include "cli/bench_json.h"
#include "cli/self_binary.h"
#include "loom/bench/dist_bench.h"

namespace loom::cli {
namespace {

void SetupBenchDist(CLI::App& app, Context& context) {
  CLI::App* bench = GroupCommand(app, "bench", "Run benchmarks (JSON results)");
  auto options = std::make_shared<bench::DistBenchOptions>();
  options->dir = "runs/bench-dist";
  CLI::App* cmd = bench->add_subcommand(
      "dist", "2 ranks x 1 thread vs 1 rank x 1 thread on the same SFT work (samples/s)");
  cmd->add_flag("--quick", options->quick, "A smaller model and batch, 6 steps");
  cmd->add_option("--steps", options->steps,
                  "Optimizer steps per run (default 30; the first 3 are a warm-up)")
      ->check(CLI::Range(4, 100000));
  cmd->add_option("--batch", options->batch,
                  "Global batch in sequences, split between the ranks (default 256)")
      ->check(CLI::Range(2, 65536));
  cmd->add_option("--rounds", options->rounds,
                  "Rounds of the three runs; medians are reported (default 3)")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--dir", options->dir, "Scratch directory for the two runs")
      ->capture_default_str();
  cmd->callback([options, &context] {
    options->binary = SelfBinary();
    context.exit_code = RunJsonBench("dist", 0, [&] { return bench::RunDistBench(*options); });
  });
}

}  // namespace

LOOM_REGISTER_COMMAND("bench_dist", SetupBenchDist);

}  // namespace loom::cli
