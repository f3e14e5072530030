#include "train/stage_checkpoint.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <set>

#include "loom/config/check.h"
#include "loom/train/checkpointer.h"
#include "loom/train/live_config.h"
#include "loom/v1/sandbox.pb.h"
#include "train/agent_stage.h"
#include "train/sft_stage.h"

namespace loom::train {
namespace {

TrainState CursorState(const TrainContext& context, const char* stage, int64_t step,
                       const AdamW& optimizer) {
  TrainState state;
  state.cursor.stage = stage;
  state.cursor.step = step;
  state.cursor.policy_version = context.policy_version;
  if (context.live != nullptr) {
    state.cursor.config_version = context.live->version();
    state.cursor.live = context.live->State();
  }
  state.optimizer = optimizer.StateDict();
  return state;
}

absl::StatusOr<TrainState> CaptureAsync(const TrainContext& context, AsyncStageState& stage) {
  AsyncLoop& loop = stage.loop;
  TrainState state = CursorState(context, stage.stage, stage.step, stage.optimizer);
  GrpoCursor grpo;
  grpo.dispatcher = loop.dispatcher().ExportState();
  grpo.prefill_tokens = loop.totals().prefill_tokens;
  grpo.decode_tokens = loop.totals().decode_tokens;
  loop.engine().ParkAll();
  if (loop.agents() != nullptr) loop.agents()->TakeSnapshots();
  std::set<uint64_t> attachable;  // episodes a resumed run attaches to again
  for (const auto& [id, entry] : loop.table().entries()) {
    SampleRecord record{id,
                        entry.dataset,
                        entry.problem_index,
                        entry.subgroup_id,
                        entry.effort,
                        entry.config_version,
                        entry.teacher,
                        entry.agent,
                        nullptr,
                        nullptr};
    if (entry.trajectory != nullptr) record.trajectory = TrajectoryJson(*entry.trajectory);
    // A running episode's sandbox is on a worker. On a leased session its
    // record is kept (and, once it has turns, its sample) and a resumed run
    // attaches to it again; otherwise that run starts it again from its prompt.
    std::optional<agent::EpisodeRecord> episode;
    if (entry.agent && !entry.state) episode = loop.agents()->rollout()->Record(id);
    if (episode) record.episode = agent::EpisodeRecordJson(*episode);
    grpo.records.push_back(std::move(record));
    if (entry.state) {
      grpo.finished.push_back(*entry.state);
      continue;
    }
    if (entry.agent) {
      if (!episode || episode->turns.empty()) continue;
      attachable.insert(id);
      if (const rollout::SampleState* held = loop.agents()->rollout()->Held(id)) {
        grpo.inflight.push_back(*held);
        continue;
      }
    }
    auto exported = loop.engine().Export(id);
    if (!exported.ok()) return exported.status();
    grpo.inflight.push_back(*std::move(exported));
  }
  state.grpo = std::move(grpo);
  if (loop.agents() != nullptr) loop.agents()->set_checkpointed(std::move(attachable));
  return state;
}

// Puts exported samples back, in id (= arrival) order.
absl::Status ImportInflight(rollout::RolloutEngine& engine,
                            std::vector<rollout::SampleState>&& samples) {
  for (rollout::SampleState& sample : samples) {
    if (absl::Status s = engine.Import(std::move(sample)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status AsyncBoundary(TrainContext& context, AsyncStageState loop, bool after_step) {
  if (context.checkpointer == nullptr) return absl::OkStatus();
  rollout::RolloutEngine& engine = loop.loop.engine();
  return context.checkpointer->Boundary(
      after_step, context.policy_version, context.model,
      [&] { return CaptureAsync(context, loop); },
      [&](TrainState&& state) {
        if (absl::Status s = engine.Resume(context.policy_version); !s.ok()) return s;
        std::vector<rollout::SampleState>& inflight = state.grpo->inflight;
        // Held agent samples were copied, not exported: they stay where they are.
        AgentStage* agents = loop.loop.agents();
        inflight.erase(std::remove_if(inflight.begin(), inflight.end(),
                                      [&](const rollout::SampleState& s) {
                                        return agents != nullptr &&
                                               agents->rollout()->Held(s.id) != nullptr;
                                      }),
                       inflight.end());
        return ImportInflight(engine, std::move(inflight));
      });
}

absl::Status RestoreAsync(TrainContext& context, AsyncStageState loop,
                          const EpisodeContinuation& continue_episode) {
  if (context.checkpointer == nullptr) return absl::OkStatus();
  std::optional<TrainState> state = context.checkpointer->TakeResume(loop.stage);
  if (!state) return absl::OkStatus();
  LOOM_CHECK(state->grpo.has_value(),
             "checkpoint of stage " << loop.stage << " without a loop cursor");
  GrpoCursor& grpo = *state->grpo;
  SampleTable& table = loop.loop.table();
  if (absl::Status s = loop.optimizer.LoadStateDict(state->optimizer); !s.ok()) return s;
  // A rank the checkpoint had no share for (written by fewer ranks) starts
  // its dispatcher afresh.
  dispatch::Dispatcher& dispatcher = loop.loop.dispatcher();
  if (!grpo.dispatcher.is_null()) {
    if (absl::Status s = dispatcher.ImportState(grpo.dispatcher); !s.ok()) return s;
  }
  if (state->rank_change) {
    for (const nlohmann::json& adopted : state->rank_change->adopted) {
      if (absl::Status s = dispatcher.AdoptState(adopted); !s.ok()) return s;
    }
    if (absl::Status s = dispatcher.ContinueStreamOf(state->rank_change->stream); !s.ok()) {
      return s;
    }
  }
  std::map<uint64_t, agent::EpisodeRecord> episodes;  // running on leased sessions
  for (const SampleRecord& r : grpo.records) {
    if (r.dataset < 0 || r.dataset >= static_cast<int>(context.datasets.size())) {
      return absl::DataLossError("checkpoint sample " + std::to_string(r.id) + ": dataset " +
                                 std::to_string(r.dataset) + " does not exist in this config");
    }
    SampleEntry entry;
    entry.id = r.id;
    entry.subgroup_id = r.subgroup_id;
    entry.effort = r.effort;
    entry.dataset = r.dataset;
    entry.problem_index = r.problem_index;
    entry.config_version = r.config_version;
    entry.teacher = r.teacher;
    entry.agent = r.agent;
    if (r.agent && context.config.tasks.datasets[r.dataset].environment != "sandbox") {
      return absl::FailedPreconditionError(
          "checkpoint sample " + std::to_string(r.id) + " is an agent episode but dataset '" +
          context.config.tasks.datasets[r.dataset].name + "' has no `environment: sandbox` now");
    }
    if (!r.trajectory.is_null()) {
      auto trajectory = TrajectoryFromJson(
          r.trajectory, "checkpoint state.json: sample " + std::to_string(r.id) + ": trajectory");
      if (!trajectory.ok()) return trajectory.status();
      entry.trajectory = std::make_shared<const v1::Trajectory>(*std::move(trajectory));
    }
    if (!r.episode.is_null()) {
      auto episode = agent::EpisodeRecordFromJson(
          r.episode, "checkpoint state.json: sample " + std::to_string(r.id) + ": episode");
      if (!episode.ok()) return episode.status();
      episodes[r.id] = *std::move(episode);
    }
    entry.problem =
        std::make_shared<tasks::Problem>(context.datasets[r.dataset]->Train(r.problem_index));
    table.Admit(std::move(entry));
  }
  const size_t finished = grpo.finished.size();
  for (rollout::SampleState& sample : grpo.finished) {
    if (table.Find(sample.id) == nullptr) {
      return absl::DataLossError("checkpoint: finished sample " + std::to_string(sample.id) +
                                 " has no record");
    }
    const uint64_t id = sample.id;
    table.Finish(id, std::move(sample));
  }
  int64_t kv_tokens = 0;
  for (const rollout::SampleState& sample : grpo.inflight) kv_tokens += sample.kv.length;
  const size_t inflight = grpo.inflight.size();
  if (absl::Status s = ImportInflight(loop.loop.engine(), std::move(grpo.inflight)); !s.ok()) {
    return s;
  }
  // Episodes that were running on leased sessions are attached to again;
  // the others start again from their prompts, under the same sample ids
  // (and so the same sampling seeds).
  int64_t restarted = 0, resumed = 0;
  for (const auto& [id, entry] : table.entries()) {
    if (!entry.agent || entry.state) continue;
    if (entry.trajectory != nullptr) {
      return absl::DataLossError("checkpoint: agent sample " + std::to_string(id) +
                                 " has a trajectory but no tokens");
    }
    std::optional<agent::EpisodeRecord> episode;
    if (auto it = episodes.find(id); it != episodes.end()) episode = std::move(it->second);
    if (!episode || episode->turns.empty()) {
      continue_episode(entry, std::move(episode));
      ++restarted;
      continue;
    }
    if (loop.loop.engine().Find(id) == nullptr) {
      return absl::DataLossError("checkpoint: agent sample " + std::to_string(id) +
                                 " has an episode record but no tokens");
    }
    continue_episode(entry, std::move(episode));
    ++resumed;
  }
  const int written_ranks =
      state->rank_change ? state->rank_change->written_ranks : context.world_size();
  const std::vector<int> taken_over =
      state->rank_change ? state->rank_change->adopted_ranks : std::vector<int>{};
  loop.loop.totals().prefill_tokens = grpo.prefill_tokens;
  loop.loop.totals().decode_tokens = grpo.decode_tokens;
  loop.step = state->cursor.step;
  spdlog::info(
      "{} resumes at step {}: {} in-flight samples restored with {} KV tokens "
      "(no re-prefill), {} finished samples awaiting training, {} agent episodes attached "
      "again, {} started again",
      loop.stage, loop.step, inflight, kv_tokens, finished, resumed, restarted);
  return context.metrics.Write({{"event", "resume"},
                                {"stage", loop.stage},
                                {"step", loop.step},
                                {"version", context.policy_version},
                                {"inflight_restored", inflight},
                                {"kv_tokens_restored", kv_tokens},
                                {"finished_restored", finished},
                                {"episodes_resumed", resumed},
                                {"episodes_restarted", restarted},
                                {"ranks_written", written_ranks},
                                {"ranks_taken_over", taken_over}});
}

absl::Status SftBoundary(TrainContext& context, AdamW& optimizer, const SftCursor& cursor,
                         int64_t step, bool after_step) {
  if (context.checkpointer == nullptr) return absl::OkStatus();
  return context.checkpointer->Boundary(
      after_step, context.policy_version, context.model,
      [&]() -> absl::StatusOr<TrainState> {
        TrainState state = CursorState(context, kSftStage, step, optimizer);
        state.sft = cursor;
        return state;
      },
      [](TrainState&&) { return absl::OkStatus(); });
}

absl::StatusOr<bool> RestoreSft(TrainContext& context, AdamW& optimizer, SftCursor& cursor,
                                int64_t& step) {
  if (context.checkpointer == nullptr) return false;
  std::optional<TrainState> state = context.checkpointer->TakeResume(kSftStage);
  if (!state) return false;
  if (!state->sft) return absl::DataLossError("SFT checkpoint without an SFT data cursor");
  if (absl::Status s = optimizer.LoadStateDict(state->optimizer); !s.ok()) return s;
  cursor = *state->sft;
  step = state->cursor.step;
  spdlog::info("SFT resumes at step {}", step);
  absl::Status written = context.metrics.Write({{"event", "resume"},
                                                {"stage", kSftStage},
                                                {"step", step},
                                                {"version", context.policy_version}});
  if (!written.ok()) return written;
  return true;
}

}  // namespace loom::train
