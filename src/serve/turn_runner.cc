#include "loom/serve/turn_runner.h"

#include <algorithm>

namespace loom::serve {
namespace {

// Copies the generated tokens of `state` the turn has not got yet.
void CopyNew(const rollout::SampleState& state, TurnProgress& progress) {
  const size_t from = static_cast<size_t>(state.prompt_length) + progress.tokens.size();
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

std::shared_ptr<TurnRunner::Turn> TurnRunner::Begin(rollout::SampleRequest request) {
  request.id = static_cast<uint64_t>(next_id_++);
  std::shared_ptr<Turn> turn(new Turn(std::move(request)));
  {
    std::lock_guard<std::mutex> lock(mu_);
    incoming_.push_back(turn);
  }
  work_.notify_all();
  return turn;
}

TurnProgress TurnRunner::Wait(Turn& turn, size_t seen, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(turn.mu_);
  const TurnProgress& all = turn.progress_;
  turn.changed_.wait_for(lock, timeout, [&] { return all.done || all.tokens.size() > seen; });
  TurnProgress news;
  news.done = all.done;
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

void TurnRunner::End(Turn& turn, const rollout::SampleState* state, rollout::FinishReason finish,
                     absl::Status status) {
  {
    std::lock_guard<std::mutex> lock(turn.mu_);
    if (state != nullptr) CopyNew(*state, turn.progress_);
    turn.progress_.done = true;
    turn.progress_.finish = finish;
    turn.progress_.status = std::move(status);
  }
  turn.changed_.notify_all();
  std::lock_guard<std::mutex> lock(mu_);
  open_.erase(turn.id());
}

bool TurnRunner::AdmitAndCancel() {
  std::deque<std::shared_ptr<Turn>> incoming;
  std::vector<std::shared_ptr<Turn>> open;
  bool stopping;
  {
    std::unique_lock<std::mutex> lock(mu_);
    work_.wait(lock, [&] { return stopping_ || !incoming_.empty() || engine_->num_samples() > 0; });
    stopping = stopping_;
    incoming.swap(incoming_);
    for (const auto& turn : incoming) open_[turn->id()] = turn;
    for (const auto& [id, turn] : open_) open.push_back(turn);
  }
  for (const auto& turn : incoming) {
    absl::Status added = engine_->Add(turn->request_);
    if (!added.ok()) End(*turn, nullptr, rollout::FinishReason::kNone, added);
  }
  for (const auto& turn : open) {
    if (!stopping && !turn->cancel_) continue;
    if (engine_->Find(turn->id()) == nullptr) continue;  // refused above
    auto dropped = engine_->Drop(turn->id());
    End(*turn, dropped.ok() ? &*dropped : nullptr, rollout::FinishReason::kDropped,
        absl::OkStatus());
  }
  return !stopping;
}

void TurnRunner::StepAndPublish() {
  auto step = engine_->Step();
  std::vector<std::shared_ptr<Turn>> open;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, turn] : open_) open.push_back(turn);
  }
  if (!step.ok()) {  // every sample is as it was: end them all with the failure
    for (const auto& turn : open) {
      auto dropped = engine_->Drop(turn->id());
      End(*turn, dropped.ok() ? &*dropped : nullptr, rollout::FinishReason::kDropped,
          step.status());
    }
    return;
  }
  for (const rollout::SampleState& state : engine_->TakeFinished()) {
    auto it =
        std::find_if(open.begin(), open.end(), [&](const auto& t) { return t->id() == state.id; });
    if (it != open.end()) End(**it, &state, state.finish, absl::OkStatus());
  }
  for (uint64_t id : step->tool_wait) {  // a tool-call block ended: the turn is over
    auto dropped = engine_->Drop(id);
    auto it = std::find_if(open.begin(), open.end(), [&](const auto& t) { return t->id() == id; });
    if (it != open.end() && dropped.ok()) {
      End(**it, &*dropped, rollout::FinishReason::kToolCall, absl::OkStatus());
    }
  }
  for (const auto& turn : open) {
    const rollout::SampleState* state = engine_->Find(turn->id());
    if (state == nullptr) continue;
    {
      std::lock_guard<std::mutex> lock(turn->mu_);
      if (turn->progress_.done) continue;
      CopyNew(*state, turn->progress_);
    }
    turn->changed_.notify_all();
  }
}

void TurnRunner::Loop() {
  while (AdmitAndCancel()) {
    if (engine_->num_samples() > 0) StepAndPublish();
  }
}

}  // namespace loom::serve
