#pragma once
// MetricsWriter: appends one JSON object per line to a run's metrics.jsonl.
//
// Each Write() is one complete line followed by a flush, so a reader (or a
// crash) never sees half a record, and a resumed run appends after the last
// line. Not thread-safe: the run loop is the only writer.

#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "loom/metrics/tensorboard.h"

namespace loom::metrics {

class MetricsWriter {
 public:
  // Opens `path` for appending (created if missing).
  static absl::StatusOr<MetricsWriter> Open(const std::string& path);

  MetricsWriter(MetricsWriter&& other) noexcept;
  MetricsWriter& operator=(MetricsWriter&& other) noexcept;
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  ~MetricsWriter();

  absl::Status Write(const nlohmann::json& record);

  // Adds `key: value` to every line written from now on (a line's own
  // `key` wins): the run's config_version, for one.
  void SetCommon(const std::string& key, nlohmann::json value) { common_[key] = std::move(value); }

  // Also writes every line's numbers as TensorBoard scalars from now on.
  void AttachTensorBoard(std::unique_ptr<TensorBoardWriter> tensorboard) {
    tensorboard_ = std::move(tensorboard);
  }
  TensorBoardWriter* tensorboard() { return tensorboard_.get(); }

  const std::string& path() const { return path_; }

 private:
  MetricsWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}

  std::string path_;
  std::FILE* file_ = nullptr;
  nlohmann::json common_ = nlohmann::json::object();
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

// Reads every record of a metrics.jsonl file; a malformed line is an error
// naming the file and line.
absl::StatusOr<std::vector<nlohmann::json>> ReadMetrics(const std::string& path);

}  // namespace loom::metrics
