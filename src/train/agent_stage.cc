#include "train/agent_stage.h"

#include <algorithm>

#include "loom/chat/special_tokens.h"
#include "loom/config/check.h"
#include "loom/tasks/agent_jsonl.h"
#include "loom/tasks/agent_tasks.h"
#include "loom/train/agent_evaluator.h"
#include "loom/v1/sandbox.pb.h"

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
  std::unique_ptr<AgentStage> stage(new AgentStage(context, engine, *std::move(log)));
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
  if (absl::Status s = stage->StartHarnesses(engine); !s.ok()) return s;
  return stage;
}

absl::Status AgentStage::StartHarnesses(rollout::RolloutEngine& engine) {
  const config::RunConfig& config = context_.config;
  const int64_t context_window = context_.model.config().max_position_embeddings;
  for (size_t d = 0; d < config.tasks.datasets.size(); ++d) {
    const config::DatasetSection& dataset = config.tasks.datasets[d];
    auto scaffold = DatasetScaffold(dataset, context_window, config.rollout.max_new_tokens);
    if (!scaffold.ok()) return scaffold.status();
    if (!scaffold->harness) continue;  // the built-in loop
    agent::HarnessSpec spec = *std::move(scaffold->harness);
    std::string version = agent::HarnessVersion(spec, config.sandbox.harness_dir);
    harness_of_[static_cast<int>(d)] = {std::move(spec), std::move(version)};
  }
  if (harness_of_.empty()) return absl::OkStatus();
  rollout::EngineOptions options = engine.options();
  options.initial_version = engine.policy_version();
  auto harnesses = agent::HarnessEpisodes::Create(context_.model, context_.tokenizer, options,
                                                  clients_.pool->options());
  if (!harnesses.ok()) return harnesses.status();
  harnesses_ = *std::move(harnesses);
  return absl::OkStatus();
}

void AgentStage::BeforeWeightUpdate() {
  if (harnesses_ != nullptr) harnesses_->Pause();
}

absl::Status AgentStage::AfterWeightUpdate(int64_t policy_version) {
  return harnesses_ != nullptr ? harnesses_->Resume(policy_version) : absl::OkStatus();
}

v1::Task AgentStage::Task(const SampleEntry& entry) const {
  if (entry.problem->agent_task) return entry.problem->agent_task->task;
  const config::DatasetSection& spec = context_.config.tasks.datasets[entry.dataset];
  return tasks::BuiltinTask(spec.kind, entry.problem->task_seed);
}

void AgentStage::Start(const SampleEntry& entry, rollout::SampleRequest request) {
  const int effort = context_.config.effort.PromptEffort(entry.effort);
  const auto harness = harness_of_.find(entry.dataset);
  if (harness == harness_of_.end()) return rollout_->Start(std::move(request), Task(entry), effort);
  const config::SandboxSection& sandbox = context_.config.sandbox;
  agent::HarnessEpisodeOptions options;
  if (effort > 0) options.effort = std::to_string(effort);
  options.temperature = request.sampling.temperature;
  options.max_turn_tokens = sandbox.max_turn_tokens;
  options.timeout_s = sandbox.max_time_s;
  harnesses_->Start(entry.id, harness->second.spec, Task(entry), std::move(options));
}

absl::StatusOr<bool> AgentStage::Resume(const SampleEntry& entry, rollout::SampleRequest request,
                                        const nlohmann::json& json) {
  if (json.is_null()) {
    Start(entry, std::move(request));
    return false;
  }
  const std::string sample = "checkpoint state.json: sample " + std::to_string(entry.id);
  auto record = agent::EpisodeRecordFromJson(json, sample + ": episode");
  if (!record.ok()) return record.status();
  const bool attaches = !record->turns.empty();
  if (attaches && engine_.Find(entry.id) == nullptr) {
    return absl::DataLossError(sample + " has an episode record but no tokens");
  }
  // Without turns the record's session is released and the episode starts again.
  rollout_->Resume(std::move(request), Task(entry),
                   context_.config.effort.PromptEffort(entry.effort), *std::move(record));
  return attaches;
}

