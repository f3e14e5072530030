#include "loom/config/run_config.h"

#include "absl/status/status.h"
#include "loom/config/binder.h"
#include "loom/config/dump.h"
#include "loom/config/live.h"
#include "loom/config/tree.h"

namespace loom::config {

bool RunConfig::HasStage(const std::string& name) const {
  for (const std::string& stage : train.stages) {
    if (stage == name) return true;
  }
  return false;
}

void RunConfig::Validate(ErrorSink& errors) const {
  const bool opd_stage = HasStage("opd");
  if (opd_stage && opd.teachers.empty()) {
    errors.Error("opd.teachers", "train.stages has opd but no teacher is configured");
  }
  for (size_t i = 0; i < tasks.datasets.size(); ++i) {
    const DatasetSection& dataset = tasks.datasets[i];
    if (opd_stage && dataset.harness != "builtin") {
      errors.Error("tasks.datasets[" + std::to_string(i) + "].harness",
                   "an external harness's episodes train in the grpo stage only, not opd");
    }
    const std::string key = "tasks.datasets[" + std::to_string(i) + "].teacher";
    if (dataset.teacher.empty()) {
      if (opd_stage) {
        errors.Error(key, "dataset '" + dataset.name +
                              "' needs a teacher: the opd stage distils every dataset");
      }
      continue;
    }
    bool known = false;
    std::string names;
    for (const TeacherSection& teacher : opd.teachers) {
      known = known || teacher.name == dataset.teacher;
      names += (names.empty() ? "" : ", ") + teacher.name;
    }
    if (!known) {
      errors.Error(key, "unknown teacher '" + dataset.teacher +
                            "' (opd.teachers: " + (names.empty() ? "none" : names) + ")");
    }
  }
}

absl::StatusOr<RunConfig> LoadRunConfig(const std::string& path,
                                        const std::vector<std::string>& overrides) {
  std::vector<ConfigError> errors;
  ConfigTree tree = ConfigTree::Load(path, errors);
  // Binding a file that failed to load would only echo that failure as
  // "missing key" errors; a bad override still leaves the rest worth checking.
  const bool loaded = errors.empty();
  for (const auto& assignment : overrides) tree.ApplyOverride(assignment, errors);
  RunConfig config;
  if (loaded) {
    for (auto& error : Bind(tree, config)) errors.push_back(std::move(error));
  }
  if (errors.empty()) return config;
  std::string message;
  for (const auto& error : errors) message += (message.empty() ? "" : "\n") + error.ToString();
  return absl::InvalidArgumentError(message);
}

std::string ResolvedYaml(const RunConfig& config) { return DumpYaml(config); }

namespace {

std::string LiveKeysMarkdown() {
  std::string text;
  for (const std::string& pattern : LiveKeyPatterns()) text += "- `" + pattern + "`\n";
  return text;
}

}  // namespace

std::string ConfigReferenceMarkdown() {
  return "# Configuration reference\n\n"
         "Generated from the config declarations by `loom config docs`; a test fails when this "
         "file and the code disagree. Every key has a default unless marked required. Configs "
         "may start with `base: other.yaml` (inherit, this file wins), use `${env:NAME}` or "
         "`${env:NAME:-default}` in values, and be overridden with `--set a.b=value` (lists and "
         "maps in YAML flow syntax); `--set` reaches list entries by index or by name "
         "(`tasks.datasets.1.weight=0`, `tasks.datasets.sort.weight=0`), appends with "
         "`+opd.teachers={name: t3, path: DIR}` and removes with `~opd.teachers.t3`.\n\n"
         "## Live keys\n\n"
         "These may change while a run goes on, with `loom ctl RUN_DIR set KEY=VALUE` "
         "(docs/operations.md, live changes); `*` is a list entry's name. Every other key is "
         "refused as not live-changeable.\n\n" +
         LiveKeysMarkdown() + DescribeMarkdown(RunConfig{});
}

}  // namespace loom::config
