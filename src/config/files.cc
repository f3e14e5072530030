#include "loom/config/files.h"

#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace loom {
namespace {

absl::Status ErrnoError(const std::string& what, const std::string& path) {
  return absl::UnavailableError(what + " " + path + ": " + std::strerror(errno));
}

}  // namespace

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot open " + path + ": " + std::strerror(errno));
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) return absl::DataLossError("cannot read " + path);
  return out.str();
}

absl::Status WriteFileAtomic(const std::string& path, const std::string& contents) {
  const std::string temp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", temp);
  size_t written = 0;
  while (written < contents.size()) {
    ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      absl::Status status = ErrnoError("cannot write", temp);
      ::close(fd);
      ::unlink(temp.c_str());
      return status;
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    absl::Status status = ErrnoError("cannot flush", temp);
    ::unlink(temp.c_str());
    return status;
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    absl::Status status = ErrnoError("cannot rename into", path);
    ::unlink(temp.c_str());
    return status;
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  return absl::OkStatus();
}

namespace {

// nftw's callback takes no context; RemoveTree is not reentrant across
// threads through this, so the first error is kept per thread.
thread_local std::string remove_error;

int RemoveEntry(const char* path, const struct stat*, int type, struct FTW*) {
  const int rc = type == FTW_DP ? ::rmdir(path) : ::unlink(path);
  if (rc != 0 && errno != ENOENT && remove_error.empty()) {
    remove_error = std::string(path) + ": " + std::strerror(errno);
  }
  return 0;  // keep going: remove as much as possible
}

}  // namespace

absl::Status RemoveTree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::InternalError("cannot remove " + path + ": " + std::strerror(errno));
  }
  remove_error.clear();
  if (::nftw(path.c_str(), RemoveEntry, 16, FTW_DEPTH | FTW_PHYS) != 0 && remove_error.empty()) {
    remove_error = path + ": " + std::strerror(errno);
  }
  if (!remove_error.empty()) return absl::InternalError("cannot remove " + remove_error);
  return absl::OkStatus();
}

}  // namespace loom
