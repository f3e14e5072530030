#include "loom/train/runner.h"

#include <chrono>
#include <ctime>
#include <filesystem>
#include <sstream>

#include <c10/util/Exception.h>
#include <spdlog/spdlog.h>

#include "loom/dist/group.h"
#include "loom/model/init.h"
#include "loom/model/transformer.h"
#include "loom/tasks/dedup.h"
#include "loom/train/agent_evaluator.h"
#include "loom/train/control.h"
#include "loom/train/live_config.h"
#include "train/checkpointer.h"
#include "train/context.h"
#include "train/grpo_stage.h"
#include "train/ledger_writer.h"
#include "train/opd_stage.h"
#include "train/sft_stage.h"
#include "train/stages.h"

namespace loom::train {
namespace fs = std::filesystem;
namespace {

absl::Status EnsureModel(const config::ModelSection& model, int64_t seed) {
  if (fs::exists(model.path + "/config.json")) return absl::OkStatus();
  if (model.arch.empty()) {
    return absl::NotFoundError("model.path: " + model.path +
                               " holds no model (config.json) and model.arch is empty, so none "
                               "can be created");
  }
  model::InitModelOptions options;
  options.arch = model.arch;
  options.out_dir = model.path;
  options.seed = static_cast<uint64_t>(seed);
  options.dtype = model.dtype;
  options.tokenizer = tokenizer::TinyTokenizerNamed(model.init_tokenizer);
  for (const auto& [key, value] : model.init) options.overrides.push_back(key + "=" + value);
  spdlog::info("creating a new {} model in {}", model.arch, model.path);
  return model::InitModelDir(options);
}

// Every metrics line also goes to RUN_DIR/tb/ as TensorBoard scalars; the
// resolved config is its text summary.
absl::Status AttachTensorBoard(const config::RunConfig& config, const RunDir& run_dir,
                               metrics::MetricsWriter& metrics) {
  auto tensorboard = metrics::TensorBoardWriter::Open(run_dir.tensorboard_path());
  if (!tensorboard.ok()) return tensorboard.status();
  std::string markdown;  // a markdown code block: every line indented by four spaces
  std::istringstream yaml(config::ResolvedYaml(config));
  for (std::string line; std::getline(yaml, line);) markdown += "    " + line + "\n";
  const double now = static_cast<double>(std::time(nullptr));
  if (absl::Status s = (*tensorboard)->WriteText("config", markdown, now); !s.ok()) return s;
  metrics.AttachTensorBoard(*std::move(tensorboard));
  return absl::OkStatus();
}

// The model's device; with several ranks, LOCAL_RANK picks the GPU.
absl::StatusOr<at::Device> PickDevice(const std::string& name, const dist::RankInfo& rank) {
  const bool cuda = at::hasCUDA();
  if (name == "cuda" && !cuda) {
    return absl::FailedPreconditionError("model.device is cuda but LibTorch sees no CUDA device");
  }
  if (name == "cpu" || (name == "auto" && !cuda)) return at::Device(at::kCPU);
  if (!rank.distributed()) return at::Device(at::kCUDA);
  const int gpus = static_cast<int>(at::getNumGPUs());
  if (rank.local_rank >= gpus) {
    return absl::FailedPreconditionError("LOCAL_RANK " + std::to_string(rank.local_rank) +
                                         " but this node has " + std::to_string(gpus) + " GPUs");
  }
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(rank.local_rank));
}

// Joins the other ranks of a multi-rank run (null for one rank).
absl::StatusOr<std::unique_ptr<dist::Group>> JoinRanks(const config::RunConfig& config,
                                                       const dist::RankInfo& rank,
                                                       at::Device device) {
  if (!rank.distributed()) return nullptr;
  dist::Group::Options options;
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(config.dist.timeout_s * 1000));
  options.join_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(config.dist.join_timeout_s * 1000));
  options.device = device;
  spdlog::info("rank {} of {} ({}): joining {}:{}", rank.rank, rank.world_size, rank.source,
               rank.master_addr, rank.master_port);
  auto group = dist::Group::Connect(rank, options);
  if (group.ok())
    spdlog::info("rank {} of {}: joined ({})", rank.rank, rank.world_size, (*group)->backend());
  return group;
}

// Every rank must resume from the same checkpoint (or none).
absl::Status CheckSameResume(dist::Group& group, const std::optional<RunCursor>& cursor) {
  auto versions = group.Gather({cursor ? static_cast<double>(cursor->policy_version) : -1.0});
  if (!versions.ok()) return versions.status();
  for (int r = 0; r < group.size(); ++r) {
    if ((*versions)[r][0] != (*versions)[0][0]) {
      return absl::FailedPreconditionError(
          "ranks resume from different checkpoints: rank 0 at policy version " +
          std::to_string(static_cast<int64_t>((*versions)[0][0])) + ", rank " + std::to_string(r) +
          " at " + std::to_string(static_cast<int64_t>((*versions)[r][0])) +
          " (-1: none); give every rank the same --resume");
    }
  }
  return absl::OkStatus();
}

