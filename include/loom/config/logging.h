#pragma once
// Process-wide logging (spdlog): a console sink on stderr, plus the run's
// log.txt once a run directory exists. Call from main() before threads start.

#include <string>

#include "absl/status/status.h"

namespace loom {

// Sets the console level: trace, debug, info, warn, error or off.
absl::Status SetupLogging(const std::string& level);

// Adds `path` (appended to) as a second sink at the current level.
absl::Status AddLogFile(const std::string& path);

// Rank `rank` of a multi-rank run: console lines carry "[rank N]", and
// ranks other than 0 print only warnings and errors there (their log file
// keeps everything). Call after SetupLogging, before AddLogFile.
void SetConsoleRank(int rank);

}  // namespace loom
