#pragma once
// TensorBoardWriter: TensorBoard event files written natively, so
// `tensorboard --logdir runs/` shows a run while it goes on.
//
// A file is RUN_DIR/tb/events.out.tfevents.<seconds>.<host>.<pid>: TFRecord
// framing (little-endian uint64 length, masked CRC-32C of the length, the
// payload, masked CRC-32C of the payload) around loom.tb.Event messages
// (proto/loom/tb/event.proto, TensorFlow's field numbers). The first
// record is the file version. Every record is written whole and flushed, so
// a run killed mid-write leaves every complete record readable; a resumed
// run opens a new file in the same directory, which TensorBoard reads as
// one run.
//
// Not thread-safe: the metrics writer (the run loop) is its only caller.

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace loom::metrics {

// CRC-32C (Castagnoli), and the masked form TFRecord stores.
uint32_t Crc32c(const void* data, size_t size);
uint32_t MaskedCrc32c(const void* data, size_t size);
// `payload` framed as one TFRecord.
std::string TfRecord(const std::string& payload);

class TensorBoardWriter {
 public:
  // Creates `dir` if needed and a new event file in it.
  static absl::StatusOr<std::unique_ptr<TensorBoardWriter>> Open(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One scalar per number in `record` (a metrics.jsonl line), at step
  // `record.version` (the policy version, counted over all stages; else
  // `step`, else 0). Tags are paths: "<stage>/<key>", nested keys and list
  // items joined by '/' (grpo/reward_by_effort/25); an `event` line's under
  // "<stage>/<event>/" and, with a `teacher`, "<teacher>/". Booleans and
  // strings are not scalars and are left out.
  absl::Status WriteScalars(const nlohmann::json& record, double wall_time);

  // A text summary (TensorBoard's text plugin renders it as markdown).
  absl::Status WriteText(const std::string& tag, const std::string& markdown, double wall_time);

  const std::string& path() const { return path_; }

 private:
  TensorBoardWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  absl::Status Append(const std::string& event);

  std::string path_;
  std::FILE* file_;
};

}  // namespace loom::metrics
