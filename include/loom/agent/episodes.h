#pragma once
// AgentEpisodes: the trainer's client side of multi-turn sandbox episodes
// (datasets with `environment: sandbox`).
//
// One client thread per agent sample runs WorkerPool::RunEpisode. Its policy
// turns the messages the worker sends into token ids (AgentConversation: the
// whole prompt first, then only what is appended — tool results or a
// format-error observation) and posts them to the run loop's inbox; then it
// waits, with a deadline, until the run loop hands back the text the engine
// generated for that turn (Answer) or says the sample cannot go on (Cut),
// and replies to the worker. When the episode ends its trajectory is posted
// too. The run loop — the only owner of the engine — polls the inbox between
// engine steps and never blocks on the network.
//
// With leases (remote workers), a checkpoint records where each running
// episode is and what its turns were (EpisodeRecord), with a snapshot of each
// episode that waits for a turn (Snapshots), and a resumed run attaches to it
// again (Resume): its client thread rebuilds the conversation from the
// record, answers again what the worker asks again, and goes on. If it
// cannot attach (the worker is gone, the lease lapsed), an episode with a
// snapshot goes on from it on any worker; one without, or whose snapshot no
// worker could take, comes back to the run loop as kLost, to start again
// from its prompt.
//
// Threads: Start, Resume, Snapshots, Poll, Answer, Cut and inflight are for
// the run loop only.
// Client threads touch only the inbox and their reply slot, under mu_. The
// destructor wakes every waiting client (its episode ends as `policy_lost`),
// cancels the pool's running episodes (a client inside a tool call returns
// at once), joins the threads, and releases the leased sessions not kept for
// a resumed run (KeepOnExit).

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "loom/agent/conversation.h"
#include "loom/agent/episode_record.h"
#include "loom/chat/encoder.h"
#include "loom/chat/message.h"
#include "loom/rpc/worker_pool.h"
#include "loom/tokenizer/tokenizer.h"
#include "loom/v1/sandbox.pb.h"

namespace loom::agent {

// Something a client thread posted for the run loop.
struct AgentEvent {
  enum class Kind {
    kPrompt,  // the episode's first turn: add a sample with `tokens` as its prompt
    kAppend,  // append `tokens` (loss mask 0) to the parked sample and resume it
    kDone,    // the episode ended: `trajectory` holds its verdict (or penalty)
    kLost,    // a resumed episode could not be attached (why: trajectory.failure_reason)
  };
  Kind kind = Kind::kPrompt;
  uint64_t id = 0;              // the sample id
  std::vector<int64_t> tokens;  // kPrompt, kAppend
  v1::GenerateRequest request;  // kPrompt, kAppend: the request `tokens` encode
  v1::Trajectory trajectory;    // kDone, kLost
};

struct AgentOptions {
  v1::ScaffoldOptions scaffold;
  double turn_timeout_s = 900;  // a client's wait for one generated turn (training included)
  int64_t eos_id = 0;
};

class AgentEpisodes {
 public:
  // Borrows `pool` and `tokenizer`; both must outlive this.
  AgentEpisodes(rpc::WorkerPool& pool, const tokenizer::Tokenizer& tokenizer, AgentOptions options);
  ~AgentEpisodes();
  AgentEpisodes(const AgentEpisodes&) = delete;
  AgentEpisodes& operator=(const AgentEpisodes&) = delete;

  // Starts the episode of sample `id` on `task` at reasoning effort `effort`.
  void Start(uint64_t id, const v1::Task& task, int effort);
  // Attaches again to the episode `record` describes (a checkpoint's), whose
  // sample is back in the engine as the record left it; failing that, goes
  // on from its snapshot of `task` on any worker.
  void Resume(uint64_t id, const v1::Task& task, int effort, EpisodeRecord record);

  // Snapshots of the episodes of `ids` (their workspace archives at most
  // `max_bytes`), each taken by its client thread as the episode waits for a
  // turn: at once when it waits already, else when its tool calls are done.
  // An episode that ended instead has a snapshot of its final trajectory
  // only (no `pending`). Those not in within `timeout_s`, lost, or that
  // failed are left out (warned).
  std::map<uint64_t, v1::EpisodeSnapshot> Snapshots(const std::vector<uint64_t>& ids,
                                                    int64_t max_bytes, double timeout_s);

  // Takes every posted event, waiting up to `wait_s` for one when none is there.
  std::vector<AgentEvent> Poll(double wait_s);

  // Hands sample `id`'s generated turn (the text after the assistant prefix)
  // to its waiting client.
  void Answer(uint64_t id, std::string completion);
  // Sample `id` cannot generate more (token or context limit): its client
  // asks the worker to stop, and the episode ends unsolved.
  void Cut(uint64_t id);

