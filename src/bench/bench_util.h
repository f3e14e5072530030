#pragma once
// Small helpers the bench drivers share.

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "loom/config/files.h"

namespace loom::bench {

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The value at fraction `q` of the sorted values (0 when there are none).
inline double Percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t index = std::min(values.size() - 1, static_cast<size_t>(q * values.size()));
  return values[index];
}

// A scratch directory ($TMPDIR/loom-bench-<what>-XXXXXX) removed on
// destruction; path() is empty when it could not be made.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& what) {
    std::string pattern =
        (std::filesystem::temp_directory_path() / ("loom-bench-" + what + "-XXXXXX")).string();
    path_ = ::mkdtemp(pattern.data()) != nullptr ? pattern : "";
  }
  ~ScratchDir() {
    if (!path_.empty()) (void)RemoveTree(path_);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace loom::bench
