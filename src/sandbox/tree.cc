#include "loom/sandbox/tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "sandbox/unique_fd.h"

namespace loom::sandbox {
namespace {

constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

absl::Status Errno(absl::string_view what, absl::string_view name) {
  return absl::InternalError(absl::StrCat(what, " '", name, "': ", std::strerror(errno)));
}

// Opens the worker-side path of a tree's root: its own last name is never a link.
UniqueFd OpenRoot(const std::string& path) { return UniqueFd(open(path.c_str(), kDirFlags)); }

// Opens directory `name` in `parent` to empty it. A mode that denies the
// worker (an unprivileged worker, a command's chmod 000) is widened through
// an O_PATH descriptor of that very directory, never through its name.
UniqueFd OpenForRemoval(int parent, const std::string& name) {
  UniqueFd fd(openat(parent, name.c_str(), kDirFlags));
  if (fd.ok() || errno != EACCES) return fd;
  UniqueFd path(openat(parent, name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!path.ok()) return path;
  chmod(absl::StrCat("/proc/self/fd/", path.get()).c_str(), S_IRWXU);
  return UniqueFd(openat(parent, name.c_str(), kDirFlags));
}

// unlinkat, widening the directory's mode once when it denies the worker.
int UnlinkIn(int dir, const std::string& name, int flags) {
  if (unlinkat(dir, name.c_str(), flags) == 0) return 0;
  if (errno != EACCES && errno != EPERM) return -1;
  fchmod(dir, S_IRWXU);
  return unlinkat(dir, name.c_str(), flags);
}

// Removes directory `name` in `parent` with all it holds. Iterative, with
// one open directory at a time: the way back up is "..", checked against
// the device and inode seen on the way down, so a tree of any depth goes.
absl::Status DeleteDirectoryAt(int parent, const std::string& name) {
  struct Level {
    std::string name;
    dev_t dev;
    ino_t ino;
    std::vector<std::string> subdirs;  // still to remove
    bool listed = false;
  };
  std::vector<Level> levels;
  UniqueFd current = OpenForRemoval(parent, name);
  struct stat st;
  if (!current.ok() || fstat(current.get(), &st) != 0) return Errno("cannot open", name);
  levels.push_back({name, st.st_dev, st.st_ino, {}});
  while (!levels.empty()) {
    Level& level = levels.back();
    if (!level.listed) {
      absl::StatusOr<std::vector<std::string>> entries = ListDirectory(current.get());
      if (!entries.ok()) return entries.status();
      for (const std::string& entry : *entries) {
        if (UnlinkIn(current.get(), entry, 0) == 0) continue;
        if (errno == EISDIR) level.subdirs.push_back(entry);
        if (errno != EISDIR && errno != ENOENT) return Errno("cannot remove", entry);
      }
      level.listed = true;
    }
    if (!level.subdirs.empty()) {
      const std::string next = std::move(level.subdirs.back());
      level.subdirs.pop_back();
      UniqueFd down = OpenForRemoval(current.get(), next);
      if (!down.ok() || fstat(down.get(), &st) != 0) return Errno("cannot open", next);
      levels.push_back({next, st.st_dev, st.st_ino, {}});
      current = std::move(down);
      continue;
    }
    const std::string done = std::move(level.name);
    levels.pop_back();
    if (levels.empty())
      return UnlinkIn(parent, done, AT_REMOVEDIR) == 0 || errno == ENOENT
                 ? absl::OkStatus()
                 : Errno("cannot remove", done);
    UniqueFd up(openat(current.get(), "..", kDirFlags));
    if (!up.ok() || fstat(up.get(), &st) != 0 || st.st_dev != levels.back().dev ||
        st.st_ino != levels.back().ino) {
      return absl::InternalError(absl::StrCat("the tree moved while '", done, "' was removed"));
    }
    current = std::move(up);
    if (UnlinkIn(current.get(), done, AT_REMOVEDIR) != 0) return Errno("cannot remove", done);
  }
  return absl::OkStatus();
}

// Removes whatever is called `name` in `dir`; nothing there is fine.
absl::Status DeleteEntry(int dir, const std::string& name) {
  if (unlinkat(dir, name.c_str(), 0) == 0 || errno == ENOENT) return absl::OkStatus();
  if (errno == EISDIR) return DeleteDirectoryAt(dir, name);
  return Errno("cannot remove", name);
}

// Gives what the worker made to the sandbox's uid (-1: keeps the worker's).
bool Chown(int fd, uid_t uid) { return uid == static_cast<uid_t>(-1) || fchown(fd, uid, uid) == 0; }

// Directory `name` in `dir`, made when missing; anything else standing there
// is removed first.
absl::StatusOr<UniqueFd> MakeDirectory(int dir, const std::string& name, mode_t mode, uid_t uid) {
  UniqueFd fd(openat(dir, name.c_str(), kDirFlags));
  if (fd.ok()) return fd;
  if (errno != ENOENT) {
    if (absl::Status s = DeleteEntry(dir, name); !s.ok()) return s;
  }
  if (mkdirat(dir, name.c_str(), S_IRWXU) != 0) return Errno("cannot make directory", name);
  fd.Reset(openat(dir, name.c_str(), kDirFlags));
  if (!fd.ok()) return Errno("cannot open", name);
  if (!Chown(fd.get(), uid)) return Errno("cannot chown", name);
  fchmod(fd.get(), (mode & 0777) | S_IRWXU);
  return fd;
}

// A new regular file `name` in `dir` (whatever stood there is removed).
absl::StatusOr<UniqueFd> NewFile(int dir, const std::string& name, mode_t mode, uid_t uid) {
  if (absl::Status s = DeleteEntry(dir, name); !s.ok()) return s;
  UniqueFd fd(
      openat(dir, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode & 0777));
  if (!fd.ok()) return Errno("cannot create", name);
  if (!Chown(fd.get(), uid)) return Errno("cannot chown", name);
  fchmod(fd.get(), mode & 0777);  // not narrowed by the umask
  return fd;
}

bool WriteAll(int fd, const char* data, size_t size, off_t offset) {
  while (size > 0) {
    const ssize_t n = pwrite(fd, data, size, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
    offset += n;
  }
  return true;
}

// A directory of the copy, made the first time something goes into it.
class Target {
 public:
  explicit Target(int root) : root_(root) {}
  Target(Target* parent, std::string name, mode_t mode)
      : parent_(parent), name_(std::move(name)), mode_(mode) {}

  absl::StatusOr<int> Get(uid_t uid) {
    if (root_ >= 0) return root_;
    if (fd_.ok()) return fd_.get();
    absl::StatusOr<int> parent = parent_->Get(uid);
    if (!parent.ok()) return parent.status();
    absl::StatusOr<UniqueFd> made = MakeDirectory(*parent, name_, mode_, uid);
    if (!made.ok()) return made.status();
    fd_ = *std::move(made);
    return fd_.get();
  }

 private:
  int root_ = -1;
  Target* parent_ = nullptr;
  std::string name_;
  mode_t mode_ = 0;
  UniqueFd fd_;
};

class TreeCopier {
 public:
  TreeCopier(const CopyOptions& options, int to_root) : options_(options), to_root_(to_root) {}

  absl::Status CopyDirectory(int from, Target& to, const std::string& rel, int depth) {
    absl::StatusOr<std::vector<std::string>> names = ListDirectory(from);
    if (!names.ok())
      return absl::InternalError(absl::StrCat("'", rel, "': ", names.status().message()));
    for (const std::string& name : *names) {
      const std::string child = rel.empty() ? name : absl::StrCat(rel, "/", name);
      struct stat st;
      if (fstatat(from, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) continue;
        return Errno("cannot read", child);
      }
      const bool is_dir = S_ISDIR(st.st_mode);
      if (!is_dir && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) continue;
      const CopyChoice choice = Choose(name, child, is_dir);
      if (choice == CopyChoice::kSkip || (!is_dir && choice == CopyChoice::kSearch)) continue;
      if (choice == CopyChoice::kCopy && ++entries_ > options_.max_entries) {
        return absl::ResourceExhaustedError(
            absl::StrCat("more than ", options_.max_entries, " files to copy"));
      }
      if (is_dir) {
        absl::Status s = CopySubdirectory(from, to, name, child, st, depth, choice);
        if (!s.ok()) return s;
        continue;
      }
      absl::StatusOr<int> target = to.Get(options_.uid);
      if (!target.ok()) return target.status();
      absl::Status s = S_ISLNK(st.st_mode) ? CopyLink(from, *target, name, child)
                                           : CopyFile(from, *target, name, child, st);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
  CopyChoice Choose(const std::string& name, const std::string& rel, bool is_dir) const {
    if (options_.skip_bytecode && (is_dir ? name == "__pycache__" : absl::EndsWith(name, ".pyc"))) {
      return CopyChoice::kSkip;
    }
    return options_.choose ? options_.choose(rel, is_dir) : CopyChoice::kCopy;
  }

  absl::Status CopySubdirectory(int from, Target& to, const std::string& name,
                                const std::string& rel, const struct stat& st, int depth,
                                CopyChoice choice) {
    if (depth + 1 > options_.max_depth) {
      return absl::ResourceExhaustedError(
          absl::StrCat("'", rel, "' is nested deeper than ", options_.max_depth, " directories"));
    }
    UniqueFd source(openat(from, name.c_str(), kDirFlags));
    if (!source.ok()) return Errno("cannot open", rel);
    Target target(&to, name, st.st_mode);
    if (choice == CopyChoice::kCopy) {
      if (absl::StatusOr<int> made = target.Get(options_.uid); !made.ok()) return made.status();
    }
    return CopyDirectory(source.get(), target, rel, depth + 1);
  }

  absl::Status CopyLink(int from, int to, const std::string& name, const std::string& rel) {
    char target[PATH_MAX + 1];
    const ssize_t n = readlinkat(from, name.c_str(), target, PATH_MAX);
    if (n < 0) return Errno("cannot read link", rel);
    target[n] = '\0';
    if (absl::Status s = DeleteEntry(to, name); !s.ok()) return s;
    if (symlinkat(target, to, name.c_str()) != 0) return Errno("cannot make link", rel);
    if (options_.uid != static_cast<uid_t>(-1) &&
        fchownat(to, name.c_str(), options_.uid, options_.uid, AT_SYMLINK_NOFOLLOW) != 0) {
      return Errno("cannot chown", rel);
    }
    return absl::OkStatus();
  }

  absl::Status CopyFile(int from, int to, const std::string& name, const std::string& rel,
                        const struct stat& listed) {
    // O_NONBLOCK: a fifo swapped in since the listing must not block the worker.
    UniqueFd in(openat(from, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    struct stat st;
    if (!in.ok() || fstat(in.get(), &st) != 0) return Errno("cannot open", rel);
    if (!S_ISREG(st.st_mode) || st.st_ino != listed.st_ino) return absl::OkStatus();
    const std::pair<dev_t, ino_t> key{st.st_dev, st.st_ino};
    if (st.st_nlink > 1) {
      auto first = linked_.find(key);
      if (first != linked_.end()) {
        if (absl::Status s = DeleteEntry(to, name); !s.ok()) return s;
        if (linkat(to_root_, first->second.c_str(), to, name.c_str(), 0) != 0) {
          return Errno("cannot link", rel);
        }
        if (options_.copied_files != nullptr) options_.copied_files->push_back(rel);
        return absl::OkStatus();
      }
      linked_.emplace(key, rel);
    }
    absl::StatusOr<UniqueFd> out = NewFile(to, name, st.st_mode, options_.uid);
    if (!out.ok()) return out.status();
    if (options_.copied_files != nullptr) options_.copied_files->push_back(rel);
    if (absl::Status s = CopyData(in.get(), out->get(), st.st_size, rel); !s.ok()) return s;
    if (ftruncate(out->get(), st.st_size) != 0) return Errno("cannot size", rel);
    return absl::OkStatus();
  }

  // The file's data extents, leaving its holes as holes.
  absl::Status CopyData(int in, int out, off_t size, const std::string& rel) {
    std::vector<char> buffer(1 << 20);
    off_t position = 0;
    while (position < size) {
      off_t data = lseek(in, position, SEEK_DATA);
      if (data < 0 && errno == ENXIO) break;  // only a hole is left
      if (data < 0) data = position;          // no hole support: all data
      off_t hole = lseek(in, data, SEEK_HOLE);
      if (hole < 0 || hole > size) hole = size;
      bytes_ += hole - data;
      if (bytes_ > options_.max_bytes) {
        return absl::ResourceExhaustedError(
            absl::StrCat("more than ", options_.max_bytes >> 20, " MiB of files to copy"));
      }
      for (off_t at = data; at < hole;) {
        const size_t want = static_cast<size_t>(std::min<off_t>(hole - at, buffer.size()));
        const ssize_t n = pread(in, buffer.data(), want, at);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return Errno("cannot read", rel);
        if (n == 0) break;  // shrunk meanwhile
        if (!WriteAll(out, buffer.data(), static_cast<size_t>(n), at)) {
          return Errno("cannot write", rel);
        }
        at += n;
      }
      position = hole;
    }
    return absl::OkStatus();
  }

  const CopyOptions& options_;
  const int to_root_;
  int64_t bytes_ = 0;
  int64_t entries_ = 0;
  std::map<std::pair<dev_t, ino_t>, std::string> linked_;  // first copy of a multi-name file
};

}  // namespace

absl::Status ForEachName(int fd, const std::function<bool(const std::string&)>& visit) {
  const int own = dup(fd);
  DIR* listing = own >= 0 ? fdopendir(own) : nullptr;
  if (listing == nullptr) {
    absl::Status error = Errno("cannot list", absl::StrCat("descriptor ", fd));
    if (own >= 0) close(own);
    return error;
  }
  rewinddir(listing);  // the duplicate shares the original's offset
  while (const dirent* entry = readdir(listing)) {
    const std::string name = entry->d_name;
    if (name != "." && name != ".." && !visit(name)) break;
  }
  closedir(listing);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ListDirectory(int fd) {
  std::vector<std::string> names;
  absl::Status listed = ForEachName(fd, [&](const std::string& name) {
    names.push_back(name);
    return true;
  });
  if (!listed.ok()) return listed;
  return names;
}

absl::Status CopyTree(const std::string& from, const std::string& to, const CopyOptions& options) {
  UniqueFd source = OpenRoot(from);
  if (!source.ok()) return Errno("cannot open", from);
  if (mkdir(to.c_str(), S_IRWXU) != 0 && errno != EEXIST) return Errno("cannot make", to);
  UniqueFd target = OpenRoot(to);
  if (!target.ok()) return Errno("cannot open", to);
  if (!Chown(target.get(), options.uid)) return Errno("cannot chown", to);
  TreeCopier copier(options, target.get());
  Target root(target.get());
  return copier.CopyDirectory(source.get(), root, "", 0);
}

absl::Status WriteFileBeneath(const std::string& root, const std::string& rel,
                              const std::string& content, uid_t uid) {
  std::vector<std::string> names = absl::StrSplit(rel, '/', absl::SkipEmpty());
  if (rel.empty() || rel[0] == '/' || names.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("'", rel, "' is not a relative file path"));
  }
  for (const std::string& name : names) {
    if (name == "..") return absl::InvalidArgumentError(absl::StrCat("'", rel, "' holds '..'"));
  }
  UniqueFd dir = OpenRoot(root);
  if (!dir.ok()) return Errno("cannot open", root);
  for (size_t i = 0; i + 1 < names.size(); ++i) {
    if (names[i] == ".") continue;
    absl::StatusOr<UniqueFd> next = MakeDirectory(dir.get(), names[i], 0755, uid);
    if (!next.ok()) return next.status();
    dir = *std::move(next);
  }
  absl::StatusOr<UniqueFd> file = NewFile(dir.get(), names.back(), 0644, uid);
  if (!file.ok()) return file.status();
  if (!WriteAll(file->get(), content.data(), content.size(), 0)) return Errno("cannot write", rel);
  return absl::OkStatus();
}

absl::Status DeleteTree(const std::string& given) {
  std::string path = given;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.find_last_of('/');
  const std::string parent = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  UniqueFd dir(open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.ok()) return errno == ENOENT ? absl::OkStatus() : Errno("cannot open", parent);
  absl::Status s = DeleteEntry(dir.get(), name);
  return s.ok() ? s : absl::InternalError(absl::StrCat("removing ", path, ": ", s.message()));
}

}  // namespace loom::sandbox
