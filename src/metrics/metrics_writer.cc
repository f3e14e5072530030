#include "loom/metrics/metrics_writer.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>

namespace loom::metrics {

absl::StatusOr<MetricsWriter> MetricsWriter::Open(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "a");
  if (file == nullptr) {
    return absl::UnavailableError("cannot open " + path +
                                  " for appending: " + std::strerror(errno));
  }
  return MetricsWriter(path, file);
}

MetricsWriter::MetricsWriter(MetricsWriter&& other) noexcept
    : path_(std::move(other.path_)),
      file_(other.file_),
      common_(std::move(other.common_)),
      tensorboard_(std::move(other.tensorboard_)) {
  other.file_ = nullptr;
}

MetricsWriter& MetricsWriter::operator=(MetricsWriter&& other) noexcept {
  if (this != &other) {
    if (file_) std::fclose(file_);
    path_ = std::move(other.path_);
    file_ = other.file_;
    common_ = std::move(other.common_);
    tensorboard_ = std::move(other.tensorboard_);
    other.file_ = nullptr;
  }
  return *this;
}

MetricsWriter::~MetricsWriter() {
  if (file_) std::fclose(file_);
}

absl::Status MetricsWriter::Write(const nlohmann::json& record) {
  nlohmann::json merged = record;
  if (merged.is_object()) {
    for (const auto& [key, value] : common_.items()) {
      if (!merged.contains(key)) merged[key] = value;
    }
  }
  // Non-finite numbers have no JSON spelling; nlohmann writes them as null.
  const std::string line =
      merged.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    return absl::UnavailableError("cannot append to " + path_ + ": " + std::strerror(errno));
  }
  if (tensorboard_ != nullptr) {
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    return tensorboard_->WriteScalars(merged, now);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<nlohmann::json>> ReadMetrics(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot open " + path);
  std::vector<nlohmann::json> records;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_discarded() || !record.is_object()) {
      return absl::DataLossError(path + ":" + std::to_string(number) +
                                 ": not a JSON object on one line");
    }
    records.push_back(std::move(record));
  }
  return records;
}

}  // namespace loom::metrics
