#include "train/opd_stage.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include <spdlog/spdlog.h>

#include "loom/base/child_process.h"
#include "loom/config/check.h"
#include "loom/train/evaluator.h"
#include "loom/train/live_config.h"
#include "loom/train/opd_step.h"
#include "loom/train/preemption.h"
#include "train/async_stage.h"
#include "train/checkpointer.h"

namespace loom::train {
namespace {

namespace fs = std::filesystem;

// Runs `loom train --config CONFIG --resume auto` (this binary) and waits.
absl::Status TrainCompanion(const config::TeacherSection& teacher) {
  spdlog::info("teacher '{}': {} holds no model; training it with {}", teacher.name, teacher.path,
               teacher.config);
  ChildOptions child;
  child.argv = {"loom", "train", "--config", teacher.config, "--resume", "auto"};
  child.program = "/proc/self/exe";
  absl::StatusOr<pid_t> pid = StartChild(child);
  if (!pid.ok()) {
    return absl::InternalError("preparing teacher " + teacher.name + ": " +
                               std::string(pid.status().message()));
  }
  // A preemption signal to this process is passed on: the child checkpoints
  // and stops, and so does this run (nothing of its own to save yet).
  std::optional<int> code;
  bool forwarded = false;
  while (!code.has_value()) {
    absl::StatusOr<std::optional<int>> exited = PollChild(*pid);
    if (!exited.ok()) {
      return absl::InternalError("the run of teacher " + teacher.name + ": " +
                                 std::string(exited.status().message()));
    }
    code = *exited;
    if (!code.has_value() && !forwarded && PreemptionRequested()) {
      ::kill(*pid, PreemptionSignal());
      forwarded = true;
    }
    if (!code.has_value()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const std::string command = "loom train --config " + teacher.config + " --resume auto";
  if (forwarded && *code == 0) {
    return PreemptedStatus("the run of teacher '" + teacher.name + "' (`" + command + "`)");
  }
  if (*code != 0) {
    return absl::FailedPreconditionError("teacher '" + teacher.name + "': `" + command +
                                         "` failed (exit status " + std::to_string(*code) + ")");
  }
  if (!fs::exists(teacher.path + "/config.json")) {
    return absl::FailedPreconditionError("teacher '" + teacher.name + "': `" + command +
                                         "` ended without a model at " + teacher.path +
                                         " (preempted? run again to continue it)");
  }
  return absl::OkStatus();
}

// Each teacher's held-out accuracy on the datasets it teaches, as metrics
// lines: the baseline of the student's.
absl::Status EvaluateTeachers(TrainContext& context) {
  algo::TeacherPool& pool = *context.teachers;
  for (int slot = 0; slot < pool.size(); ++slot) {
    std::vector<int> datasets;
    for (size_t d = 0; d < context.datasets.size(); ++d) {
      if (context.live.TeacherSlot(static_cast<int>(d)) == slot) {
        datasets.push_back(static_cast<int>(d));
      }
    }
    if (datasets.empty()) continue;
    auto teacher = pool.Acquire(slot);
    if (!teacher.ok()) return teacher.status();
    EvalOptions options;
    options.datasets = std::move(datasets);
    auto eval = Evaluate(context.eval_inputs(), **teacher, options);
    if (!eval.ok()) return eval.status();
    spdlog::info("teacher '{}': held-out accuracy {:.3f} over {} problems", pool.name(slot),
                 eval->overall, eval->problems);
    nlohmann::json record = {{"event", "teacher_eval"},
                             {"stage", kOpdStage},
                             {"teacher", pool.name(slot)},
                             {"eval_accuracy", eval->overall},
                             {"eval_parse_rate", eval->parse_rate}};
    for (const auto& [name, accuracy] : eval->accuracy) {
      record["eval_accuracy_by_dataset"][name] = accuracy;
    }
    if (absl::Status s = context.metrics.Write(record); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// True when the run resumes inside the opd stage (its baselines are logged).
bool ResumesInOpd(const TrainContext& context) {
  return context.checkpointer.resume_cursor() &&
         context.checkpointer.resume_cursor()->stage == kOpdStage;
}

}  // namespace

absl::StatusOr<std::unique_ptr<algo::TeacherPool>> OpenTeachers(
    const config::RunConfig& config, const std::vector<algo::TeacherSpec>& slots,
    int64_t vocab_size, const tokenizer::Tokenizer& tokenizer, const model::LoadOptions& device) {
  if (!config.HasStage(kOpdStage)) return nullptr;
  for (const config::TeacherSection& teacher : config.opd.teachers) {
    if (!fs::exists(teacher.path + "/config.json") && !teacher.config.empty()) {
      if (absl::Status s = TrainCompanion(teacher); !s.ok()) return s;
    }
  }
  std::vector<algo::TeacherSpec> specs = slots;
  algo::TeacherPoolOptions options;
  options.dtype = device.dtype;
  options.device = device.device;
  options.memory_bytes = config.opd.teacher_memory_bytes;
  auto pool = algo::TeacherPool::Open(std::move(specs), vocab_size, tokenizer, options);
  if (!pool.ok()) return pool.status();
  spdlog::info("opd: {} teachers checked against the student's tokenizer", (*pool)->size());
  return pool;
}

absl::Status RunOpdStage(TrainContext& context) {
  const config::RunConfig& config = context.config;
  LOOM_CHECK(context.teachers != nullptr, "opd stage without a teacher pool");
  AsyncStageSpec spec;
  spec.stage = kOpdStage;
  spec.optimizer = &config.train.opd;
  spec.headline = "kl";
  spec.teachers = true;
  if (config.opd.eval_teachers && !ResumesInOpd(context)) {
    if (absl::Status s = EvaluateTeachers(context); !s.ok()) return s;
  }
  spec.make_trainer =
      [&](StageOptimizer& optimizer) -> absl::StatusOr<std::unique_ptr<BatchTrainer>> {
    return std::make_unique<OpdTrainer>(context.step_inputs(), optimizer, *context.teachers);
  };
  return RunAsyncStage(context, spec);
}

}  // namespace loom::train
