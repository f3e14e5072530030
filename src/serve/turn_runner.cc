#include "loom/serve/turn_runner.h"

#include <algorithm>
#include <optional>

namespace loom::serve {
namespace {

// Copies the tokens of `state` from `start` on that `progress` has not got yet.
void CopyNew(const rollout::SampleState& state, int64_t start, TurnProgress& progress) {
  const size_t from = static_cast<size_t>(start) + progress.tokens.size();
  for (size_t i = from; i < state.tokens.size(); ++i) {
    progress.tokens.push_back(state.tokens[i]);
    progress.logprobs.push_back(state.logprobs[i]);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<TurnRunner>> TurnRunner::Start(
    const model::Transformer& model, const rollout::EngineOptions& options) {
  auto engine = rollout::RolloutEngine::Create(model, options);
  if (!engine.ok()) return engine.status();
  std::unique_ptr<TurnRunner> runner(new TurnRunner(*std::move(engine)));
  runner->thread_ = std::thread([r = runner.get()] { r->Loop(); });
  return runner;
}

TurnRunner::TurnRunner(std::unique_ptr<rollout::RolloutEngine> engine)
    : engine_(std::move(engine)) {}

TurnRunner::~TurnRunner() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_.notify_all();
  thread_.join();
}

std::shared_ptr<TurnRunner::Turn> TurnRunner::Begin(rollout::SampleRequest request, bool keep) {
  request.id = next_sample_++;
  if (keep) {
    std::lock_guard<std::mutex> lock(mu_);
    kept_.insert(request.id);
  }
  std::shared_ptr<Turn> turn(new Turn(next_turn_++, request.id));
  turn->request_ = std::move(request);
  return Queue(std::move(turn));
}

std::shared_ptr<TurnRunner::Turn> TurnRunner::Continue(uint64_t sample,
                                                       std::vector<int64_t> tokens) {
  std::shared_ptr<Turn> turn(new Turn(next_turn_++, sample));
  turn->append_ = std::move(tokens);
  turn->continues_ = true;
  return Queue(std::move(turn));
}

std::shared_ptr<TurnRunner::Turn> TurnRunner::Queue(std::shared_ptr<Turn> turn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    incoming_.push_back(turn);
  }
  work_.notify_all();
  return turn;
}

void TurnRunner::Release(uint64_t sample) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    releases_.push_back(sample);
  }
  work_.notify_all();
}

TurnProgress TurnRunner::Wait(Turn& turn, size_t seen, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(turn.mu_);
  const TurnProgress& all = turn.progress_;
  turn.changed_.wait_for(lock, timeout, [&] { return all.done || all.tokens.size() > seen; });
  TurnProgress news;
  news.context = all.context;
  news.done = all.done;
  news.held = all.held;
  news.finish = all.finish;
  news.status = all.status;
  if (all.tokens.size() > seen) {
    news.tokens.assign(all.tokens.begin() + seen, all.tokens.end());
    news.logprobs.assign(all.logprobs.begin() + seen, all.logprobs.end());
  }
  return news;
}

void TurnRunner::Cancel(Turn& turn) {
  turn.cancel_ = true;
  work_.notify_all();
}

std::unique_ptr<rollout::SampleState> TurnRunner::TakeEnded(uint64_t sample,
                                                            std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  ended_changed_.wait_for(lock, timeout, [&] { return ended_.count(sample) > 0; });
  auto it = ended_.find(sample);
  if (it == ended_.end()) return nullptr;
  std::unique_ptr<rollout::SampleState> state = std::move(it->second);
  ended_.erase(it);
  return state;
}

void TurnRunner::Forget(uint64_t sample) {
  std::lock_guard<std::mutex> lock(mu_);
  kept_.erase(sample);
  ended_.erase(sample);
}

void TurnRunner::Ended(uint64_t sample, const rollout::SampleState* state) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (kept_.erase(sample) == 0) return;
    ended_[sample] = state != nullptr ? std::make_unique<rollout::SampleState>(*state) : nullptr;
  }
  ended_changed_.notify_all();
}

std::optional<rollout::SampleState> TurnRunner::Drop(uint64_t sample) {
  absl::StatusOr<rollout::SampleState> dropped = engine_->Drop(sample);
  Ended(sample, dropped.ok() ? &*dropped : nullptr);
  if (!dropped.ok()) return std::nullopt;
  return *std::move(dropped);
}

void TurnRunner::End(Turn& turn, const rollout::SampleState* state, rollout::FinishReason finish,
                     absl::Status status, bool held) {
  {
    std::lock_guard<std::mutex> lock(turn.mu_);
    if (state != nullptr) CopyNew(*state, turn.start_, turn.progress_);
    turn.progress_.done = true;
    turn.progress_.held = held;
    turn.progress_.finish = finish;
    turn.progress_.status = std::move(status);
  }
  turn.changed_.notify_all();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = open_.find(turn.sample());
  if (it != open_.end() && it->second.get() == &turn) open_.erase(it);
}

