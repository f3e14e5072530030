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

// Deletes `path` and, if it is a directory, everything under it, without
// following symbolic links (a link is removed, not its target). A missing
// path is OK. Errors name the first entry that could not be removed; the
// walk still removes what it can.
//
// Not std::filesystem::remove_all: pip builds of LibTorch export their own
// copy of it, which the dynamic linker binds in place of libstdc++'s, and
// it crashed loom there (docs/device/train_cuda/README.txt).
absl::Status RemoveTree(const std::string& path);

}  // namespace loom