absl::Status AgentStage::TakeHarnessEpisodes(double wait_s, const SampleTable& table,
                                             std::vector<Ended>& ended) {
  for (auto& [id, episode] : harnesses_->Take(wait_s)) {
    const SampleEntry* entry = table.Find(id);
    LOOM_CHECK(entry != nullptr, "harness episode " << id << " is not in the table");
    std::vector<rollout::SampleState>& segments = episode.record.segments;
    nlohmann::json sequences = nlohmann::json::array();
    for (rollout::SampleState& segment : segments) {
      segment.id = id;
      sequences.push_back({{"prompt_length", segment.prompt_length},
                           {"tokens", segment.tokens},
                           {"loss_mask", segment.loss_mask}});
    }
    if (absl::Status s = log_.Write({{"sample", id},
                                     {"dataset", context_.datasets[entry->dataset]->name()},
                                     {"effort", entry->effort},
                                     {"version", context_.policy_version},
                                     {"harness_version", harness_of_.at(entry->dataset).version},
                                     {"sequences", std::move(sequences)},
                                     {"trajectory", agent::HarnessEpisodeJson(episode)}});
        !s.ok()) {
      return s;
    }
    Ended one;
    one.outcome = agent::OutcomeOf(episode);
    one.state.id = id;
    if (!segments.empty()) {
      one.state = std::move(segments.front());
      one.sequences.assign(std::make_move_iterator(segments.begin() + 1),
                           std::make_move_iterator(segments.end()));
    }
    ended.push_back(std::move(one));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SampleEnvironment::Ended>> AgentStage::Pump(double wait_s,
                                                                       const SampleTable& table) {
  std::vector<Ended> ended;
  // Wait on the harnesses only when the built-in loop has nothing running.
  const bool harnesses_only = harnesses_ != nullptr && rollout_->inflight() == 0;
  if (harnesses_ != nullptr) {
    if (absl::Status s = TakeHarnessEpisodes(harnesses_only ? wait_s : 0, table, ended); !s.ok()) {
      return s;
    }
  }
  for (agent::AgentResult& result : rollout_->Pump(harnesses_only ? 0 : wait_s)) {
    const SampleEntry* entry = table.Find(result.state.id);
    LOOM_CHECK(entry != nullptr, "agent sample " << result.state.id << " is not in the table");
    if (absl::Status s = log_.Write({{"sample", result.state.id},
                                     {"dataset", context_.datasets[entry->dataset]->name()},
                                     {"effort", entry->effort},
                                     {"version", context_.policy_version},
                                     {"prompt_length", result.state.prompt_length},
                                     {"tokens", result.state.tokens},
                                     {"loss_mask", result.state.loss_mask},
                                     {"trajectory", std::move(result.trajectory)}});
        !s.ok()) {
      return s;
    }
    ended.push_back({std::move(result.state), std::move(result.outcome), {}});
  }
  return ended;
}

void AgentStage::BeginExport() {
  exported_.clear();
  const config::SandboxSection& sandbox = context_.config.sandbox;
  if (sandbox.snapshot_mb <= 0) return;
  const double wait_s =
      std::min<double>(sandbox.tool_timeout_s, context_.config.ckpt.preempt_deadline_s / 3);
  rollout_->TakeSnapshots(int64_t{sandbox.snapshot_mb} << 20, wait_s);
}

SampleEnvironment::Exported AgentStage::Export(uint64_t id) {
  // A running episode's sandbox is on a worker. On a leased session its
  // record is kept (and, once it has turns, its sample) and a resumed run
  // attaches to it again; otherwise that run starts it again from its prompt.
  Exported exported;
  std::optional<agent::EpisodeRecord> episode = rollout_->Record(id);
  if (!episode) return exported;
  exported.record = agent::EpisodeRecordJson(*episode);
  if (episode->turns.empty()) return exported;
  exported.tokens = true;
  exported.held = rollout_->Held(id);
  exported_.insert(id);
  return exported;
}

void AgentStage::AddStepFigures(const std::map<std::string, int64_t>& masked_by_cause,
                                nlohmann::json& record) const {
  int64_t masked = 0;
  for (const auto& [cause, count] : masked_by_cause) masked += count;
  record["episodes_masked"] = masked;
  record["episodes_masked_by_cause"] = masked_by_cause;
  record["episodes_not_reattached"] = rollout_->restarted() + rollout_->restored();
  record["episodes_restored"] = rollout_->restored();
}

}  // namespace loom::train
