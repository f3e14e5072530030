#include "loom/agent/episodes.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "loom/config/check.h"

namespace loom::agent {

AgentEpisodes::AgentEpisodes(rpc::WorkerPool& pool, const tokenizer::Tokenizer& tokenizer,
                             AgentOptions options)
    : pool_(pool), tokenizer_(tokenizer), options_(std::move(options)) {}

AgentEpisodes::~AgentEpisodes() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  reply_cv_.notify_all();
  pool_.CancelEpisodes();  // clients inside a tool call return now, not when it ends
  for (auto& [id, thread] : threads_) thread.join();
  // No client will come back for these: their workers free them now rather
  // than when the lease lapses.
  std::map<std::string, std::vector<std::string>> released;
  for (const auto& [id, place] : places_) {
    if (keep_on_exit_.count(id) == 0) released[place.target].push_back(place.session_id);
  }
  for (const auto& [target, ids] : released) Release(target, ids);
}

void AgentEpisodes::Start(uint64_t id, const v1::Task& task, int effort) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    slots_[id] = Slot();
  }
  ++inflight_;
  threads_.emplace(id, std::thread(&AgentEpisodes::RunClient, this, id, task, effort));
}

void AgentEpisodes::Resume(uint64_t id, const v1::Task& task, int effort, EpisodeRecord record) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    slots_[id] = Slot();
    places_[id] = record.place;
  }
  ++inflight_;
  threads_.emplace(
      id, std::thread(&AgentEpisodes::RunResumed, this, id, task, effort, std::move(record)));
}

std::map<uint64_t, v1::EpisodeSnapshot> AgentEpisodes::Snapshots(const std::vector<uint64_t>& ids,
                                                                 int64_t max_bytes,
                                                                 double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  std::vector<uint64_t> asked;
  for (uint64_t id : ids) {
    auto slot = slots_.find(id);
    if (slot == slots_.end()) continue;
    Slot& s = slot->second;
    s.snapshot.reset();
    if (s.ended) {
      s.snapshot = EndSnapshot(s);  // its end waits in the inbox
    } else {
      s.snapshot_bytes = max_bytes;
    }
    asked.push_back(id);
  }
  reply_cv_.notify_all();
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::microseconds(static_cast<int64_t>(timeout_s * 1e6));
  snapshot_cv_.wait_until(lock, deadline, [&] {
    return stopping_ || std::all_of(asked.begin(), asked.end(), [&](uint64_t id) {
             auto slot = slots_.find(id);
             return slot == slots_.end() || slot->second.snapshot.has_value();
           });
  });
  std::map<uint64_t, v1::EpisodeSnapshot> taken;
  for (uint64_t id : asked) {
    auto slot = slots_.find(id);
    if (slot == slots_.end()) continue;
    Slot& s = slot->second;
    s.snapshot_bytes = 0;
    if (!s.snapshot) {
      spdlog::warn("agent sample {}: no snapshot within {} s", id, timeout_s);
    } else if (!s.snapshot->ok()) {
      spdlog::warn("agent sample {}: no snapshot: {}", id,
                   std::string(s.snapshot->status().message()));
    } else {
      taken[id] = *std::move(*s.snapshot);
    }
    s.snapshot.reset();
  }
  return taken;
}

void AgentEpisodes::Placed(uint64_t id, const rpc::WorkerSession& session) {
  if (session.opened().lease_s() <= 0) return;  // it ends with its client
  std::lock_guard<std::mutex> lock(mu_);
  places_[id] = {session.target(), session.opened().session_id()};
}

std::optional<EpisodePlace> AgentEpisodes::Place(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = places_.find(id);
  if (it == places_.end()) return std::nullopt;
  return it->second;
}

void AgentEpisodes::Release(const std::string& target, const std::vector<std::string>& ids) {
  absl::StatusOr<int> released = pool_.ReleaseSessions(target, ids);
  if (!released.ok()) {
    spdlog::warn("worker {} keeps {} episode(s) until their lease lapses: {}", target, ids.size(),
                 std::string(released.status().message()));
  }
}

