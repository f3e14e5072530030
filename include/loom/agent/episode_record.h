#pragma once
// What a checkpoint holds of an agent episode: where it runs and its turns
// so far (EpisodeRecord) while it runs, its trajectory once it ended; each
// with its JSON codec.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/v1/sandbox.pb.h"

namespace loom::agent {

// Where an episode runs: the worker (as the pool names it) and its session.
struct EpisodePlace {
  std::string target;
  std::string session_id;
};

// What the run loop has seen of one episode, for a checkpoint: where it
// runs, and each turn's request (whose tokens went into the sample) with the
// completion handed back for it, or whether the sample was cut there. No
// turns: the worker's first request has not reached the engine. A snapshot,
// when one was taken, is of the episode waiting on the last turn or, when
// that turn was answered, on the next; or, without `pending`, the episode's
// final trajectory (it ended as the checkpoint was taken).
struct EpisodeRecord {
  struct Turn {
    v1::GenerateRequest request;
    std::optional<std::string> completion;
    bool cut = false;
  };
  EpisodePlace place;
  std::vector<Turn> turns;
  std::optional<v1::EpisodeSnapshot> snapshot;
};

// An EpisodeRecord as a checkpoint holds it (requests in the protobuf JSON
// mapping, a snapshot as base64 of its protobuf bytes), and back, with a
// DATA_LOSS status led by `what` when malformed.
nlohmann::json EpisodeRecordJson(const EpisodeRecord& record);
absl::StatusOr<EpisodeRecord> EpisodeRecordFromJson(const nlohmann::json& json,
                                                    const std::string& what);

// A trajectory in the protobuf JSON mapping (the .proto's field names, zeros
// printed), as trajectories.jsonl and checkpoints hold it; and back, with a
// DATA_LOSS status led by `what` when the JSON is not a trajectory.
nlohmann::json TrajectoryJson(const v1::Trajectory& trajectory);
absl::StatusOr<v1::Trajectory> TrajectoryFromJson(const nlohmann::json& json,
                                                  const std::string& what);

}  // namespace loom::agent
