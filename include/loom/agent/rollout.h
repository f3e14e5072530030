#pragma once
// AgentRollout: the GRPO run loop's side of agent samples. It applies what
// the episodes' client threads posted (AgentEpisodes) to the engine — a first
// turn adds the sample with the worker's prompt, later turns append the
// encoded tool results or format-error observation (loss mask 0) to the
// parked sample so it continues on its KV cache — and hands every turn the
// engine stopped (at the end of a DSML tool-call block, at EOS, or at the
// per-turn cap) back as text. A sample the engine finishes for good (token or
// context limit) is held, and its episode told to stop, until the episode's
// trajectory arrives; then the sample leaves with it.
//
// Agent samples stop on EOS without finishing: the worker decides whether the
// turn ended the episode.
//
// Run loop thread only.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/agent/episodes.h"
#include "loom/agent/outcome.h"
#include "loom/rollout/engine.h"
#include "loom/tokenizer/tokenizer.h"

namespace loom::agent {

// A finished agent sample: its tokens, its episode's outcome, and the whole
// trajectory in the protobuf JSON mapping (for the episodes log).
struct AgentResult {
  rollout::SampleState state;
  EpisodeOutcome outcome;
  nlohmann::json trajectory;
};

class AgentRollout {
 public:
  // `turn_end`: the token ids of the DSML tool-call block's closing tag;
  // `max_turn_tokens`: the per-turn cap (0 = none). `lockstep`
  // (run.deterministic): Pump waits until the workers have answered every
  // episode that waits on them and applies what came in sample-id order, so
  // the engine holds the same samples at every step whatever the workers'
  // timing, and a run repeats exactly (a resumed one too).
  AgentRollout(AgentEpisodes& episodes, rollout::RolloutEngine& engine,
               const tokenizer::Tokenizer& tokenizer, int64_t eos_id, std::vector<int64_t> turn_end,
               int64_t max_turn_tokens, bool lockstep = false)
      : episodes_(episodes),
        engine_(engine),
        tokenizer_(tokenizer),
        eos_id_(eos_id),
        turn_end_(std::move(turn_end)),
        max_turn_tokens_(max_turn_tokens),
        lockstep_(lockstep) {}

  // Starts sample `request.id`'s episode on `task`; `request` (its prompt
  // still empty) gives sampling and limits. The agent stop rules are added.
  void Start(rollout::SampleRequest request, const v1::Task& task, int effort);

  // A resumed run: attaches again to the episode of `record`, whose sample
  // is back in the engine as the checkpoint had it (a held one imported as
  // finished), or goes on from the record's snapshot on a new session. If
  // neither works, the sample is dropped and the episode starts again from
  // `request` and `task`, as Start would (counted in restarted()). A record
  // without turns (no sample) has its session released and the episode
  // starts again at once.
  void Resume(rollout::SampleRequest request, const v1::Task& task, int effort,
              EpisodeRecord record);

  // For a checkpoint: snapshots (workspace archives at most `max_bytes`) of
  // the leased episodes that go on, kept in their records while they hold;
  // waits up to `timeout_s`.
  void TakeSnapshots(int64_t max_bytes, double timeout_s);
  // For a checkpoint: sample `id`'s episode as far as the engine has seen it,
  // when it runs on a leased session.
  std::optional<EpisodeRecord> Record(uint64_t id);
  // The sample of a running episode the engine already finished, if held.
  const rollout::SampleState* Held(uint64_t id) const;
  // Resumed episodes that could not be attached and started again.
  int64_t restarted() const { return restarted_; }
  // Resumed episodes that could not be attached and went on from snapshots.
  int64_t restored() const { return episodes_.restored(); }

  // Applies posted events to the engine (waiting up to `wait_s` for one) and
  // returns the samples whose episodes ended.
  std::vector<AgentResult> Pump(double wait_s);

  // After an engine step: the stopped turns of `ids` go back to their episodes.
  void OnStopped(const std::vector<uint64_t>& ids);

  // For each sample the engine finished: true (and it is held) when it is an
  // agent sample, whose episode is then told to stop.
  bool Hold(rollout::SampleState& state);

  int64_t inflight() const { return episodes_.inflight(); }

 private:
  struct Restart {
    rollout::SampleRequest request;
    v1::Task task;
    int effort = 0;
  };
  // Each returns whether the tokens went into the engine (else the episode is cut).
  bool AddPrompt(uint64_t id, std::vector<int64_t> prompt);
  bool Append(uint64_t id, const std::vector<int64_t>& tokens);
  void Note(const AgentEvent& event, bool applied);
  void StartAgain(uint64_t id, const std::string& why);
  rollout::SampleState Collect(uint64_t id);

  AgentEpisodes& episodes_;
  rollout::RolloutEngine& engine_;
  const tokenizer::Tokenizer& tokenizer_;
  int64_t eos_id_;
  std::vector<int64_t> turn_end_;
  int64_t max_turn_tokens_;
  const bool lockstep_;
  std::set<uint64_t> outstanding_;                      // episodes whose next move is the worker's
  std::map<uint64_t, rollout::SampleRequest> pending_;  // started, prompt not yet posted
  std::map<uint64_t, rollout::SampleState> held_;       // finished by the engine, episode running
  std::map<uint64_t, EpisodeRecord> records_;           // turns applied, per running episode
  std::map<uint64_t, Restart> restarts_;                // resumed episodes, in case they are lost
  int64_t restarted_ = 0;
};

}  // namespace loom::agent