AgentEvent AgentEpisodes::Done(uint64_t id, v1::Trajectory trajectory) {
  AgentEvent done;
  done.kind = AgentEvent::Kind::kDone;
  done.id = id;
  done.trajectory = std::move(trajectory);
  return done;
}

AgentEvent AgentEpisodes::Lost(uint64_t id, std::string why) {
  AgentEvent lost;
  lost.kind = AgentEvent::Kind::kLost;
  lost.id = id;
  lost.trajectory.set_failure_reason(std::move(why));
  return lost;
}

rpc::WorkerPool::OnOpened AgentEpisodes::Opened(uint64_t id, Client& client) {
  return [this, id, &client](rpc::WorkerSession& session) {
    client.session = &session;
    Placed(id, session);
  };
}

rpc::WorkerPool::OnDone AgentEpisodes::Delivered(uint64_t id, Client& client) {
  return [this, id, &client](const v1::Trajectory& done) {
    client.delivered = true;
    return Deliver(id, done);
  };
}

v1::RunEpisode AgentEpisodes::Episode(v1::Task task) const {
  v1::RunEpisode episode;
  *episode.mutable_task() = std::move(task);
  *episode.mutable_options() = options_.scaffold;
  return episode;
}

void AgentEpisodes::RunClient(uint64_t id, v1::Task task, int effort) {
  Client client{AgentConversation(tokenizer_, effort, options_.eos_id)};
  v1::Trajectory trajectory = pool_.RunEpisode(
      Episode(std::move(task)),
      [&](const v1::GenerateRequest& request) { return Turn(id, client, request); },
      Opened(id, client), Delivered(id, client));
  if (!client.delivered) Post(Done(id, std::move(trajectory)));  // failed without a verdict
}

bool AgentEpisodes::Deliver(uint64_t id, const v1::Trajectory& trajectory) {
  AgentEvent done = Done(id, trajectory);
  std::unique_lock<std::mutex> lock(mu_);
  Ended(id, &trajectory);
  inbox_.push_back(std::move(done));
  inbox_cv_.notify_one();
  reply_cv_.wait(lock, [&] { return stopping_ || delivered_.count(id) > 0; });
  return delivered_.count(id) > 0;
}

// A resumed episode takes one of four ways: it had ended as the checkpoint
// was taken (its end is all there is to know); it attaches to its session
// again; its session is gone and it goes on from its snapshot on any worker;
// or it is lost, to start again from its prompt.
void AgentEpisodes::RunResumed(uint64_t id, v1::Task task, int effort, EpisodeRecord record) {
  if (record.snapshot && !record.snapshot->has_pending()) {
    Release(record.place.target, {record.place.session_id});
    return Post(Done(id, std::move(*record.snapshot->mutable_trajectory())));
  }
  Replay replay(Client{AgentConversation(tokenizer_, effort, options_.eos_id)});
  if (absl::Status rebuilt = Rebuild(record, replay); !rebuilt.ok()) {
    return Post(Lost(id, std::string(rebuilt.message())));
  }
  absl::StatusOr<v1::Trajectory> attached =
      pool_.ResumeEpisode(record.place.target, record.place.session_id, Replayed(id, replay),
                          Delivered(id, replay.client), Opened(id, replay.client));
  if (replay.client.delivered) return;
  if (!replay.diverged.empty()) {
    Release(record.place.target, {record.place.session_id});  // no use to anyone now
    return Post(Lost(id, replay.diverged));
  }
  if (attached.ok()) return Post(Done(id, *std::move(attached)));
  if (absl::IsCancelled(attached.status())) {
    v1::Trajectory stopped;
    stopped.set_failure_reason("cancelled: the trainer is stopping");
    stopped.set_penalty(true);
    return Post(Done(id, std::move(stopped)));
  }
  if (!record.snapshot) return Post(Lost(id, std::string(attached.status().message())));
  // Its session is gone (the worker died, the lease lapsed).
  spdlog::info(
      "agent sample {}: cannot attach to session {} ({}); it goes on from its snapshot of turn {}",
      id, record.place.session_id, std::string(attached.status().message()),
      record.snapshot->pending().turn());
  GoOnFromSnapshot(id, std::move(task), *std::move(record.snapshot), replay);
}

