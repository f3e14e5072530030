#pragma once
// RunDir: the directory one run writes to.
//
//   <dir>/config.yaml     the fully resolved config (reproduces the run)
//   <dir>/log.txt         the log, appended across resumes
//   <dir>/metrics.jsonl   one JSON object per training step / eval
//   <dir>/checkpoints/    checkpoints and the `latest` pointer
//   <dir>/stages/<stage>/ each finished stage's weights (a model directory)
//   <dir>/samples.jsonl   one line per trained sample of the async stages
//   <dir>/tb/             TensorBoard event files: every metrics number, the config
//   <dir>/ctl/            live-change requests and replies (control.h)
//   <dir>/live/           the live config: current.json, history.jsonl
//
// Created by `loom train` before any work starts; owned by the run loop.

#include <string>

#include "absl/status/statusor.h"
#include "loom/config/run_config.h"

namespace loom::train {

class RunDir {
 public:
  // Creates the directory (and checkpoints/) if needed and writes
  // config.yaml atomically. `dir_override` (from --run-dir) wins over
  // run.dir, which wins over runs/<run.name>.
  static absl::StatusOr<RunDir> Create(const config::RunConfig& config,
                                       const std::string& dir_override);

  const std::string& path() const { return path_; }
  std::string config_path() const { return path_ + "/config.yaml"; }
  std::string log_path() const { return path_ + "/log.txt"; }
  std::string metrics_path() const { return path_ + "/metrics.jsonl"; }
  std::string checkpoints_path() const { return path_ + "/checkpoints"; }
  std::string stage_path(const std::string& stage) const { return path_ + "/stages/" + stage; }
  std::string samples_path() const { return path_ + "/samples.jsonl"; }
  std::string tensorboard_path() const { return path_ + "/tb"; }

 private:
  explicit RunDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace loom::train
