// The async loop's share of checkpoints: its state out at a token boundary,
// back after a periodic save, and into a resumed run (async_loop.h).

#include <spdlog/spdlog.h>

#include <algorithm>
#include <string>

#include "loom/config/check.h"
#include "loom/train/async_loop.h"

namespace loom::train {
namespace {

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
    cursor.samples.push_back(entry);
    if (entry.state) continue;  // finished: the entry holds its state
    if (entry.agent) {
      SampleEnvironment::Exported exported = environment_->Export(id);
      if (!exported.record.is_null()) cursor.episodes[id] = std::move(exported.record);
      if (!exported.tokens) continue;
      if (exported.held != nullptr) {
        cursor.inflight.push_back(*exported.held);
        continue;
      }
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
  for (SampleEntry& entry : cursor.samples) {
    auto request = source.Reopen(entry);
    if (!request.ok()) return request.status();
    const uint64_t id = entry.id;
    imported.finished += entry.state.has_value();
    if (entry.agent) {
      request->id = id;
      const auto episode = cursor.episodes.find(id);
      episodes[id] = {*std::move(request), episode != cursor.episodes.end()
                                               ? std::move(episode->second)
                                               : nlohmann::json()};
    }
    table_.Admit(std::move(entry));
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
    if (entry.outcome) {
      return absl::DataLossError(Sample(id) + " has its episode's outcome but no tokens");
    }
    auto attached = environment_->Resume(entry, std::move(episode.request), episode.record);
    if (!attached.ok()) return attached.status();
    ++(*attached ? imported.reattached : imported.started_again);
  }
  return absl::OkStatus();
}

}  // namespace loom::train