absl::Status AgentEpisodes::Rebuild(const EpisodeRecord& record, Replay& replay) {
  for (const EpisodeRecord::Turn& turn : record.turns) {
    const int k = turn.request.turn();
    if (auto ids = replay.client.conversation.Observe(turn.request); !ids.ok()) {
      return ids.status();
    }
    if (turn.cut) {
      replay.answered[k].set_stop(true);
    } else if (turn.completion) {
      replay.answered[k] = replay.client.conversation.Reply(*turn.completion, k);
    } else {
      replay.unanswered = k;
    }
  }
  replay.last = record.turns.empty() ? -1 : record.turns.back().request.turn();
  return absl::OkStatus();
}

rpc::Policy AgentEpisodes::Replayed(uint64_t id, Replay& replay) {
  return
      [this, id, &replay](const v1::GenerateRequest& request) -> absl::StatusOr<v1::GenerateReply> {
        auto it = replay.answered.find(request.turn());
        if (it != replay.answered.end()) return it->second;
        if (request.turn() == replay.unanswered)
          return AwaitTurn(id, replay.client, replay.unanswered);
        if (request.turn() == replay.last + 1) {
          replay.last = request.turn();
          return Turn(id, replay.client, request);
        }
        // A worker past the record (attached from an older checkpoint) asks for
        // a turn the sample's tokens cannot continue to.
        replay.diverged = absl::StrCat("the worker asks for turn ", request.turn(), " after turn ",
                                       replay.last, ": the episode went on past this checkpoint");
        return absl::FailedPreconditionError(replay.diverged);
      };
}

void AgentEpisodes::GoOnFromSnapshot(uint64_t id, v1::Task task, v1::EpisodeSnapshot snapshot,
                                     Replay& replay) {
  v1::RunEpisode episode = Episode(std::move(task));
  *episode.mutable_resume() = std::move(snapshot);
  bool opened = false;
  const rpc::WorkerPool::OnOpened placed = Opened(id, replay.client);
  v1::Trajectory restored = pool_.RunEpisode(
      episode, Replayed(id, replay),
      [&](rpc::WorkerSession& session) {
        opened = true;
        ++restored_;
        placed(session);
      },
      Delivered(id, replay.client));
  if (replay.client.delivered) return;
  if (opened) return Post(Done(id, std::move(restored)));  // lost after it went on: a penalty
  Post(Lost(id, absl::StrCat("no worker took its snapshot: ", restored.failure_reason())));
}

absl::StatusOr<v1::GenerateReply> AgentEpisodes::Turn(uint64_t id, Client& client,
                                                      const v1::GenerateRequest& request) {
  absl::StatusOr<std::vector<int64_t>> tokens = client.conversation.Observe(request);
  if (!tokens.ok()) return tokens.status();
  AgentEvent event;
  event.kind = request.turn() == 0 ? AgentEvent::Kind::kPrompt : AgentEvent::Kind::kAppend;
  event.id = id;
  event.tokens = *std::move(tokens);
  event.request = request;
  Post(std::move(event));
  return AwaitTurn(id, client, request.turn());
}

