#pragma once
// Small file helpers with Status errors that name the path.

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace loom {

absl::StatusOr<std::string> ReadFile(const std::string& path);

// Writes `contents` to `path` atomically: a temporary file beside it, fsync,
// rename, fsync of the directory. Readers see the old file or the new one.
absl::Status WriteFileAtomic(const std::string& path, const std::string& contents);

}  // namespace loom
