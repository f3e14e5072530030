#include "loom/agent/outcome.h"

#include <tuple>

#include "loom/config/json_reader.h"
#include "loom/v1/sandbox.pb.h"

namespace loom::agent {

bool EpisodeOutcome::operator==(const EpisodeOutcome& other) const {
  auto fields = [](const EpisodeOutcome& o) {
    return std::tie(o.reward, o.answer, o.steps, o.format_errors, o.failure_reason,
                    o.infrastructure, o.repercussion);
  };
  return fields(*this) == fields(other);
}

EpisodeOutcome OutcomeOf(const v1::Trajectory& trajectory) {
  EpisodeOutcome outcome;
  outcome.reward = trajectory.verdict().reward();
  outcome.answer = trajectory.answer();
  outcome.steps = trajectory.steps();
  outcome.format_errors = trajectory.format_errors();
  outcome.failure_reason = trajectory.failure_reason();
  outcome.infrastructure = trajectory.penalty();
  outcome.repercussion = trajectory.repercussion();
  return outcome;
}

nlohmann::json OutcomeJson(const EpisodeOutcome& outcome) {
  return {{"reward", outcome.reward},
          {"answer", outcome.answer},
          {"steps", outcome.steps},
          {"format_errors", outcome.format_errors},
          {"failure_reason", outcome.failure_reason},
          {"infrastructure", outcome.infrastructure},
          {"repercussion", outcome.repercussion}};
}

absl::StatusOr<EpisodeOutcome> OutcomeFromJson(const nlohmann::json& json,
                                               const std::string& source) {
  JsonReader read(source, absl::StatusCode::kDataLoss);
  EpisodeOutcome outcome;
  read.Get(json, "reward", outcome.reward);
  read.Get(json, "answer", outcome.answer);
  read.Get(json, "steps", outcome.steps);
  read.Get(json, "format_errors", outcome.format_errors);
  read.Get(json, "failure_reason", outcome.failure_reason);
  read.Get(json, "infrastructure", outcome.infrastructure);
  read.Get(json, "repercussion", outcome.repercussion);
  if (read.ok() && (outcome.steps < 0 || outcome.format_errors < 0)) {
    read.Fail(outcome.steps < 0 ? "steps" : "format_errors", "is negative");
  }
  if (!read.ok()) return read.status();
  return outcome;
}

}  // namespace loom::agent
