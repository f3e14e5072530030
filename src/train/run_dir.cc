#include "loom/train/run_dir.h"

#include <filesystem>

#include "loom/config/files.h"

namespace loom::train {

absl::StatusOr<RunDir> RunDir::Create(const config::RunConfig& config,
                                      const std::string& dir_override, int rank) {
  std::string path = dir_override;
  if (path.empty()) path = config.run.dir;
  if (path.empty()) path = "runs/" + config.run.name;
  RunDir dir(path, rank);
  std::error_code ec;
  std::filesystem::create_directories(dir.checkpoints_path(), ec);
  if (ec)
    return absl::UnavailableError("cannot create run directory " + path + ": " + ec.message());
  if (rank != 0) return dir;
  absl::Status written = WriteFileAtomic(dir.config_path(), config::ResolvedYaml(config));
  if (!written.ok()) return written;
  return dir;
}

}  // namespace loom::train
