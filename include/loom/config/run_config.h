#pragma once
// RunConfig: everything `loom train` reads from YAML, one section per module.
// Sections live in their own headers (run_section.h, model_section.h, ...);
// this struct only lists them. Validated once at start-up by LoadRunConfig and
// passed down as `const&`: nothing changes it afterwards.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/config/async_section.h"
#include "loom/config/ckpt_section.h"
#include "loom/config/dist_section.h"
#include "loom/config/grpo_section.h"
#include "loom/config/model_section.h"
#include "loom/config/opd_section.h"
#include "loom/config/rollout_section.h"
#include "loom/config/run_section.h"
#include "loom/config/sandbox_section.h"
#include "loom/config/schema.h"
#include "loom/config/tasks_section.h"
#include "loom/config/train_section.h"

namespace loom::config {

struct RunConfig {
  RunSection run;
  ModelSection model;
  RolloutSection rollout;
  TasksSection tasks;
  EffortSection effort;
  GrpoSection grpo;
  OpdSection opd;
  AsyncSection async;
  SandboxSection sandbox;
  TrainSection train;
  CkptSection ckpt;
  DistSection dist;

  template <class V>
  void Visit(V& v) {
    v.Section("run", run, Doc("The run: its name, directory, seed and process-wide settings."));
    v.Section("model", model, Doc("The policy model the run starts from."));
    v.Section("rollout", rollout, Doc("The generation engine: batching, KV pool, sampling."));
    v.Section("tasks", tasks, Doc("Datasets: built-in task generators and JSON-lines files."));
    v.Section("effort", effort, Doc("Reasoning-effort levels and responses per level."));
    v.Section("grpo", grpo, Doc("The GRPO loss and the effort-conditioned length reward."));
    v.Section("opd", opd, Doc("On-policy distillation: teachers, the KL estimator, memory."));
    v.Section("async", async, Doc("Dispatch policy, concurrency and off-policy bounds."));
    v.Section("sandbox", sandbox,
              Doc("Sandbox workers for agent episodes: addresses or local workers, limits."));
    v.Section("train", train, Doc("The stages to run and their optimizers."));
    v.Section("ckpt", ckpt, Doc("Checkpoint interval, retention and the preemption deadline."));
    v.Section("dist", dist, Doc("Multi-rank runs: how long ranks wait for each other, buckets."));
  }

  // Rules across sections: every dataset's teacher is one of opd.teachers,
  // and an opd stage has a teacher for every dataset.
  void Validate(ErrorSink& errors) const;

  bool HasStage(const std::string& name) const;
};

// Loads `path` (with its bases), applies `overrides` ("a.b=value"), binds and
// validates. On failure the status is INVALID_ARGUMENT and its message holds
// every error, one per line, each naming file:line:col, the key and what was
// expected.
absl::StatusOr<RunConfig> LoadRunConfig(const std::string& path,
                                        const std::vector<std::string>& overrides);

// The fully resolved config as YAML (every default filled in).
std::string ResolvedYaml(const RunConfig& config);

// The reference tables of docs/config.md.
std::string ConfigReferenceMarkdown();

}  // namespace loom::config