absl::StatusOr<v1::GenerateReply> AgentEpisodes::AwaitTurn(uint64_t id, Client& client, int turn) {
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::microseconds(static_cast<int64_t>(options_.turn_timeout_s * 1e6));
  std::unique_lock<std::mutex> lock(mu_);
  Slot& slot = slots_[id];  // stays: only this thread's kDone erases it
  while (true) {
    const bool woken = reply_cv_.wait_until(lock, deadline, [&] {
      return stopping_ || slot.cut || slot.completion.has_value() || slot.snapshot_bytes > 0;
    });
    if (!woken) {
      return absl::DeadlineExceededError(absl::StrCat("sample ", id, ": no generated turn within ",
                                                      options_.turn_timeout_s, " s"));
    }
    if (stopping_ || slot.cut || slot.completion.has_value()) break;
    // The worker waits for this turn: a snapshot of it now is exact.
    const int64_t max_bytes = std::exchange(slot.snapshot_bytes, 0);
    lock.unlock();
    absl::StatusOr<v1::EpisodeSnapshot> snapshot =
        client.session != nullptr ? client.session->Snapshot(max_bytes)
                                  : absl::FailedPreconditionError("the episode has no session");
    lock.lock();
    slot.snapshot = std::move(snapshot);
    snapshot_cv_.notify_all();
  }
  if (stopping_) return absl::CancelledError("the trainer is stopping");
  if (slot.cut) {
    v1::GenerateReply stop;
    stop.set_stop(true);
    return stop;
  }
  std::string completion = *std::move(slot.completion);
  slot.completion.reset();
  lock.unlock();
  return client.conversation.Reply(completion, turn);
}

void AgentEpisodes::Post(AgentEvent event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (event.kind == AgentEvent::Kind::kDone || event.kind == AgentEvent::Kind::kLost) {
      Ended(event.id, event.kind == AgentEvent::Kind::kDone ? &event.trajectory : nullptr);
    }
    inbox_.push_back(std::move(event));
  }
  inbox_cv_.notify_one();
}

void AgentEpisodes::Ended(uint64_t id, const v1::Trajectory* done) {
  auto slot = slots_.find(id);
  if (slot == slots_.end()) return;
  Slot& s = slot->second;
  s.ended = true;
  if (done != nullptr) s.end = *done;
  if (s.snapshot_bytes <= 0) return;
  s.snapshot_bytes = 0;
  s.snapshot = EndSnapshot(s);
  snapshot_cv_.notify_all();
}

absl::StatusOr<v1::EpisodeSnapshot> AgentEpisodes::EndSnapshot(const Slot& slot) {
  if (!slot.end) return absl::FailedPreconditionError("the episode was lost");
  v1::EpisodeSnapshot end;
  *end.mutable_trajectory() = *slot.end;
  return end;
}

std::vector<AgentEvent> AgentEpisodes::Poll(double wait_s) {
  std::vector<AgentEvent> events;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (inbox_.empty() && wait_s > 0) {
      inbox_cv_.wait_for(lock, std::chrono::microseconds(static_cast<int64_t>(wait_s * 1e6)),
                         [&] { return !inbox_.empty(); });
    }
    events.assign(std::make_move_iterator(inbox_.begin()), std::make_move_iterator(inbox_.end()));
    inbox_.clear();
    for (const AgentEvent& event : events) {
      if (event.kind == AgentEvent::Kind::kDone || event.kind == AgentEvent::Kind::kLost) {
        slots_.erase(event.id);
        places_.erase(event.id);
        delivered_.insert(event.id);
      }
    }
  }
  reply_cv_.notify_all();  // a client in Deliver may close its session now
  for (const AgentEvent& event : events) {
    if (event.kind != AgentEvent::Kind::kDone && event.kind != AgentEvent::Kind::kLost) continue;
    auto thread = threads_.find(event.id);
    if (thread != threads_.end()) {
      thread->second.join();  // it posted kDone as its last act
      threads_.erase(thread);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      delivered_.erase(event.id);
    }
    --inflight_;
  }
  return events;
}

void AgentEpisodes::Answer(uint64_t id, std::string completion) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto slot = slots_.find(id);
    if (slot == slots_.end()) return;  // the episode already ended
    slot->second.completion = std::move(completion);
  }
  reply_cv_.notify_all();
}

void AgentEpisodes::Cut(uint64_t id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto slot = slots_.find(id);
    if (slot == slots_.end()) return;
    slot->second.cut = true;
  }
  reply_cv_.notify_all();
}

}  // namespace loom::agent
