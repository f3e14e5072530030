#include "loom/dist/rank.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace loom::dist {
namespace {

absl::StatusOr<int> IntVariable(const Getenv& getenv, const char* name, int fallback) {
  const char* text = getenv(name);
  if (text == nullptr) return fallback;
  int value = 0;
  if (!absl::SimpleAtoi(text, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable ", name, "='", text, "' is not an integer"));
  }
  return value;
}

}  // namespace

absl::StatusOr<std::string> FirstSlurmHost(const std::string& nodelist) {
  // The first entry ends at a comma outside brackets.
  const size_t bracket = nodelist.find('[');
  const size_t comma = nodelist.find(',');
  if (bracket == std::string::npos || (comma != std::string::npos && comma < bracket)) {
    std::string host = nodelist.substr(0, comma);
    if (host.empty()) return absl::InvalidArgumentError("empty Slurm node list");
    return host;
  }
  const size_t close = nodelist.find(']', bracket);
  if (close == std::string::npos || bracket == 0) {
    return absl::InvalidArgumentError("Slurm node list '" + nodelist + "' cannot be read");
  }
  // The first range's first number keeps its zero padding: node[03-05] -> node03.
  std::string inside = nodelist.substr(bracket + 1, close - bracket - 1);
  const size_t end = inside.find_first_of(",-");
  std::string first = inside.substr(0, end);
  if (first.empty() || first.find_first_not_of("0123456789") != std::string::npos) {
    return absl::InvalidArgumentError("Slurm node list '" + nodelist + "' cannot be read");
  }
  return nodelist.substr(0, bracket) + first +
         nodelist.substr(close + 1, nodelist.find(',', close) - close - 1);
}

absl::StatusOr<RankInfo> RankFromEnvironment(const Getenv& getenv) {
  RankInfo info;
  const char *rank_name = "RANK", *world_name = "WORLD_SIZE", *local_name = "LOCAL_RANK";
  if (getenv("RANK") != nullptr || getenv("WORLD_SIZE") != nullptr) {
    info.source = "torchrun";
  } else if (getenv("SLURM_PROCID") != nullptr) {
    info.source = "slurm";
    rank_name = "SLURM_PROCID";
    world_name = "SLURM_NTASKS";
    local_name = "SLURM_LOCALID";
  } else {
    return info;
  }
  auto rank = IntVariable(getenv, rank_name, 0);
  if (!rank.ok()) return rank.status();
  auto world = IntVariable(getenv, world_name, 1);
  if (!world.ok()) return world.status();
  auto local = IntVariable(getenv, local_name, 0);
  if (!local.ok()) return local.status();
  if (*world < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable ", world_name, "=", *world, " is not a world size"));
  }
  if (*rank < 0 || *rank >= *world) {
    return absl::InvalidArgumentError(absl::StrCat("environment variable ", rank_name, "=", *rank,
                                                   " is outside [0, ", world_name, "=", *world,
                                                   ")"));
  }
  if (*local < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable ", local_name, "=", *local, " is negative"));
  }
  info.rank = *rank;
  info.world_size = *world;
  info.local_rank = *local;
  if (const char* addr = getenv("MASTER_ADDR"); addr != nullptr && *addr != '\0') {
    info.master_addr = addr;
  } else if (info.source == "slurm") {
    const char* nodes = getenv("SLURM_STEP_NODELIST");
    if (nodes == nullptr) nodes = getenv("SLURM_JOB_NODELIST");
    if (nodes != nullptr) {
      auto host = FirstSlurmHost(nodes);
      if (!host.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("SLURM_JOB_NODELIST: ", host.status().message()));
      }
      info.master_addr = *host;
    }
  } else if (info.world_size > 1) {
    return absl::InvalidArgumentError(
        "WORLD_SIZE > 1 but MASTER_ADDR is not set: say where rank 0 listens");
  }
  auto port = IntVariable(getenv, "MASTER_PORT", info.master_port);
  if (!port.ok()) return port.status();
  if (*port < 1 || *port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable MASTER_PORT=", *port, " is not a TCP port"));
  }
  info.master_port = *port;
  return info;
}

absl::StatusOr<RankInfo> RankFromEnvironment() {
  return RankFromEnvironment([](const char* name) { return std::getenv(name); });
}

}  // namespace loom::dist