  // Episodes started whose kDone event has not been taken yet.
  int64_t inflight() const { return inflight_; }
  // Resumed episodes that went on from their snapshots on a new session.
  int64_t restored() const { return restored_; }
  // Whether sample `id`'s episode is one of those.
  bool Owns(uint64_t id) const { return threads_.count(id) > 0; }
  // Where sample `id`'s episode runs, once a worker opened it with a lease.
  std::optional<EpisodePlace> Place(uint64_t id);
  // The episodes of samples `ids` (a preemption's checkpoint recorded them)
  // are left on their workers at destruction, for a resumed run to attach
  // to; every other leased session is released then. Default: none kept.
  void KeepOnExit(std::set<uint64_t> ids) { keep_on_exit_ = std::move(ids); }
  // Ends the leased sessions `ids` on worker `target` (a warning if it cannot).
  void Release(const std::string& target, const std::vector<std::string>& ids);

 private:
  struct Slot {
    std::optional<std::string> completion;
    bool cut = false;
    int64_t snapshot_bytes = 0;  // > 0: a snapshot is asked for
    std::optional<absl::StatusOr<v1::EpisodeSnapshot>> snapshot;
    bool ended = false;                 // its kDone or kLost is posted
    std::optional<v1::Trajectory> end;  // the kDone's trajectory
  };
  // A client thread's episode: its conversation, once opened its session,
  // and whether its trajectory reached the run loop.
  struct Client {
    AgentConversation conversation;
    rpc::WorkerSession* session = nullptr;
    bool delivered = false;
  };
  // A resumed episode's client, with the conversation rebuilt from its
  // record: the replies already given (given again if the worker asks again:
  // it never got them), the turn whose tokens the sample holds and is still
  // generating, the last turn the sample holds, and why the worker went past it.
  struct Replay {
    explicit Replay(Client c) : client(std::move(c)) {}
    Client client;
    std::map<int, v1::GenerateReply> answered;
    int unanswered = -1;
    int last = -1;
    std::string diverged;
  };

  void RunClient(uint64_t id, v1::Task task, int effort);
  void RunResumed(uint64_t id, v1::Task task, int effort, EpisodeRecord record);
  // Replays the record's turns into `replay`.
  static absl::Status Rebuild(const EpisodeRecord& record, Replay& replay);
  // The policy of a resumed episode: what the record answered, then on.
  rpc::Policy Replayed(uint64_t id, Replay& replay);
  // Runs a resumed episode from its snapshot on any worker.
  void GoOnFromSnapshot(uint64_t id, v1::Task task, v1::EpisodeSnapshot snapshot, Replay& replay);
  v1::RunEpisode Episode(v1::Task task) const;
  rpc::WorkerPool::OnOpened Opened(uint64_t id, Client& client);
  rpc::WorkerPool::OnDone Delivered(uint64_t id, Client& client);
  static AgentEvent Done(uint64_t id, v1::Trajectory trajectory);
  static AgentEvent Lost(uint64_t id, std::string why);
  // Posts the request's tokens, then waits for the generated turn.
  absl::StatusOr<v1::GenerateReply> Turn(uint64_t id, Client& client,
                                         const v1::GenerateRequest& request);
  // Waits for the turn whose tokens the sample already holds, taking the
  // snapshots asked for meanwhile.
  absl::StatusOr<v1::GenerateReply> AwaitTurn(uint64_t id, Client& client, int turn);
  // Notes where a leased episode runs, for Place and the release at exit.
  void Placed(uint64_t id, const rpc::WorkerSession& session);
  void Post(AgentEvent event);
  // Episode `id` is over, with trajectory `done` (null: lost): a snapshot
  // asked of it, now or until the run loop takes its end, is only that
  // trajectory (EndSnapshot).
  void Ended(uint64_t id, const v1::Trajectory* done) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static absl::StatusOr<v1::EpisodeSnapshot> EndSnapshot(const Slot& slot);
  // Posts an episode's trajectory and waits until the run loop took it: only
  // then may its worker forget the episode (a checkpoint taken before lists
  // it as running). False when the trainer stopped first.
  bool Deliver(uint64_t id, const v1::Trajectory& trajectory);

  rpc::WorkerPool& pool_;
  const tokenizer::Tokenizer& tokenizer_;
  const AgentOptions options_;
  int64_t inflight_ = 0;  // run loop only
  std::atomic<int64_t> restored_{0};
  std::map<uint64_t, std::thread> threads_;  // run loop only; joined when kDone is taken
  std::set<uint64_t> keep_on_exit_;          // run loop only

  std::mutex mu_;
  std::condition_variable inbox_cv_;
  std::condition_variable reply_cv_;
  std::condition_variable snapshot_cv_;
  std::deque<AgentEvent> inbox_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Slot> slots_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, EpisodePlace> places_ ABSL_GUARDED_BY(mu_);
  std::set<uint64_t> delivered_ ABSL_GUARDED_BY(mu_);  // kDone taken, thread not yet joined
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace loom::agent
