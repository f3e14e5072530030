#include "health.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "loom/sandbox/usage.h"
#include "unique_fd.h"

namespace loom::sandbox {
namespace {

// The session's directories an agent works in, by their names inside.
struct Place {
  const char* name;  // under the session directory
  const char* shown;
};
constexpr Place kPlaces[] = {{"work", "/workspace"}, {"tmp", "/tmp"}};

// The last non-empty line of `text`, at most 200 characters: what a failing
// command said last.
std::string LastLine(const std::string& text) {
  absl::string_view rest = absl::StripTrailingAsciiWhitespace(text);
  size_t newline = rest.rfind('\n');
  if (newline != absl::string_view::npos) rest.remove_prefix(newline + 1);
  return std::string(rest.substr(0, 200));
}

// Whether the sandbox's user can still enter and write `place`, from its
// mode (the agent may chmod the directory, never replace it: it is a mount).
std::string Access(int session, const Place& place) {
  struct stat st {};
  if (fstatat(session, place.name, &st, AT_SYMLINK_NOFOLLOW) != 0) return "";
  const unsigned mode = st.st_mode & 07777;
  if ((mode & S_IXUSR) == 0 || (mode & S_IRUSR) == 0) {
    return absl::StrFormat("%s cannot be entered (mode %04o)", place.shown, mode);
  }
  if ((mode & S_IWUSR) == 0) {
    return absl::StrFormat("%s cannot be written (mode %04o)", place.shown, mode);
  }
  return "";
}

// Whether one page can still be written in `place`, on the session's own
// tmpfs: an unnamed file (O_TMPFILE), gone when closed, so nothing the
// agent planted is opened and nothing is left behind.
std::string Room(int session, const Place& place) {
  UniqueFd dir(openat(session, place.name, O_DIRECTORY | O_NOFOLLOW | O_RDONLY | O_CLOEXEC));
  if (!dir.ok()) return "";
  UniqueFd file(openat(dir.get(), ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600));
  if (!file.ok()) {  // out of inodes, or a reason that is not the agent's
    const bool full = errno == ENOSPC || errno == EDQUOT;
    return full ? absl::StrCat(place.shown, " cannot be written: ", std::strerror(errno)) : "";
  }
  const char page[4096] = {};
  if (write(file.get(), page, sizeof(page)) != static_cast<ssize_t>(sizeof(page))) {
    return absl::StrCat(place.shown, " cannot be written: ", std::strerror(errno));
  }
  return "";
}

// Without a filesystem of its own, the files against the disk caps.
std::string OverDisk(const Sandbox& sandbox) {
  const SandboxCaps& caps = sandbox.config().caps;
  DiskWalkLimits limits;
  limits.stop_bytes = caps.disk_bytes;
  limits.stop_inodes = caps.inodes;
  limits.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  const DiskUsage disk = MeasureDisk(sandbox.dir(), limits);
  if (disk.bytes > caps.disk_bytes) {
    return absl::StrFormat("its files fill the disk cap of %d MiB", caps.disk_bytes >> 20);
  }
  if (disk.inodes > caps.inodes) {
    return absl::StrCat("its files fill the cap of ", caps.inodes, " files");
  }
  return "";
}

// The finding of the health command ("" = it passed).
std::string Finding(const ProcessResult& result, double timeout_s) {
  if (!result.limit.empty()) return absl::StrCat("health_command is killed: ", result.limit);
  if (result.timed_out)
    return absl::StrCat("health_command does not finish within ", timeout_s, " s");
  if (result.exit_code != 0) {
    const std::string said = LastLine(result.stderr_text);
    return absl::StrCat("health_command exits ", result.exit_code, said.empty() ? "" : ": ", said);
  }
  return "";
}

}  // namespace

absl::StatusOr<std::string> ProbeHealth(const Sandbox& sandbox, double timeout_s) {
  if (!sandbox.config().health_probe) return std::string();
  UniqueFd session(open(sandbox.dir().c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!session.ok()) {
    return absl::InternalError(absl::StrCat(sandbox.dir(), ": ", std::strerror(errno)));
  }
  for (const Place& place : kPlaces) {
    if (std::string finding = Access(session.get(), place); !finding.empty()) return finding;
    if (!sandbox.own_filesystem()) continue;
    if (std::string finding = Room(session.get(), place); !finding.empty()) return finding;
  }
  if (!sandbox.own_filesystem()) {
    if (std::string finding = OverDisk(sandbox); !finding.empty()) return finding;
  }
  if (sandbox.health_command().empty()) return std::string();
  absl::StatusOr<ProcessResult> check = sandbox.Bash(sandbox.health_command(), timeout_s);
  if (!check.ok()) return check.status();
  return Finding(*check, timeout_s);
}

}  // namespace loom::sandbox
