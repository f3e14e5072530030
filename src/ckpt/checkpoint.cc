#include "loom/ckpt/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "loom/config/files.h"

namespace loom::ckpt {
namespace fs = std::filesystem;
namespace {

constexpr const char* kManifest = "manifest.json";
constexpr const char* kLatest = "latest";
constexpr const char* kTempPrefix = ".tmp-";

absl::Status ErrnoStatus(const std::string& what, const std::string& path) {
  return absl::UnavailableError(what + " " + path + ": " + std::strerror(errno));
}

absl::Status FsyncPath(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("cannot open", path);
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return ErrnoStatus("cannot fsync", path);
  return absl::OkStatus();
}

// Size and CRC-32 of a file, read in 1 MiB chunks.
absl::StatusOr<ManifestFile> Describe(const std::string& dir, const std::string& relative) {
  const std::string path = dir + "/" + relative;
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::DataLossError("cannot open " + path);
  ManifestFile file;
  file.path = relative;
  uLong crc = crc32_z(0L, Z_NULL, 0);
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const std::streamsize n = in.gcount();
    if (n <= 0) break;
    crc = crc32_z(crc, reinterpret_cast<const Bytef*>(buffer.data()), static_cast<z_size_t>(n));
    file.bytes += static_cast<uint64_t>(n);
  }
  if (in.bad()) return absl::DataLossError("cannot read " + path);
  file.crc32 = static_cast<uint32_t>(crc);
  return file;
}

std::optional<int64_t> StepOfName(const std::string& name) {
  if (name.rfind("step-", 0) != 0 || name.size() <= 5) return std::nullopt;
  int64_t step = 0;
  for (char c : name.substr(5)) {
    if (c < '0' || c > '9') return std::nullopt;
    step = step * 10 + (c - '0');
  }
  return step;
}

std::string ReadLatest(const std::string& root) {
  auto text = ReadFile(root + "/" + kLatest);
  if (!text.ok()) return "";
  std::string name = *text;
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  return name;
}

}  // namespace

std::string CheckpointName(int64_t step) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "step-%08lld", static_cast<long long>(step));
  return buffer;
}

absl::StatusOr<CheckpointWriter> CheckpointWriter::Begin(const std::string& root, int64_t step) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return absl::UnavailableError("cannot create " + root + ": " + ec.message());
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (entry.path().filename().string().rfind(kTempPrefix, 0) == 0)
      RemoveTree(entry.path().string()).IgnoreError();
  }
  const std::string temp =
      root + "/" + kTempPrefix + CheckpointName(step) + "-" + std::to_string(::getpid());
  fs::create_directories(temp, ec);
  if (ec) return absl::UnavailableError("cannot create " + temp + ": " + ec.message());
  return CheckpointWriter(root, step, temp);
}

CheckpointWriter::CheckpointWriter(CheckpointWriter&& other) noexcept
    : root_(std::move(other.root_)),
      step_(other.step_),
      temp_dir_(std::move(other.temp_dir_)),
      committed_(other.committed_) {
  other.temp_dir_.clear();
}

CheckpointWriter::~CheckpointWriter() {
  if (!committed_ && !temp_dir_.empty()) {
    RemoveTree(temp_dir_).IgnoreError();
  }
}

absl::Status CheckpointWriter::AddFile(const std::string& relative_path,
                                       const std::string& contents) {
  const fs::path path = fs::path(temp_dir_) / relative_path;
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  std::ofstream out(path, std::ios::binary);
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  out.close();
  if (!out) return absl::UnavailableError("cannot write " + path.string());
  return absl::OkStatus();
}

absl::StatusOr<std::string> CheckpointWriter::Commit(const nlohmann::json& meta) {
  if (committed_) return absl::FailedPreconditionError("checkpoint already committed");
  Manifest manifest;
  manifest.step = step_;
  manifest.meta = meta;
  std::vector<std::string> files, subdirs;
  for (const auto& entry : fs::recursive_directory_iterator(temp_dir_)) {
    if (entry.is_directory()) subdirs.push_back(entry.path().string());
    if (!entry.is_regular_file()) continue;
    std::string relative = fs::relative(entry.path(), temp_dir_).string();
    if (relative != kManifest) files.push_back(relative);
  }
  std::sort(files.begin(), files.end());
  for (const auto& relative : files) {
    if (absl::Status s = FsyncPath(temp_dir_ + "/" + relative, false); !s.ok()) return s;
    auto described = Describe(temp_dir_, relative);
    if (!described.ok()) return described.status();
    manifest.files.push_back(*described);
  }
  for (const auto& subdir : subdirs) {  // their entries (e.g. model/) must survive a power loss too
    if (absl::Status s = FsyncPath(subdir, true); !s.ok()) return s;
  }
  nlohmann::json json = {{"step", manifest.step}, {"meta", manifest.meta}};
  json["files"] = nlohmann::json::array();
  for (const auto& f : manifest.files) {
    json["files"].push_back({{"path", f.path}, {"bytes", f.bytes}, {"crc32", f.crc32}});
  }
  if (absl::Status s = WriteFileAtomic(temp_dir_ + "/" + kManifest, json.dump(2) + "\n"); !s.ok()) {
    return s;
  }
  if (absl::Status s = FsyncPath(temp_dir_, true); !s.ok()) return s;

  const std::string name = CheckpointName(step_);
  const std::string final_dir = root_ + "/" + name;
  std::error_code ec;
  // Re-saving a step (after a resume): move the old copy aside first, so the
  // rename below is a plain atomic rename.
  const std::string trash = root_ + "/" + kTempPrefix + "old-" + name;
  if (fs::exists(final_dir)) fs::rename(final_dir, trash, ec);
  if (ec) return absl::UnavailableError("cannot replace " + final_dir + ": " + ec.message());
  if (::rename(temp_dir_.c_str(), final_dir.c_str()) != 0) {
    return ErrnoStatus("cannot rename checkpoint into", final_dir);
  }
  committed_ = true;
  if (absl::Status s = FsyncPath(root_, true); !s.ok()) return s;
  if (absl::Status s = WriteFileAtomic(root_ + "/" + kLatest, name + "\n"); !s.ok()) return s;
  RemoveTree(trash).IgnoreError();
  return final_dir;
}