// A teacher made from a companion config is trained by a child run, which
// one rank cannot do while the others wait in a collective: a multi-rank run
// needs its teachers made.
absl::Status CheckTeachersMade(const config::RunConfig& config) {
  if (!config.HasStage(kOpdStage)) return absl::OkStatus();
  for (const config::TeacherSection& teacher : config.opd.teachers) {
    if (!teacher.config.empty() && !fs::exists(teacher.path + "/config.json")) {
      return absl::FailedPreconditionError(
          "opd.teachers: '" + teacher.name + "' has no model at " + teacher.path +
          " yet; make it before a multi-rank run: loom train --config " + teacher.config +
          " --resume auto");
    }
  }
  return absl::OkStatus();
}

// Creates a missing model. With several ranks, rank 0 creates it and the
// others wait, then create their own only where they do not share its
// filesystem (same seed, same weights).
absl::Status EnsureModelOnEveryRank(const config::RunConfig& config, dist::Group* group) {
  if (group != nullptr) {
    if (group->rank() == 0) {
      if (absl::Status s = EnsureModel(config.model, config.run.seed); !s.ok()) return s;
    }
    if (absl::Status s = group->Barrier(); !s.ok()) return s;
  }
  return EnsureModel(config.model, config.run.seed);
}

// The model the run trains, from the checkpoint's weights; with several
// ranks every rank starts from rank 0's weights, whatever its files hold.
absl::StatusOr<std::unique_ptr<model::Transformer>> LoadModel(const config::RunConfig& config,
                                                              const Checkpointer& checkpointer,
                                                              at::ScalarType dtype,
                                                              at::Device device,
                                                              dist::Group* group) {
  const bool autocast = config.model.autocast == "bfloat16";
  auto model = model::Transformer::Load(checkpointer.ModelDir(), {dtype, device, true, autocast});
  if (!model.ok() || group == nullptr) return model;
  if (absl::Status s = dist::BroadcastParameters(*group, (*model)->Parameters()); !s.ok()) {
    return s;
  }
  return model;
}

// The live config: the file's, or the version the checkpoint recorded.
absl::StatusOr<std::unique_ptr<LiveConfig>> OpenLiveConfig(const config::RunConfig& config,
                                                           const std::optional<RunCursor>& cursor) {
  if (!cursor || cursor->live.is_null()) return std::make_unique<LiveConfig>(config);
  auto restored = LiveConfig::Restore(config, cursor->config_version, cursor->live);
  if (restored.ok()) spdlog::info("live config: resuming at version {}", (*restored)->version());
  return restored;
}

absl::StatusOr<std::vector<std::unique_ptr<tasks::Dataset>>> LoadDatasets(
    const config::RunConfig& config) {
  auto datasets = tasks::LoadDatasets(config.tasks, static_cast<uint64_t>(config.run.seed));
  if (datasets.ok() && datasets->empty() && !config.train.stages.empty()) {
    return absl::InvalidArgumentError(
        "tasks.datasets is empty: the stages have nothing to train on");
  }
  return datasets;
}

// Held-out problems that near-duplicate training ones make held-out accuracy
// measure recall: a warning per dataset (`loom tasks dedup` lists them all).
void WarnAboutLeaks(const std::vector<std::unique_ptr<tasks::Dataset>>& datasets) {
  for (const tasks::HeldOutLeak& leak : tasks::FindHeldOutLeaks(datasets)) {
    spdlog::warn(
        "dataset '{}': {} held-out problems near-duplicate training problems (word-shingle "
        "Jaccard >= 0.8; e.g. {}, {:.2f}): its held-out accuracy overstates generalisation "
        "(loom tasks dedup lists the pairs)",
        leak.dataset, leak.held_out, leak.example, leak.jaccard);
  }
}

// Runs the stages from the checkpoint's on; rank 0 saves each stage's weights.
absl::Status RunEachStage(TrainContext& context, const std::optional<RunCursor>& cursor,
                          const dist::RankInfo& rank) {
  const config::RunConfig& config = context.config;
  const size_t first_stage = cursor ? static_cast<size_t>(cursor->stage_index) : 0;
  for (size_t i = first_stage; i < config.train.stages.size(); ++i) {
    const std::string& stage = config.train.stages[i];
    spdlog::info("stage {} begins", stage);
    const StageKind* kind = FindStage(stage);
    if (kind == nullptr) return absl::InvalidArgumentError("train.stages: unknown stage " + stage);
    const int64_t done_in_stage = cursor && i == first_stage ? cursor->step : 0;
    context.run_eta.StageStarted(context.policy_version,
                                 context.policy_version + kind->steps(config) - done_in_stage);
    if (absl::Status s = kind->run(context); !s.ok()) return s;
    if (rank.rank != 0) continue;  // rank 0 saves the weights every rank holds
    const std::string out = context.run_dir.stage_path(stage);
    if (absl::Status s = context.model.Save(out); !s.ok()) return s;
    fs::copy_file(config.model.path + "/tokenizer.json", out + "/tokenizer.json",
                  fs::copy_options::overwrite_existing);
    spdlog::info("stage {} done; weights in {}", stage, out);
  }
  return absl::OkStatus();
}

