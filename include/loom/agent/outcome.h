#pragma once
// EpisodeOutcome: what the trainer keeps of a finished agent episode. The
// sandbox protocol's Trajectory stops in the agent module: the sample table,
// the judge and checkpoints hold this instead, with its own JSON codec.

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace loom::v1 {
class Trajectory;
}  // namespace loom::v1

namespace loom::agent {

struct EpisodeOutcome {
  double reward = 0;            // the verifier's verdict
  std::string answer;           // the submitted answer ("" if none)
  int steps = 0;                // tool calls made
  int format_errors = 0;        // turns the tool-call parser rejected
  std::string failure_reason;   // "" on success; step_limit, time_limit, sandbox_error: ...
  bool infrastructure = false;  // failed for infrastructure reasons, not the policy's: masked
  std::string repercussion;     // what the agent broke in its own environment ("" = nothing)

  bool parsed() const { return format_errors == 0; }
  // The failure's kind, without its detail: "sandbox_error" of "sandbox_error: ...".
  std::string cause() const { return failure_reason.substr(0, failure_reason.find(':')); }
  bool operator==(const EpisodeOutcome& other) const;
};

EpisodeOutcome OutcomeOf(const v1::Trajectory& trajectory);

// As a checkpoint holds it, and back: a DATA_LOSS status naming `source` and
// the field when malformed.
nlohmann::json OutcomeJson(const EpisodeOutcome& outcome);
absl::StatusOr<EpisodeOutcome> OutcomeFromJson(const nlohmann::json& json,
                                               const std::string& source);

}  // namespace loom::agent
