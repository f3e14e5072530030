#include "tasks/tar.h"

#include <zlib.h>

#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace loom::tasks {
namespace {

constexpr size_t kBlock = 512;

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using Gz = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

// A NUL-terminated (or full-width) field of a header.
std::string Field(const char* header, size_t offset, size_t width) {
  const char* start = header + offset;
  size_t n = 0;
  while (n < width && start[n] != '\0') ++n;
  return std::string(start, n);
}

// An octal number field; false when malformed.
bool Octal(const char* header, size_t offset, size_t width, uint64_t* value) {
  *value = 0;
  bool digits = false;
  for (size_t i = 0; i < width; ++i) {
    const char c = header[offset + i];
    if (c == '\0' || c == ' ') {
      if (digits) break;
      continue;
    }
    if (c < '0' || c > '7' || *value > (uint64_t{1} << 60)) return false;
    *value = *value * 8 + static_cast<uint64_t>(c - '0');
    digits = true;
  }
  return digits;
}

// The "path=" record of a pax extended header, if it has one.
std::string PaxPath(const std::string& records) {
  size_t at = 0;
  while (at < records.size()) {
    const size_t space = records.find(' ', at);
    if (space == std::string::npos) break;
    size_t length = 0;
    for (size_t i = at; i < space; ++i) {
      if (records[i] < '0' || records[i] > '9') return "";
      length = length * 10 + static_cast<size_t>(records[i] - '0');
    }
    if (length == 0 || at + length > records.size()) return "";
    const std::string record = records.substr(space + 1, at + length - space - 2);  // less '\n'
    if (record.rfind("path=", 0) == 0) return record.substr(5);
    at += length;
  }
  return "";
}

// A member's path as the workspace takes it: "./" and trailing "/" gone;
// "" when it leaves the root or has empty or dot parts.
std::string Clean(std::string path) {
  while (path.rfind("./", 0) == 0) path.erase(0, 2);
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (path.empty() || path.front() == '/') return "";
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part.empty() || part == "." || part == "..") return "";
  }
  return path;
}

bool ReadExactly(gzFile in, char* data, size_t size) {
  size_t done = 0;
  while (done < size) {
    const int n =
        gzread(in, data + done, static_cast<unsigned>(std::min<size_t>(size - done, 1 << 20)));
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

absl::StatusOr<std::map<std::string, std::string>> ReadTarFiles(const std::string& path,
                                                                size_t max_bytes) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such archive"));
  }
  Gz in(gzopen(path.c_str(), "rb"));
  if (in == nullptr) return absl::NotFoundError(absl::StrCat(path, ": cannot be opened"));
  std::map<std::string, std::string> files;
  size_t total = 0;
  std::string long_name;  // from a pax or GNU long-name entry, for the next member
  char header[kBlock];
  while (true) {
    if (!ReadExactly(in.get(), header, kBlock)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ends inside a header"));
    }
    if (std::all_of(header, header + kBlock, [](char c) { return c == '\0'; })) break;
    const std::string name = Field(header, 0, 100);
    uint64_t size = 0;
    if (!Octal(header, 124, 12, &size)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": member '", name, "' has a bad size"));
    }
    const char type = header[156];
    if (size > max_bytes || total + size > max_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": its files hold more than ", max_bytes, " bytes"));
    }
    std::string content(size, '\0');
    const size_t padded = (size + kBlock - 1) / kBlock * kBlock;
    std::string padding(padded - size, '\0');
    if (!ReadExactly(in.get(), content.data(), size) ||
        !ReadExactly(in.get(), padding.data(), padding.size())) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": member '", name, "' is cut short"));
    }
    if (type == 'x') {
      long_name = PaxPath(content);
      continue;
    }
    if (type == 'L') {
      long_name = content.substr(0, content.find('\0'));
      continue;
    }
    if (type == 'g') continue;  // pax global header: nothing loom uses
    std::string member = long_name;
    long_name.clear();
    if (member.empty()) {
      const std::string prefix = Field(header, 345, 155);
      member = prefix.empty() ? name : prefix + "/" + name;
    }
    if (type == '5') continue;  // directories come with their files
    if (type != '0' && type != '\0' && type != '7') {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": member '", member, "' is not a regular file (type '",
                       std::string(1, type), "'; links are not followed)"));
    }
    const std::string clean = Clean(member);
    if (clean.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": member '", member, "' is not a relative path inside the archive"));
    }
    total += size;
    files[clean] = std::move(content);
  }
  return files;
}

}  // namespace loom::tasks
