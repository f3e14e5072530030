#include "loom/config/logging.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace loom {

absl::Status SetupLogging(const std::string& level) {
  auto parsed = spdlog::level::from_str(level);
  if (parsed == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(
        "--log-level: expected trace, debug, info, warn, error or off, got '" + level + "'");
  }
  auto logger = spdlog::stderr_color_mt("loom");
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
  logger->set_level(parsed);
  spdlog::set_default_logger(logger);
  return absl::OkStatus();
}

void SetConsoleRank(int rank) {
  auto& console = spdlog::default_logger()->sinks().front();
  console->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [rank " + std::to_string(rank) + "] [%^%l%$] %v");
  if (rank != 0) console->set_level(spdlog::level::warn);
}

absl::Status AddLogFile(const std::string& path) {
  try {
    auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path);
    sink->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
    spdlog::default_logger()->sinks().push_back(sink);
  } catch (const spdlog::spdlog_ex& e) {
    return absl::UnavailableError("cannot open log file " + path + ": " + e.what());
  }
  return absl::OkStatus();
}

}  // namespace loom
