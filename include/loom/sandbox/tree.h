#pragma once
// The worker's operations on a sandbox's files: copying a workspace, writing
// a task's hidden files into one, removing a session directory. Agents
// control the trees these walk, and the worker may run as root, so none of
// them follows a path the agent controls: every step is an openat(2)
// relative to an opened directory with O_NOFOLLOW, a link is handled as a
// link and never resolved, and no path is ever longer than one name (no
// PATH_MAX limit, no race between checking a name and using it).
//
// Thread-compatible: each call owns the descriptors it opens.

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace loom::sandbox {

// What CopyTree does with one entry of the source.
enum class CopyChoice {
  kCopy,    // copied (a directory is made, then its entries are chosen in turn)
  kSkip,    // left out, with all a directory holds
  kSearch,  // directories only: looked into, made only if something in it is copied
};

struct CopyOptions {
  // Chooses per path relative to the source root ('/' between names); none: copy all.
  std::function<CopyChoice(const std::string& rel, bool is_directory)> choose;
  // Python's bytecode caches (`__pycache__` directories and `.pyc` files)
  // are left out: an unchecked-hash .pyc shadows its source.
  bool skip_bytecode = false;
  int64_t max_bytes = 1LL << 30;                     // data the copies of regular files hold
  int64_t max_entries = 100000;                      // files, links and directories made
  int max_depth = 256;                               // directories nested below the root
  uid_t uid = static_cast<uid_t>(-1);                // owner of everything made (-1: the worker)
  std::vector<std::string>* copied_files = nullptr;  // when given: the regular files copied
};

// Copies the tree under `from` into the directory `to` (made when missing).
// Regular files keep their mode and holes, a file with several names keeps
// them as hard links (copied once), symlinks stay symlinks with the same
// target text, directories are made; fifos, sockets and devices are left
// out. An entry already in `to` under the same name is replaced.
// RESOURCE_EXHAUSTED past a limit, INTERNAL for other failures (the copy is
// then partial).
absl::Status CopyTree(const std::string& from, const std::string& to, const CopyOptions& options);

// Writes `content` as the regular file `rel` beneath the directory `root`:
// missing directories on the way are made, and whatever stands in the way
// (a link, a file where a directory is needed, a directory where the file
// goes) is removed first, so the file always lands inside `root`.
// INVALID_ARGUMENT for a `rel` that is absolute or holds "..".
absl::Status WriteFileBeneath(const std::string& root, const std::string& rel,
                              const std::string& content, uid_t uid = static_cast<uid_t>(-1));

// Calls `visit` with each name in the open directory `fd`, less "." and "..",
// until it returns false: a walk that stops early reads no further. INTERNAL
// when the directory cannot be listed.
absl::Status ForEachName(int fd, const std::function<bool(const std::string&)>& visit);

// Every name in the open directory `fd`, as ForEachName lists them.
absl::StatusOr<std::vector<std::string>> ListDirectory(int fd);

// Removes `path` and everything beneath it, at any depth. A directory the
// walk cannot enter or empty because its mode denies the worker is given
// back the owner's permissions through its own descriptor (never by name).
// OK when `path` does not exist.
absl::Status DeleteTree(const std::string& path);

}  // namespace loom::sandbox
