#include "loom/train/opd_stage.h"

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include <spdlog/spdlog.h>

#include "loom/config/check.h"
#include "loom/train/async_stage.h"
#include "loom/train/opd_step.h"

namespace loom::train {
namespace {

namespace fs = std::filesystem;

// Runs `loom train --config CONFIG --resume auto` (this binary) and waits.
absl::Status TrainCompanion(const config::TeacherSection& teacher) {
  spdlog::info("teacher '{}': {} holds no model; training it with {}", teacher.name, teacher.path,
               teacher.config);
  std::vector<std::string> args = {"loom", "train", "--config", teacher.config, "--resume", "auto"};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError("fork failed while preparing teacher " + teacher.name);
  if (pid == 0) {
    ::execv("/proc/self/exe", argv.data());
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const std::string command = "loom train --config " + teacher.config + " --resume auto";
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::FailedPreconditionError("teacher '" + teacher.name + "': `" + command +
                                         "` failed (status " + std::to_string(status) + ")");
  }
  if (!fs::exists(teacher.path + "/config.json")) {
    return absl::FailedPreconditionError("teacher '" + teacher.name + "': `" + command +
                                         "` ended without a model at " + teacher.path +
                                         " (preempted? run again to continue it)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<algo::TeacherPool>> OpenTeachers(
    const config::RunConfig& config, int64_t vocab_size, const tokenizer::Tokenizer& tokenizer,
    const model::LoadOptions& device) {
  if (!config.HasStage(kOpdStage)) return nullptr;
  std::vector<algo::TeacherSpec> specs;
  for (const config::TeacherSection& teacher : config.opd.teachers) {
    if (!fs::exists(teacher.path + "/config.json") && !teacher.config.empty()) {
      if (absl::Status s = TrainCompanion(teacher); !s.ok()) return s;
    }
    specs.push_back({teacher.name, teacher.path});
  }
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
  for (const config::DatasetSection& dataset : config.tasks.datasets) {
    int slot = -1;
    for (size_t t = 0; t < config.opd.teachers.size(); ++t) {
      if (config.opd.teachers[t].name == dataset.teacher) slot = static_cast<int>(t);
    }
    LOOM_CHECK(slot >= 0, "dataset " << dataset.name << " has no teacher (config validation)");
    spec.dataset_teacher.push_back(slot);
  }
  spec.make_trainer =
      [&](StageOptimizer& optimizer) -> absl::StatusOr<std::unique_ptr<BatchTrainer>> {
    return std::make_unique<OpdTrainer>(context, optimizer, *context.teachers);
  };
  return RunAsyncStage(context, spec);
}

}  // namespace loom::train