absl::Status RunStages(const config::RunConfig& config, const RunDir& run_dir,
                       const std::string& resume, const dist::RankInfo& rank) {
  if (rank.distributed()) {
    if (absl::Status s = CheckTeachersMade(config); !s.ok()) return s;
  }
  auto dtype = model::ParseDtype(config.model.dtype);
  if (!dtype.ok()) return dtype.status();
  auto device = PickDevice(config.model.device, rank);
  if (!device.ok()) return device.status();
  auto group = JoinRanks(config, rank, *device);
  if (!group.ok()) return group.status();
  auto checkpointer = Checkpointer::Open(config, run_dir, resume, group->get());
  if (!checkpointer.ok()) return checkpointer.status();
  const auto& cursor = (*checkpointer)->resume_cursor();
  if (*group != nullptr) {
    if (absl::Status s = CheckSameResume(**group, cursor); !s.ok()) return s;
  }
  if (absl::Status s = EnsureModelOnEveryRank(config, group->get()); !s.ok()) return s;
  auto model = LoadModel(config, **checkpointer, *dtype, *device, group->get());
  if (!model.ok()) return model.status();
  auto tokenizer = tokenizer::Tokenizer::FromFile(config.model.path + "/tokenizer.json");
  if (!tokenizer.ok()) return tokenizer.status();
  auto live = OpenLiveConfig(config, cursor);
  if (!live.ok()) return live.status();
  auto teachers = OpenTeachers(config, (*live)->teacher_slots(), (*model)->config().vocab_size,
                               **tokenizer, {*dtype, *device, false});
  if (!teachers.ok()) return teachers.status();
  (*live)->set_teachers(teachers->get());
  auto special_tokens = chat::SpecialTokenIds::Resolve(**tokenizer);
  if (!special_tokens.ok()) return special_tokens.status();
  auto datasets = LoadDatasets(config);
  if (!datasets.ok()) return datasets.status();
  if (rank.rank == 0) WarnAboutLeaks(*datasets);
  auto metrics = metrics::MetricsWriter::Open(run_dir.metrics_path());
  if (!metrics.ok()) return metrics.status();
  if (rank.rank == 0) {
    if (absl::Status s = AttachTensorBoard(config, run_dir, *metrics); !s.ok()) return s;
  }
  spdlog::info("model {} ({:.2f}M parameters, {}), stages: {}", config.model.path,
               static_cast<double>((*model)->NumParameters()) / 1e6, config.model.dtype,
               config.train.stages.size());

  metrics::RunEta run_eta(cursor ? cursor->policy_version : 0, TotalSteps(config));
  TrainContext context{config,   run_dir,         **model,        **tokenizer, *datasets,
                       *metrics, *special_tokens, **checkpointer, **live,      run_eta};
  context.teachers = teachers->get();
  context.group = group->get();
  // The first rank alone evaluates agent tasks (LogEvaluation).
  absl::StatusOr<std::unique_ptr<HeldOutAgentTasks>> agent_tasks =
      std::unique_ptr<HeldOutAgentTasks>();
  if (rank.rank == 0) {
    agent_tasks = HeldOutAgentTasks::Create(context.eval_inputs(),
                                            (*model)->config().max_position_embeddings);
  }
  if (!agent_tasks.ok()) return agent_tasks.status();
  context.agent_tasks = agent_tasks->get();
  auto ledger = LedgerWriter::Open(config, run_dir.path());
  if (!ledger.ok()) return ledger.status();
  context.ledger = ledger->get();
  ControlInbox control(run_dir, **live, *metrics);
  if (rank.distributed()) {
    spdlog::info("live changes (loom ctl) are not taken in multi-rank runs");
    metrics->SetCommon("config_version", (*live)->version());
  } else {
    if (absl::Status s = control.Start(); !s.ok()) return s;
    context.control = &control;
  }
  if (cursor) {
    context.policy_version = cursor->policy_version;
    if (absl::Status s = RestoreTorchRng((*checkpointer)->resume_dir()); !s.ok()) return s;
  }
  return RunEachStage(context, cursor, rank);
}

}  // namespace

absl::Status RunTraining(const config::RunConfig& config, const RunDir& run_dir,
                         const std::string& resume, const dist::RankInfo& rank) {
  try {
    return RunStages(config, run_dir, resume, rank);
  } catch (const c10::Error& e) {
    return absl::InternalError(std::string("LibTorch: ") + e.what_without_backtrace());
  }
}

}  // namespace loom::train
