#include "train/ledger_writer.h"

#include <chrono>
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

absl::Status LedgerWriter::Trained(const Batch& batch, const tokenizer::Tokenizer& tokenizer) {
  if (ledger_ == nullptr) return absl::OkStatus();  // it failed, and the run went on
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::vector<tasks::LedgerAttempt> attempts;
  for (const TrainingSample& sample : batch.samples) {
    const SampleEntry& info = sample.info;
    const config::DatasetSection& dataset = config_.tasks.datasets[info.dataset];
    tasks::LedgerAttempt& a = attempts.emplace_back();
    a.task_key = tasks::TaskKey(*info.problem);
    a.task_id = info.problem->agent_task != nullptr ? info.problem->agent_task->task.id()
                                                    : info.problem->id;
    a.dataset = dataset.name;
    a.effort = info.effort;
    a.length = sample.state.generated;
    bool parsed = true;
    if (info.agent) {
      a.harness = dataset.harness;
      const agent::EpisodeOutcome& outcome = *info.outcome;
      a.reward = outcome.reward;
      a.failure = outcome.failure_reason;
      parsed = outcome.parsed();
      for (const rollout::SampleState& sequence : info.sequences) a.length += sequence.generated;
    } else {
      const std::vector<int64_t> completion(
          sample.state.tokens.begin() + sample.state.prompt_length, sample.state.tokens.end());
      const algo::Judgement judgement = algo::JudgeCompletion(*info.problem, completion, tokenizer);
      a.reward = judgement.reward;
      a.failure = judgement.parse_error;
      parsed = judgement.parsed;
    }
    a.passed = a.reward > 0.5;
    a.failure_kind = FailureKind(sample, a.passed, parsed);
    a.policy_version = batch.policy_version;
    a.run_id = run_id_;
    a.config_version = info.config_version;
    a.unix_time = now;
  }
  if (absl::Status s = ledger_->Append(attempts); !s.ok()) return Failed(s);
  return absl::OkStatus();
}

void LedgerWriter::AddStepFigures(nlohmann::json& record) const {
  if (errors_ > 0) record["ledger_errors"] = errors_;
}

std::string FailureKind(const TrainingSample& sample, bool passed, bool parsed) {
  if (passed) return "";
  if (sample.info.agent) {
    const agent::EpisodeOutcome& outcome = *sample.info.outcome;
    if (outcome.infrastructure) return "infrastructure";
    const std::string cause = outcome.cause();
    if (cause == "step_limit" || cause == "time_limit") return "limit";
    return parsed ? "agent" : "format";
  }
  const rollout::FinishReason finish = sample.state.finish;
  if (finish == rollout::FinishReason::kMaxNewTokens ||
      finish == rollout::FinishReason::kContextLimit) {
    return "limit";
  }
  return parsed ? "agent" : "format";
}

}  // namespace loom::train
