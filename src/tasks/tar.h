#pragma once
// Reading an agent task's environment from a tar archive (plain or gzip:
// zlib reads both): the regular files it holds, by their paths. ustar and
// GNU headers, with pax and GNU long names. Links and special files are
// refused, never followed; so is a path that leaves the archive's root.

#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace loom::tasks {

// path -> content of every regular file of archive `path`, at most
// `max_bytes` of them together. INVALID_ARGUMENT naming the member for a
// malformed, linked or escaping entry; NOT_FOUND for a missing archive.
absl::StatusOr<std::map<std::string, std::string>> ReadTarFiles(const std::string& path,
                                                                size_t max_bytes);

}  // namespace loom::tasks
