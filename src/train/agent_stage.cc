#include "train/agent_stage.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>

#include "loom/chat/special_tokens.h"
#include "loom/config/check.h"

namespace loom::train {

absl::StatusOr<std::unique_ptr<AgentStage>> AgentStage::Create(const TrainContext& context,
                                                               rollout::RolloutEngine& engine) {
  const auto& datasets = context.config.tasks.datasets;
  if (std::none_of(datasets.begin(), datasets.end(),
                   [](const config::DatasetSection& d) { return d.environment == "sandbox"; })) {
    return nullptr;
  }
  auto turn_end = chat::ToolCallsEndIds(context.tokenizer);
  if (!turn_end.ok()) return turn_end.status();
  auto log = metrics::MetricsWriter::Open(context.run_dir.trajectories_path());
  if (!log.ok()) return log.status();
  auto clients = rpc::StartSandboxClients(context.config.sandbox);
  if (!clients.ok()) return clients.status();
  std::unique_ptr<AgentStage> stage(new AgentStage(context, *std::move(log)));
  stage->clients_ = *std::move(clients);
  agent::AgentOptions options;
  options.scaffold = rpc::ScaffoldOptionsFrom(context.config.sandbox);
  options.turn_timeout_s = context.config.sandbox.episode_timeout_s;
  options.eos_id = context.special_tokens.eos;
  stage->episodes_ =
      std::make_unique<agent::AgentEpisodes>(*stage->clients_.pool, context.tokenizer, options);
  stage->rollout_ = std::make_unique<agent::AgentRollout>(
      *stage->episodes_, engine, context.tokenizer, context.special_tokens.eos,
      *std::move(turn_end), context.config.sandbox.max_turn_tokens,
      /*lockstep=*/context.config.run.deterministic);
  return stage;
}

nlohmann::json TrajectoryJson(const v1::Trajectory& trajectory) {
  std::string text;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;  // a reward of 0 is a reward
  LOOM_CHECK(google::protobuf::util::MessageToJsonString(trajectory, &text, options).ok(),
             "protobuf cannot print a trajectory as JSON");
  return nlohmann::json::parse(text);
}

absl::StatusOr<v1::Trajectory> TrajectoryFromJson(const nlohmann::json& json,
                                                  const std::string& what) {
  v1::Trajectory trajectory;
  const auto parsed = google::protobuf::util::JsonStringToMessage(json.dump(), &trajectory);
  if (!parsed.ok()) return absl::DataLossError(what + ": " + parsed.ToString());
  return trajectory;
}

absl::Status AgentStage::Log(const rollout::SampleState& state, const SampleEntry& info) {
  return log_.Write({{"sample", state.id},
                     {"dataset", context_.datasets[info.dataset]->name()},
                     {"effort", info.effort},
                     {"version", context_.policy_version},
                     {"prompt_length", state.prompt_length},
                     {"tokens", state.tokens},
                     {"loss_mask", state.loss_mask},
                     {"trajectory", TrajectoryJson(*info.trajectory)}});
}

}  // namespace loom::train
