// `loom train --config F [--set k=v]... [--run-dir DIR] [--resume auto|PATH]`: runs the stages a
// config lists; SIGTERM/SIGUSR1 checkpoint and exit 0 (docs/operations.md).

#include <ATen/Parallel.h>
#include <spdlog/spdlog.h>

#include <iostream>
#include <memory>

#include "cli/command.h"
#include "cli/threads.h"
#include "loom/config/logging.h"
#include "loom/config/run_config.h"
#include "loom/dist/rank.h"
#include "loom/model/cpu_allocator.h"
#include "loom/train/preemption.h"
#include "loom/train/run_dir.h"
#include "loom/train/runner.h"

namespace loom::cli {
namespace {

struct TrainOptions {
  std::string config;
  std::vector<std::string> overrides;
  std::string run_dir;
  std::string resume;
};

int RunTrain(const TrainOptions& options, const Context& context) {
  auto config = config::LoadRunConfig(options.config, options.overrides);
  if (!config.ok()) {
    std::cerr << config.status().message() << "\n";
    return kExitUsage;
  }
  absl::Status logging =
      SetupLogging(context.log_level_given ? context.log_level : config->run.log_level);
  if (!logging.ok()) {
    std::cerr << logging.message() << "\n";
    return kExitUsage;
  }
  auto rank = dist::RankFromEnvironment();
  if (!rank.ok()) {
    spdlog::error("{}", std::string(rank.status().message()));
    return kExitUsage;
  }
  if (rank->distributed()) SetConsoleRank(rank->rank);
  auto run_dir = train::RunDir::Create(*config, options.run_dir, rank->rank);
  if (!run_dir.ok()) {
    spdlog::error("{}", std::string(run_dir.status().message()));
    return kExitFailure;
  }
  if (absl::Status s = AddLogFile(run_dir->log_path()); !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    return kExitFailure;
  }
  if (config->run.threads > 0) SetComputeThreads(config->run.threads);
  model::UseCachingCpuAllocator(config->run.cpu_cache_mib << 20);
  spdlog::info("run '{}' in {} ({} intra-op threads)", config->run.name, run_dir->path(),
               at::get_num_threads());
  train::InstallPreemptionHandlers();
  train::StartPreemptDeadline(config->ckpt.preempt_deadline_s);
  if (absl::Status s = train::RunTraining(*config, *run_dir, options.resume, *rank); !s.ok()) {
    if (train::IsPreempted(s)) {
      spdlog::info("{}; continue with --resume auto", std::string(s.message()));
      return kExitOk;
    }
    spdlog::error("{}", std::string(s.message()));
    return kExitFailure;
  }
  const model::CpuCacheStats cache = model::CachingCpuAllocatorStats();
  spdlog::info("cpu tensor cache: {} hits, {} misses, {} evictions, {} MiB idle", cache.hits,
               cache.misses, cache.evictions, cache.idle_bytes >> 20);
  spdlog::info("run '{}' finished", config->run.name);
  return kExitOk;
}

void SetupTrain(CLI::App& app, Context& context) {
  auto options = std::make_shared<TrainOptions>();
  CLI::App* cmd = app.add_subcommand("train", "Run the stages of a config (sft, grpo, opd)");
  cmd->add_option("--config", options->config, "YAML config file")->required();
  cmd->add_option("--set", options->overrides, "Override a key: a.b.c=value (repeatable)");
  cmd->add_option("--run-dir", options->run_dir, "Run directory (default: run.dir or runs/<name>)");
  cmd->add_option("--resume", options->resume,
                  "auto (the newest good checkpoint of the run directory, if any) or a checkpoint "
                  "directory");
  cmd->callback([options, &context] { context.exit_code = RunTrain(*options, context); });
}

}  // namespace

LOOM_REGISTER_COMMAND("train", SetupTrain);

}  // namespace loom::cli
