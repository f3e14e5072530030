#include "train/ledger_writer.h"

#include <filesystem>

#include <spdlog/spdlog.h>

#include "loom/algo/judge.h"

namespace loom::train {

absl::StatusOr<std::unique_ptr<LedgerWriter>> LedgerWriter::Open(const config::RunConfig& config,
                                                                 const std::string& run_dir) {
  const std::string& path = config.tasks.ledger;
  if (path == "off") return nullptr;
  std::error_code ec;
  const std::string run_id = std::filesystem::absolute(run_dir, ec).lexically_normal().string();
  std::unique_ptr<LedgerWriter> writer(new LedgerWriter(config, run_id));
  auto ledger = tasks::TaskLedger::Open(path.empty() ? run_dir + "/ledger.sqlite" : path);
  if (!ledger.ok()) {
    if (absl::Status s = writer->Failed(ledger.status()); !s.ok()) return s;
    return writer;
  }
  writer->ledger_ = *std::move(ledger);
  spdlog::info("task ledger: {}", writer->ledger_->path());
  return writer;
}

absl::Status LedgerWriter::Failed(absl::Status status) {
  ++errors_;
  ledger_.reset();
  if (config_.tasks.ledger_errors == "stop") {
    return absl::Status(status.code(),
                        std::string(status.message()) + " (tasks.ledger_errors: stop)");
  }
  spdlog::warn("{}; the run goes on without the ledger (tasks.ledger_errors: continue)",
               std::string(status.message()));
  return absl::OkStatus();
}

namespace {

// A finished training sample as an attempt at its task, without the run's
// fields (policy version, run, time).
tasks::LedgerAttempt Attempt(const TrainingSample& sample, const tokenizer::Tokenizer& tokenizer) {
  const SampleEntry& info = sample.info;
  const tasks::Problem& problem = *info.problem;
  tasks::LedgerAttempt a;
  a.task_key = tasks::TaskKey(problem);
  a.task_id = problem.TaskId();
  a.effort = info.effort;
  a.length = sample.state.generated;
  a.config_version = info.config_version;
  bool parsed = true, limit = false, infrastructure = false;
  if (info.agent) {
    const agent::EpisodeOutcome& outcome = *info.outcome;
    a.reward = outcome.reward;
    a.failure = outcome.failure_reason;
    parsed = outcome.parsed();
    infrastructure = outcome.infrastructure;
    limit = tasks::IsLimitCause(outcome.cause());
    a.steps = outcome.steps;
    for (const rollout::SampleState& sequence : info.sequences) a.length += sequence.generated;
  } else {
    const std::vector<int64_t> completion(sample.state.tokens.begin() + sample.state.prompt_length,
                                          sample.state.tokens.end());
    const algo::Judgement judgement = algo::JudgeCompletion(problem, completion, tokenizer);
    a.reward = judgement.reward;
    a.failure = judgement.parse_error;
    a.response = judgement.content;
    parsed = judgement.parsed;
    limit = sample.state.finish == rollout::FinishReason::kMaxNewTokens ||
            sample.state.finish == rollout::FinishReason::kContextLimit;
  }
  a.passed = a.reward > 0.5;
  a.failure_kind = tasks::FailureKind(a.passed, infrastructure, limit, parsed);
  return a;
}

}  // namespace

std::vector<tasks::LedgerAttempt> BatchAttempts(const Batch& batch, const config::RunConfig& config,
                                                const tokenizer::Tokenizer& tokenizer) {
  std::vector<tasks::LedgerAttempt> attempts;
  for (const std::vector<TrainingSample>* samples : {&batch.samples, &batch.masked}) {
    for (const TrainingSample& sample : *samples) {
      tasks::LedgerAttempt& a = attempts.emplace_back(Attempt(sample, tokenizer));
      const config::DatasetSection& dataset = config.tasks.datasets[sample.info.dataset];
      a.dataset = dataset.name;
      if (sample.info.agent) a.harness = dataset.harness;
      a.policy_version = batch.policy_version;
    }
  }
  return attempts;
}

absl::Status LedgerWriter::Trained(std::vector<tasks::LedgerAttempt> attempts) {
  if (ledger_ == nullptr) return absl::OkStatus();  // it failed, and the run went on
  for (tasks::LedgerAttempt& a : attempts) {
    a.run_id = run_id_;
  }
  if (absl::Status s = ledger_->Append(attempts); !s.ok()) return Failed(s);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<tasks::LedgerAttempt>> LedgerWriter::History() const {
  if (ledger_ == nullptr) {
    return absl::FailedPreconditionError("the task ledger is not open (see the log)");
  }
  return ledger_->Read();
}

absl::Status LedgerWriter::Evaluated(std::vector<tasks::LedgerAttempt> attempts,
                                     int64_t policy_version, int64_t config_version) {
  if (ledger_ == nullptr) return absl::OkStatus();
  for (tasks::LedgerAttempt& a : attempts) {
    a.policy_version = policy_version;
    a.config_version = config_version;
    a.run_id = run_id_;
  }
  if (absl::Status s = ledger_->Append(attempts); !s.ok()) return Failed(s);
  return absl::OkStatus();
}

void LedgerWriter::AddStepFigures(nlohmann::json& record) const {
  if (errors_ > 0) record["ledger_errors"] = errors_;
}

}  // namespace loom::train