absl::StatusOr<Manifest> VerifyCheckpoint(const std::string& dir) {
  const std::string manifest_path = dir + "/" + kManifest;
  auto text = ReadFile(manifest_path);
  if (!text.ok())
    return absl::DataLossError("checkpoint " + dir + " has no readable manifest.json");
  nlohmann::json json = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object() || !json.contains("step") ||
      !json["step"].is_number_integer() || !json.contains("files") || !json["files"].is_array()) {
    return absl::DataLossError(manifest_path + ": malformed manifest");
  }
  Manifest manifest;
  manifest.step = json["step"].get<int64_t>();
  manifest.meta = json.value("meta", nlohmann::json::object());
  for (const auto& entry : json["files"]) {
    if (!entry.is_object() || !entry.contains("path") || !entry["path"].is_string() ||
        !entry.contains("bytes") || !entry["bytes"].is_number_unsigned() ||
        !entry.contains("crc32") || !entry["crc32"].is_number_unsigned()) {
      return absl::DataLossError(manifest_path + ": malformed file entry " + entry.dump());
    }
    ManifestFile expected{entry["path"].get<std::string>(), entry["bytes"].get<uint64_t>(),
                          entry["crc32"].get<uint32_t>()};
    if (expected.path.find("..") != std::string::npos || expected.path.empty() ||
        expected.path[0] == '/') {
      return absl::DataLossError(manifest_path +
                                 ": file path escapes the checkpoint: " + expected.path);
    }
    auto actual = Describe(dir, expected.path);
    if (!actual.ok()) return actual.status();
    if (actual->bytes != expected.bytes) {
      return absl::DataLossError(dir + "/" + expected.path + ": size " +
                                 std::to_string(actual->bytes) + " bytes, manifest says " +
                                 std::to_string(expected.bytes));
    }
    if (actual->crc32 != expected.crc32) {
      return absl::DataLossError(dir + "/" + expected.path + ": checksum mismatch (corrupt file)");
    }
    manifest.files.push_back(expected);
  }
  return manifest;
}

std::vector<std::string> ListCheckpoints(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (!entry.is_directory()) continue;
    std::string name = entry.path().filename().string();
    if (auto step = StepOfName(name)) found.emplace_back(*step, entry.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> dirs;
  for (auto& [step, dir] : found) dirs.push_back(std::move(dir));
  return dirs;
}

absl::StatusOr<std::optional<ResumePoint>> ResolveResume(const std::string& root,
                                                         const std::string& spec) {
  if (spec != "auto") {
    auto manifest = VerifyCheckpoint(spec);
    if (!manifest.ok()) return manifest.status();
    return ResumePoint{spec, *std::move(manifest), {}};
  }
  ResumePoint point;
  std::vector<std::string> candidates = ListCheckpoints(root);
  std::reverse(candidates.begin(), candidates.end());
  const std::string latest = ReadLatest(root);
  if (!latest.empty()) {
    const std::string latest_dir = root + "/" + latest;
    candidates.erase(std::remove(candidates.begin(), candidates.end(), latest_dir),
                     candidates.end());
    candidates.insert(candidates.begin(), latest_dir);
  }
  for (const auto& dir : candidates) {
    auto manifest = VerifyCheckpoint(dir);
    if (manifest.ok()) {
      point.dir = dir;
      point.manifest = *std::move(manifest);
      return point;
    }
    point.warnings.push_back("skipping checkpoint " + dir + ": " +
                             std::string(manifest.status().message()));
  }
  if (!point.warnings.empty()) {
    std::string message = "no loadable checkpoint in " + root + ":";
    for (const auto& w : point.warnings) message += "\n  " + w;
    return absl::DataLossError(message);
  }
  return std::optional<ResumePoint>();
}

absl::Status ApplyRetention(const std::string& root, int keep_last, int64_t keep_every) {
  if (keep_last < 1) return absl::InvalidArgumentError("keep_last must be >= 1");
  std::vector<std::string> dirs = ListCheckpoints(root);
  const std::string latest = ReadLatest(root);
  const size_t keep_from =
      dirs.size() > static_cast<size_t>(keep_last) ? dirs.size() - keep_last : 0;
  for (size_t i = 0; i < keep_from; ++i) {
    const std::string name = fs::path(dirs[i]).filename().string();
    const int64_t step = StepOfName(name).value_or(0);
    if (name == latest || (keep_every > 0 && step % keep_every == 0)) continue;
    if (absl::Status s = RemoveTree(dirs[i]); !s.ok()) {
      return absl::UnavailableError("cannot delete " + dirs[i] + ": " + std::string(s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace loom::ckpt
