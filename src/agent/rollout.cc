#include "loom/agent/rollout.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "loom/config/check.h"

namespace loom::agent {

void AgentRollout::Start(rollout::SampleRequest request, const v1::Task& task, int effort) {
  request.stop.eos_token_ids.clear();
  request.stop.tool_call_end = {turn_end_, {eos_id_}};
  request.stop.max_turn_tokens = max_turn_tokens_;
  const uint64_t id = request.id;
  pending_[id] = std::move(request);
  outstanding_.insert(id);  // until its first turn (or its end) comes
  episodes_.Start(id, task, effort);
}

void AgentRollout::Resume(rollout::SampleRequest request, const v1::Task& task, int effort,
                          EpisodeRecord record) {
  if (record.turns.empty()) {  // nothing of it in the sample: start afresh, free the old one
    episodes_.Release(record.place.target, {record.place.session_id});
    return Start(std::move(request), task, effort);
  }
  const uint64_t id = request.id;
  restarts_[id] = {std::move(request), task, effort};
  const EpisodeRecord::Turn& last = record.turns.back();
  if (last.completion || last.cut) outstanding_.insert(id);  // else the engine generates
  records_[id] = record;
  episodes_.Resume(id, task, effort, std::move(record));
}

void AgentRollout::StartAgain(uint64_t id, const std::string& why) {
  auto restart = restarts_.find(id);
  LOOM_CHECK(restart != restarts_.end(), "agent sample " << id << " lost but never resumed");
  Restart r = std::move(restart->second);
  restarts_.erase(restart);
  if (engine_.Find(id) != nullptr) engine_.Drop(id).IgnoreError();
  held_.erase(id);
  records_.erase(id);
  ++restarted_;
  spdlog::warn("agent sample {}: its episode cannot be attached again ({}); it starts again", id,
               why);
  Start(std::move(r.request), r.task, r.effort);
}

void AgentRollout::TakeSnapshots(int64_t max_bytes, double timeout_s) {
  // Every leased episode with a sample: one that waits on the engine's turn
  // now, or runs the tools of a turn answered (snapshotted as it asks for
  // the next; the request stays unapplied in the inbox), or was cut (and so
  // recorded by its end).
  std::vector<uint64_t> running;
  for (const auto& [id, record] : records_) {
    if (!record.turns.empty() && episodes_.Place(id)) running.push_back(id);
  }
  if (running.empty()) return;
  std::map<uint64_t, v1::EpisodeSnapshot> taken =
      episodes_.Snapshots(running, max_bytes, timeout_s);
  for (auto& [id, snapshot] : taken) records_[id].snapshot = std::move(snapshot);
  spdlog::info("snapshots of {} of {} running agent episodes", taken.size(), running.size());
}

std::optional<EpisodeRecord> AgentRollout::Record(uint64_t id) {
  std::optional<EpisodePlace> place = episodes_.Place(id);
  if (!place) return std::nullopt;
  EpisodeRecord out;
  auto record = records_.find(id);
  if (record != records_.end()) out = record->second;
  out.place = *std::move(place);
  return out;
}

const rollout::SampleState* AgentRollout::Held(uint64_t id) const {
  auto held = held_.find(id);
  return held == held_.end() ? nullptr : &held->second;
}

void AgentRollout::Note(const AgentEvent& event, bool applied) {
  if (!applied) outstanding_.insert(event.id);  // cut: the worker ends it
  EpisodeRecord::Turn turn;
  turn.request = event.request;
  turn.cut = !applied;
  EpisodeRecord& record = records_[event.id];
  record.turns.push_back(std::move(turn));
  if (record.snapshot && record.snapshot->pending().turn() != event.request.turn()) {
    record.snapshot.reset();  // it waits on an earlier turn
  }
}

std::vector<AgentResult> AgentRollout::Pump(double wait_s) {
  std::vector<AgentEvent> events = episodes_.Poll(wait_s);
  for (const AgentEvent& event : events) outstanding_.erase(event.id);
  if (lockstep_) {
    while (!outstanding_.empty()) {
      for (AgentEvent& event : episodes_.Poll(1.0)) {
        outstanding_.erase(event.id);
        events.push_back(std::move(event));
      }
    }
    std::stable_sort(events.begin(), events.end(),
                     [](const AgentEvent& a, const AgentEvent& b) { return a.id < b.id; });
  }
  std::vector<AgentResult> done;
  for (AgentEvent& event : events) {
    switch (event.kind) {
      case AgentEvent::Kind::kPrompt:
        Note(event, AddPrompt(event.id, std::move(event.tokens)));
        break;
      case AgentEvent::Kind::kAppend:
        Note(event, Append(event.id, event.tokens));
        break;
      case AgentEvent::Kind::kDone:
        done.push_back(
            {Collect(event.id), OutcomeOf(event.trajectory), TrajectoryJson(event.trajectory)});
        break;
      case AgentEvent::Kind::kLost:
        StartAgain(event.id, event.trajectory.failure_reason());
        break;
    }
  }
  return done;
}

bool AgentRollout::AddPrompt(uint64_t id, std::vector<int64_t> prompt) {
  auto pending = pending_.find(id);
  if (pending == pending_.end()) {
    episodes_.Cut(id);
    return false;
  }
  rollout::SampleRequest request = std::move(pending->second);
  pending_.erase(pending);
  request.prompt = std::move(prompt);
  if (absl::Status s = engine_.Add(request); !s.ok()) {
    spdlog::warn("agent sample {}: its prompt cannot start: {}", id, std::string(s.message()));
    episodes_.Cut(id);
    return false;
  }
  return true;
}

bool AgentRollout::Append(uint64_t id, const std::vector<int64_t>& tokens) {
  const rollout::SampleState* state = engine_.Find(id);
  if (state == nullptr || state->phase != rollout::SamplePhase::kToolWait) {
    episodes_.Cut(id);
    return false;
  }
  if (absl::Status s = engine_.Append(id, tokens); !s.ok()) {
    spdlog::warn("agent sample {}: observation not appended: {}", id, std::string(s.message()));
    episodes_.Cut(id);
    return false;
  }
  return true;
}

rollout::SampleState AgentRollout::Collect(uint64_t id) {
  pending_.erase(id);
  records_.erase(id);
  restarts_.erase(id);
  auto held = held_.find(id);
  if (held != held_.end()) {
    rollout::SampleState state = std::move(held->second);
    held_.erase(held);
    return state;
  }
  if (engine_.Find(id) != nullptr) {
    absl::StatusOr<rollout::SampleState> dropped = engine_.Drop(id);
    if (dropped.ok()) return *std::move(dropped);
  }
  // The episode ended before its first turn reached the engine (no worker
  // would take it, or it died at once): a sample with nothing generated,
  // which carries only its reward.
  rollout::SampleState empty;
  empty.id = id;
  empty.tokens = {eos_id_, eos_id_};
  empty.prompt_length = 2;
  empty.turn_start = 2;
  empty.loss_mask = {0, 0};
  empty.logprobs = {0, 0};
  empty.versions = {-1, -1};
  empty.phase = rollout::SamplePhase::kFinished;
  empty.finish = rollout::FinishReason::kDropped;
  return empty;
}

void AgentRollout::OnStopped(const std::vector<uint64_t>& ids) {
  for (uint64_t id : ids) {
    const rollout::SampleState* state = engine_.Find(id);
    if (state == nullptr) continue;
    std::vector<int32_t> turn(state->tokens.begin() + state->turn_start, state->tokens.end());
    absl::StatusOr<std::string> text = tokenizer_.Decode(turn);
    std::string completion = text.ok() ? *text : std::string();
    auto record = records_.find(id);
    if (record != records_.end() && !record->second.turns.empty()) {
      record->second.turns.back().completion = completion;
    }
    outstanding_.insert(id);
    episodes_.Answer(id, std::move(completion));
  }
}

bool AgentRollout::Hold(rollout::SampleState& state) {
  if (!episodes_.Owns(state.id)) return false;
  const uint64_t id = state.id;
  held_[id] = std::move(state);
  auto record = records_.find(id);
  if (record != records_.end() && !record->second.turns.empty()) {
    record->second.turns.back().cut = true;
  }
  outstanding_.insert(id);
  episodes_.Cut(id);
  return true;
}

}  // namespace loom::agent
