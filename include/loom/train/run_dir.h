#pragma once
// RunDir: the directory one run writes to.
//
//   <dir>/config.yaml     the fully resolved config (reproduces the run)
//   <dir>/log.txt         the log, appended across resumes
//   <dir>/metrics.jsonl   one JSON object per training step / eval
//   <dir>/checkpoints/    checkpoints and the `latest` pointer
//   <dir>/stages/<stage>/ each finished stage's weights (a model directory)
//   <dir>/samples.jsonl   one line per trained sample of the async stages
//   <dir>/trajectories.jsonl  one line per finished agent sample (agent_stage.h)
//   <dir>/tb/             TensorBoard event files: every metrics number, the config
//   <dir>/ctl/            live-change requests and replies (control.h)
//   <dir>/live/           the live config: current.json, history.jsonl
//
// In a multi-rank run every rank opens the same directory; rank 0 writes
// config.yaml, checkpoints, stages/ and tb/, and each other rank r its own
// log.rank<r>.txt, metrics.rank<r>.jsonl, samples.rank<r>.jsonl and
// trajectories.rank<r>.jsonl.
//
// Created by `loom train` before any work starts; owned by the run loop.

#include <string>

#include "absl/status/statusor.h"
#include "loom/config/run_config.h"

namespace loom::train {

class RunDir {
 public:
  // Creates the directory (and checkpoints/) if needed and, on rank 0,
  // writes config.yaml atomically. `dir_override` (from --run-dir) wins over
  // run.dir, which wins over runs/<run.name>.
  static absl::StatusOr<RunDir> Create(const config::RunConfig& config,
                                       const std::string& dir_override, int rank = 0);

  const std::string& path() const { return path_; }
  std::string config_path() const { return path_ + "/config.yaml"; }
  std::string log_path() const { return path_ + "/log" + RankSuffix() + ".txt"; }
  std::string metrics_path() const { return path_ + "/metrics" + RankSuffix() + ".jsonl"; }
  std::string checkpoints_path() const { return path_ + "/checkpoints"; }
  std::string stage_path(const std::string& stage) const { return path_ + "/stages/" + stage; }
  std::string samples_path() const { return path_ + "/samples" + RankSuffix() + ".jsonl"; }
  std::string trajectories_path() const {
    return path_ + "/trajectories" + RankSuffix() + ".jsonl";
  }
  std::string tensorboard_path() const { return path_ + "/tb"; }
  // Tasks the difficulty filter retired (rank 0: every rank retires the same).
  std::string retired_tasks_path() const { return path_ + "/retired_tasks.jsonl"; }

 private:
  RunDir(std::string path, int rank) : path_(std::move(path)), rank_(rank) {}
  std::string RankSuffix() const { return rank_ == 0 ? "" : ".rank" + std::to_string(rank_); }
  std::string path_;
  int rank_ = 0;
};

}  // namespace loom::train
