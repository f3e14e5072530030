// The async loop's share of checkpoints: its state out at a token boundary,
// back after a periodic save, and into a resumed run (async_loop.h).

#include <spdlog/spdlog.h>

#include <algorithm>
#include <string>

#include "loom/agent/episodes.h"
#include "loom/config/check.h"
#include "loom/train/async_loop.h"

namespace loom::train {
namespace {

SampleRecord RecordOf(const SampleEntry& entry) {
  return {entry.id,
          entry.dataset,
          entry.problem_index,
          entry.subgroup_id,
          entry.effort,
          entry.config_version,
          entry.teacher,
          entry.agent,
          nullptr,
          nullptr};
}

SampleEntry EntryOf(const SampleRecord& record) {
  SampleEntry entry;
  entry.id = record.id;
  entry.subgroup_id = record.subgroup_id;
  entry.effort = record.effort;
  entry.dataset = record.dataset;
  entry.problem_index = record.problem_index;
  entry.config_version = record.config_version;
  entry.teacher = record.teacher;
  entry.agent = record.agent;
  return entry;
}

std::string Sample(uint64_t id) { return "checkpoint: sample " + std::to_string(id); }

}  // namespace

absl::StatusOr<GrpoCursor> AsyncLoop::Export() {
  GrpoCursor cursor;
  cursor.dispatcher = dispatcher_->ExportState();
  cursor.prefill_tokens = totals_.prefill_tokens;
  cursor.decode_tokens = totals_.decode_tokens;
  engine_->ParkAll();
  if (environment_ != nullptr) environment_->BeginExport();
  for (const auto& [id, entry] : table_.entries()) {
    SampleRecord record = RecordOf(entry);
    if (entry.trajectory != nullptr) record.trajectory = agent::TrajectoryJson(*entry.trajectory);
    if (entry.state) {
      cursor.records.push_back(std::move(record));
      cursor.finished.push_back(*entry.state);
      continue;
    }
    if (entry.agent) {
      SampleEnvironment::Exported exported = environment_->Export(id);
      record.episode = std::move(exported.record);
      cursor.records.push_back(std::move(record));
      if (!exported.tokens) continue;
      if (exported.held != nullptr) {
        cursor.inflight.push_back(*exported.held);
        continue;
      }
    } else {
      cursor.records.push_back(std::move(record));
    }
    auto state = engine_->Export(id);
    if (!state.ok()) return state.status();
    cursor.inflight.push_back(*std::move(state));
  }
  return cursor;
}

absl::Status AsyncLoop::ContinueAfterExport(GrpoCursor cursor) {
  if (absl::Status s = engine_->Resume(policy_version_); !s.ok()) return s;
  for (rollout::SampleState& sample : cursor.inflight) {
    // Held samples were copied, not exported: they stay where they are.
    if (environment_ != nullptr && environment_->Holds(sample.id)) continue;
    if (absl::Status s = engine_->Import(std::move(sample)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<ImportedLoop> AsyncLoop::Import(GrpoCursor cursor, const RankChange* rank_change,
                                               int64_t step, PromptSource& source) {
  if (absl::Status s = ImportDispatcher(cursor.dispatcher, rank_change); !s.ok()) return s;
  ImportedLoop imported;
  if (absl::Status s = ImportSamples(cursor, source, imported); !s.ok()) return s;
  totals_.prefill_tokens = cursor.prefill_tokens;
  totals_.decode_tokens = cursor.decode_tokens;
  step_ = step;
  return imported;
}

absl::Status AsyncLoop::ImportDispatcher(const nlohmann::json& state,
                                         const RankChange* rank_change) {
  // A rank the checkpoint had no share for (written by fewer ranks) starts
  // its dispatcher afresh.
  if (!state.is_null()) {
    if (absl::Status s = dispatcher_->ImportState(state); !s.ok()) return s;
  }
  if (rank_change == nullptr) return absl::OkStatus();
  for (const nlohmann::json& adopted : rank_change->adopted) {
    if (absl::Status s = dispatcher_->AdoptState(adopted); !s.ok()) return s;
  }
  return dispatcher_->ContinueStreamOf(rank_change->stream);
}

absl::Status AsyncLoop::ImportSamples(GrpoCursor& cursor, PromptSource& source,
                                      ImportedLoop& imported) {
  std::map<uint64_t, Episode> episodes;  // the environment's samples, by id
  for (const SampleRecord& record : cursor.records) {
    SampleEntry entry = EntryOf(record);
    auto request = source.Reopen(entry);
    if (!request.ok()) return request.status();
    if (!record.trajectory.is_null()) {
      auto trajectory = agent::TrajectoryFromJson(
          record.trajectory,
          "checkpoint state.json: sample " + std::to_string(record.id) + ": trajectory");
      if (!trajectory.ok()) return trajectory.status();
      entry.trajectory = std::make_shared<const v1::Trajectory>(*std::move(trajectory));
    }
    if (entry.agent) {
      request->id = record.id;
      episodes[record.id] = {*std::move(request), record.episode};
    }
    table_.Admit(std::move(entry));
  }
  imported.finished = cursor.finished.size();
  for (rollout::SampleState& sample : cursor.finished) {
    if (table_.Find(sample.id) == nullptr) {
      return absl::DataLossError(Sample(sample.id) + " finished but has no record");
    }
    const uint64_t id = sample.id;
    table_.Finish(id, std::move(sample));
  }
  imported.inflight = cursor.inflight.size();
  for (rollout::SampleState& sample : cursor.inflight) {
    imported.kv_tokens += sample.kv.length;
    if (absl::Status s = engine_->Import(std::move(sample)); !s.ok()) return s;
  }
  return ContinueEpisodes(std::move(episodes), imported);
}

absl::Status AsyncLoop::ContinueEpisodes(std::map<uint64_t, Episode> episodes,
                                         ImportedLoop& imported) {
  for (auto& [id, episode] : episodes) {
    const SampleEntry& entry = *table_.Find(id);
    if (entry.state) continue;  // ended: trained like any other
    if (entry.trajectory != nullptr) {
      return absl::DataLossError(Sample(id) + " has its episode's trajectory but no tokens");
    }
    auto attached = environment_->Resume(entry, std::move(episode.request), episode.record);
    if (!attached.ok()) return attached.status();
    ++(*attached ? imported.reattached : imported.started_again);
  }
  return absl::OkStatus();
}

}  // namespace loom::train
