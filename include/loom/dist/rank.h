#pragma once
// RankInfo: where this process sits in a multi-rank job, read from the
// environment the launcher left. Two conventions are understood:
//
//   torchrun, Kubernetes, `loom launch`: RANK, WORLD_SIZE, LOCAL_RANK,
//     MASTER_ADDR, MASTER_PORT;
//   Slurm (srun): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, and the first
//     host of SLURM_STEP_NODELIST / SLURM_JOB_NODELIST as the master address
//     (MASTER_ADDR and MASTER_PORT still win when set).
//
// RANK wins over SLURM_PROCID, so torchrun under Slurm reads torchrun's
// variables. With neither, the process is rank 0 of 1. Pure functions of the
// environment passed in (tests inject it).

#include <functional>
#include <string>

#include "absl/status/statusor.h"

namespace loom::dist {

struct RankInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // the rank's index on its node; picks the GPU
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source = "single";  // "single", "torchrun" or "slurm": where these came from

  bool distributed() const { return world_size > 1; }
};

// The environment: a name's value, or null when unset.
using Getenv = std::function<const char*(const char* name)>;

// INVALID_ARGUMENT naming the variable when a value is not a number, a rank
// is outside [0, WORLD_SIZE), a port outside [1, 65535], or a node list
// cannot be read.
absl::StatusOr<RankInfo> RankFromEnvironment(const Getenv& getenv);
absl::StatusOr<RankInfo> RankFromEnvironment();  // the process's own

// The first host of a Slurm node list: "node[03-05,9],gpu1" -> "node03".
absl::StatusOr<std::string> FirstSlurmHost(const std::string& nodelist);

}  // namespace loom::dist
