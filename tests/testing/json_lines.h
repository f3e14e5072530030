#pragma once
// The whole lines of a JSON-lines file a running process may be appending
// to (a last line without its newline is still being written: left out).

#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "testing/temp_dir.h"

namespace loom::testing {

inline std::vector<nlohmann::json> ReadJsonLines(const std::string& path) {
  std::vector<nlohmann::json> records;
  std::istringstream in(ReadAll(path));
  for (std::string line; std::getline(in, line);) {
    if (in.eof()) break;  // no newline yet: still being written
    if (!line.empty()) records.push_back(nlohmann::json::parse(line));
  }
  return records;
}

}  // namespace loom::testing
