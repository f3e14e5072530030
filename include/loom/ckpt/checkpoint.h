#pragma once
// Checkpoint directories, written atomically and verified on load.
//
//   RUN_DIR/checkpoints/
//     step-00000042/         one checkpoint
//       manifest.json        every file with its size and CRC-32, plus metadata
//       ...                  files written by each state owner (model, optimizer, samples, ...)
//     latest                 name of the newest complete checkpoint
//
// A checkpoint is written into a temporary directory; Commit() fsyncs every
// file, writes the manifest, renames the directory into place, fsyncs the
// parent, and only then rewrites `latest` (atomically). A kill -9 at any
// moment therefore leaves `latest` naming a complete checkpoint (or no
// `latest` at all), and ResolveResume() falls back past anything that fails
// verification. `ckpt` knows nothing of what the files mean: each owner
// serialises its own state into dir() (ARCHITECTURE.md, "Module ownership").
// Not thread-safe: one writer per run (the run loop).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace loom::ckpt {

struct ManifestFile {
  std::string path;  // relative to the checkpoint directory
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};

struct Manifest {
  int64_t step = 0;
  nlohmann::json meta;  // owner-defined: stage, config version, inflight_samples, ...
  std::vector<ManifestFile> files;
};

// "step-00000042".
std::string CheckpointName(int64_t step);

class CheckpointWriter {
 public:
  // Starts checkpoint `step` under `root` (RUN_DIR/checkpoints, created if
  // missing). Leftover temporary directories of interrupted writes are removed.
  static absl::StatusOr<CheckpointWriter> Begin(const std::string& root, int64_t step);

  CheckpointWriter(CheckpointWriter&& other) noexcept;
  CheckpointWriter& operator=(CheckpointWriter&&) = delete;
  CheckpointWriter(const CheckpointWriter&) = delete;
  // Removes the temporary directory unless Commit() succeeded.
  ~CheckpointWriter();

  // The temporary directory owners write their files into.
  const std::string& dir() const { return temp_dir_; }
  // Convenience for small files: writes `contents` to dir()/relative_path.
  absl::Status AddFile(const std::string& relative_path, const std::string& contents);
  // Seals the checkpoint (see the file comment) and returns its final path.
  absl::StatusOr<std::string> Commit(const nlohmann::json& meta);

 private:
  CheckpointWriter(std::string root, int64_t step, std::string temp_dir)
      : root_(std::move(root)), step_(step), temp_dir_(std::move(temp_dir)) {}

  std::string root_;
  int64_t step_ = 0;
  std::string temp_dir_;
  bool committed_ = false;
};

// Reads dir/manifest.json and checks every listed file's size and CRC-32.
// DATA_LOSS naming the file on any mismatch; files not listed are ignored.
absl::StatusOr<Manifest> VerifyCheckpoint(const std::string& dir);

// Complete checkpoint directories under `root`, oldest step first (by name;
// unverified).
std::vector<std::string> ListCheckpoints(const std::string& root);

struct ResumePoint {
  std::string dir;
  Manifest manifest;
  std::vector<std::string> warnings;  // checkpoints skipped on the way, and why
};

// `spec` is "auto" or a checkpoint directory. For "auto": the checkpoint
// `latest` names if it verifies, else the newest one that does (each skipped
// one explained in `warnings`); std::nullopt when `root` holds none (a fresh
// start). For a path: that checkpoint, verified, or an error.
absl::StatusOr<std::optional<ResumePoint>> ResolveResume(const std::string& root,
                                                         const std::string& spec);

// Deletes complete checkpoints except the newest `keep_last` (>= 1), those
// whose step is a multiple of `keep_every` (0 = none), and the one `latest`
// names.
absl::Status ApplyRetention(const std::string& root, int keep_last, int64_t keep_every);

}  // namespace loom::ckpt