void TurnRunner::Admit(Turn& turn) {
  absl::Status admitted =
      turn.continues_ ? engine_->Append(turn.sample(), turn.append_) : engine_->Add(turn.request_);
  if (!admitted.ok()) {
    if (!turn.continues_) Ended(turn.sample(), nullptr);
    return End(turn, nullptr, rollout::FinishReason::kNone, admitted);
  }
  if (turn.continues_) held_.erase(turn.sample());
  turn.start_ = engine_->Find(turn.sample())->length();  // the prompt, or all before this turn
  {
    std::lock_guard<std::mutex> lock(turn.mu_);
    turn.progress_.context = turn.start_;
  }
}

void TurnRunner::Pause() {
  std::unique_lock<std::mutex> lock(mu_);
  pause_ = true;
  work_.notify_all();
  work_.wait(lock, [&] { return paused_ || stopping_; });
}

absl::Status TurnRunner::Resume(int64_t policy_version) {
  std::unique_lock<std::mutex> lock(mu_);
  resume_version_ = policy_version;
  pause_ = false;
  work_.notify_all();
  work_.wait(lock, [&] { return !paused_ || stopping_; });
  return resumed_;
}

void TurnRunner::HoldWhilePaused(std::unique_lock<std::mutex>& lock) {
  if (!pause_) return;
  engine_->ParkAll();
  paused_ = true;
  work_.notify_all();
  work_.wait(lock, [&] { return !pause_ || stopping_; });
  resumed_ = engine_->Resume(std::max(resume_version_, engine_->policy_version()));
  paused_ = false;
  work_.notify_all();
}

bool TurnRunner::AdmitAndCancel() {
  std::deque<std::shared_ptr<Turn>> incoming;
  std::vector<uint64_t> releases;
  std::vector<std::shared_ptr<Turn>> open;
  bool stopping;
  {
    std::unique_lock<std::mutex> lock(mu_);
    work_.wait(lock, [&] {
      return stopping_ || pause_ || !incoming_.empty() || !releases_.empty() || Runnable();
    });
    HoldWhilePaused(lock);
    stopping = stopping_;
    incoming.swap(incoming_);
    releases.swap(releases_);
    for (const auto& turn : incoming) open_[turn->sample()] = turn;
    for (const auto& [sample, turn] : open_) open.push_back(turn);
  }
  for (uint64_t sample : releases) {
    if (held_.erase(sample) > 0) Drop(sample);
  }
  for (const auto& turn : incoming) Admit(*turn);
  for (const auto& turn : open) {
    if (!stopping && !turn->cancel_) continue;
    if (engine_->Find(turn->sample()) == nullptr) continue;  // refused above
    std::optional<rollout::SampleState> dropped = Drop(turn->sample());
    End(*turn, dropped ? &*dropped : nullptr, rollout::FinishReason::kDropped, absl::OkStatus());
  }
  return !stopping;
}

void TurnRunner::StepAndPublish() {
  auto step = engine_->Step();
  std::vector<std::shared_ptr<Turn>> open;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [sample, turn] : open_) open.push_back(turn);
  }
  auto find = [&](uint64_t sample) -> Turn* {
    for (const auto& turn : open) {
      if (turn->sample() == sample) return turn.get();
    }
    return nullptr;
  };
  if (!step.ok()) {  // every sample is as it was: end the open turns with the failure
    for (const auto& turn : open) {
      std::optional<rollout::SampleState> dropped = Drop(turn->sample());
      End(*turn, dropped ? &*dropped : nullptr, rollout::FinishReason::kDropped, step.status());
    }
    return;
  }
  for (const rollout::SampleState& state : engine_->TakeFinished()) {
    Ended(state.id, &state);
    if (Turn* turn = find(state.id)) End(*turn, &state, state.finish, absl::OkStatus());
  }
  for (uint64_t sample : step->tool_wait) {  // the turn is over; the sample stays, held
    Turn* turn = find(sample);
    if (turn == nullptr) continue;
    held_.insert(sample);
    End(*turn, engine_->Find(sample), rollout::FinishReason::kToolCall, absl::OkStatus(),
        /*held=*/true);
  }
  for (const auto& turn : open) {
    const rollout::SampleState* state = engine_->Find(turn->sample());
    if (state == nullptr) continue;
    {
      std::lock_guard<std::mutex> lock(turn->mu_);
      if (turn->progress_.done) continue;
      CopyNew(*state, turn->start_, turn->progress_);
    }
    turn->changed_.notify_all();
  }
}

bool TurnRunner::Runnable() const {
  return engine_->num_samples() > static_cast<int64_t>(held_.size());
}

void TurnRunner::Loop() {
  while (AdmitAndCancel()) {
    if (Runnable()) StepAndPublish();
  }
}

}  // namespace loom::serve
