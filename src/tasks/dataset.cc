#include "loom/tasks/dataset.h"

#include <algorithm>
#include <functional>
#include <mutex>
#include <numeric>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "loom/tasks/agent_jsonl.h"
#include "loom/tasks/generator.h"
#include "loom/tasks/jsonl.h"
#include "tasks/random.h"

namespace loom::tasks {

std::string Problem::TaskId() const {
  if (agent_task != nullptr) return agent_task->task.id();
  if (!line_id.empty()) return line_id;
  return source.empty() ? id : source;
}

namespace {

// Attempts at finding a problem on the wanted side of the split before
// concluding the problem space has (almost) none there.
constexpr int kMaxDraws = 10000;

std::string SplitName(Split split) { return split == Split::kTrain ? "train" : "eval"; }

// The first `keep` lines of `text` (all of it when it has no more).
std::string FirstLines(const std::string& text, int64_t keep) {
  size_t end = 0;
  for (int64_t i = 0; i < keep; ++i) {
    end = text.find('\n', i == 0 ? 0 : end + 1);
    if (end == std::string::npos) return text;
  }
  return text.substr(0, end);
}

// The first k of `text`'s lines, k drawn uniformly from 1 to all but one;
// `text` itself when it has a single line.
std::string FirstLinesOf(const std::string& text, Rng& rng) {
  const auto lines = static_cast<int64_t>(std::count(text.begin(), text.end(), '\n')) + 1;
  if (lines < 2) return text;
  return FirstLines(text, rng.Uniform(1, lines - 1));
}

// The content of the problem's last user message; null when it has none.
const nlohmann::json* LastUserMessage(const Problem& problem) {
  for (auto m = problem.messages.rbegin(); m != problem.messages.rend(); ++m) {
    if (m->value("role", "") == "user") return &m->at("content");
  }
  return nullptr;
}

// Opens a worked reference's reasoning with the user's message, on a line of
// its own; an answer-only reference stays as it is.
void RestateProblem(Problem& problem) {
  auto& reasoning = (*problem.reference)["reasoning_content"];
  const nlohmann::json* user = LastUserMessage(problem);
  if (reasoning.get<std::string>().empty() || !user) return;
  reasoning = user->get<std::string>() + "\n" + reasoning.get<std::string>();
}

// The user's message, " = ", then the result: the answer, the reference's
// final content (which may hold a reversed result) and the verifier.
void RestateProblemInAnswer(Problem& problem) {
  const nlohmann::json* user = LastUserMessage(problem);
  if (!user) return;
  const std::string opening = user->get<std::string>() + " = ";
  problem.answer = opening + problem.answer;
  problem.verifier = VerifierKind::kExact;
  if (!problem.reference) return;
  auto& content = (*problem.reference)["content"];
  content = opening + content.get<std::string>();
}

class GeneratedDataset : public Dataset {
 public:
  GeneratedDataset(const config::DatasetSection& spec, uint64_t run_seed,
                   std::unique_ptr<TaskGenerator> generator)
      : Dataset(spec.name),
        spec_(spec),
        generator_(std::move(generator)),
        seed_(Mix64(run_seed ^ HashText(spec.name))) {}

  absl::Status BuildEval() {
    if (spec_.eval_fraction <= 0) return absl::OkStatus();  // nothing held out
    for (int i = 0; i < spec_.eval_size; ++i) {
      auto problem = Draw(Split::kEval, i);
      if (!problem.ok()) return problem.status();
      eval_.push_back(std::move(*problem));
    }
    return absl::OkStatus();
  }

  Problem Train(uint64_t index) const override {
    auto problem = Draw(Split::kTrain, index);
    // eval_fraction <= 0.5, so a training problem is found long before kMaxDraws.
    return problem.ok() ? *problem : Problem{};
  }

 private:
  absl::StatusOr<Problem> Draw(Split split, uint64_t index) const {
    const uint64_t stream = Mix64(seed_ ^ (split == Split::kTrain ? 0x7472ULL : 0x6576ULL));
    for (int attempt = 0; attempt < kMaxDraws; ++attempt) {
      Rng rng(Mix64(stream + index * 0x9e3779b97f4a7c15ULL) ^ static_cast<uint64_t>(attempt));
      const int difficulty =
          static_cast<int>(rng.Uniform(spec_.min_difficulty, spec_.max_difficulty));
      Problem problem = generator_->Generate(rng.Next(), difficulty);
      if (IsHeldOut(problem, spec_.eval_fraction) != (split == Split::kEval)) continue;
      if (split == Split::kTrain && rng.UniformReal() < AnswerOnlyShare(difficulty)) {
        auto& reasoning = (*problem.reference)["reasoning_content"];
        reasoning = FirstLines(reasoning.get<std::string>(), spec_.answer_only_keeps_lines);
      } else if (split == Split::kTrain && spec_.partial_reasoning_fraction > 0 &&
                 rng.UniformReal() < spec_.partial_reasoning_fraction) {
        auto& reasoning = (*problem.reference)["reasoning_content"];
        reasoning = FirstLinesOf(reasoning.get<std::string>(), rng);
      }
      if (split == Split::kTrain && spec_.restate_problem) RestateProblem(problem);
      if (split == Split::kTrain && spec_.reversed_answer_fraction > 0 &&
          rng.UniformReal() < spec_.reversed_answer_fraction) {
        std::string answer = (*problem.reference)["content"];
        std::reverse(answer.begin(), answer.end());
        (*problem.reference)["content"] = answer;
      }
      if (spec_.answer_restates_problem) RestateProblemInAnswer(problem);
      problem.dataset = name_;
      problem.id = name_ + "/" + SplitName(split) + "/" + std::to_string(index);
      if (!spec_.system_prompt.empty()) {
        const nlohmann::json system = {{"role", "system"}, {"content", spec_.system_prompt}};
        problem.messages.insert(problem.messages.begin(), system);
      }
      return problem;
    }
    return absl::InvalidArgumentError(
        "dataset '" + name_ + "': no " + SplitName(split) + " problem in " +
        std::to_string(kMaxDraws) + " draws; the problem space is too small for eval_fraction " +
        std::to_string(spec_.eval_fraction) + " (raise the difficulty or change eval_fraction)");
  }

  // The share of answer-only references at `difficulty`: answer_only_fraction,
  // tilted by answer_only_spread from the easiest difficulty to the hardest.
  double AnswerOnlyShare(int difficulty) const {
    const int span = spec_.max_difficulty - spec_.min_difficulty;
    const double place =
        span > 0 ? static_cast<double>(difficulty - spec_.min_difficulty) / span - 0.5 : 0.0;
    return std::clamp(spec_.answer_only_fraction + spec_.answer_only_spread * place, 0.0, 1.0);
  }

  config::DatasetSection spec_;
  std::unique_ptr<TaskGenerator> generator_;
  uint64_t seed_;
};

// Built-in agentic tasks: a problem is only the task's seed; the trainer asks
// a sandbox worker to run the episode.
class AgentDataset : public Dataset {
 public:
  AgentDataset(const config::DatasetSection& spec, uint64_t run_seed)
      : Dataset(spec.name), kind_(spec.kind), seed_(Mix64(run_seed ^ HashText(spec.name))) {}

  Problem Train(uint64_t index) const override {
    Problem problem;
    problem.dataset = name_;
    problem.id = name_ + "/train/" + std::to_string(index);
    problem.task_seed = Mix64(seed_ + index * 0x9e3779b97f4a7c15ULL);
    problem.messages = nlohmann::json::array(
        {{{"role", "user"},
          {"content", kind_ + " agent task, seed " + std::to_string(problem.task_seed)}}});
    return problem;
  }

 private:
  std::string kind_;
  uint64_t seed_;
};

class JsonlDataset : public Dataset {
 public:
  JsonlDataset(const config::DatasetSection& spec, uint64_t run_seed, std::vector<Problem> train,
               std::vector<Problem> eval)
      : Dataset(spec.name), train_(std::move(train)), seed_(Mix64(run_seed ^ HashText(spec.name))) {
    eval_ = std::move(eval);
  }

  Problem Train(uint64_t index) const override {
    const uint64_t n = train_.size();
    const uint64_t epoch = index / n;
    Problem problem = train_[Permuted(epoch, index % n)];
    problem.id = name_ + "/train/" + std::to_string(index);
    return problem;
  }

  uint64_t TrainSize() const override { return train_.size(); }

 private:
  // Position `i` of epoch `epoch`'s shuffle (Fisher-Yates from a per-epoch
  // seed). The last epoch's order is cached: cursors move through one epoch
  // at a time.
  uint64_t Permuted(uint64_t epoch, uint64_t i) const {
    std::lock_guard<std::mutex> lock(mu_);
    if (order_.empty() || order_epoch_ != epoch) {
      order_.resize(train_.size());
      std::iota(order_.begin(), order_.end(), 0);
      Rng rng(Mix64(seed_ + epoch));
      for (size_t k = order_.size(); k > 1; --k) {
        std::swap(order_[k - 1], order_[rng.Uniform(0, static_cast<int64_t>(k) - 1)]);
      }
      order_epoch_ = epoch;
    }
    return order_[i];
  }

  std::vector<Problem> train_;
  uint64_t seed_;
  mutable std::mutex mu_;
  mutable std::vector<uint64_t> order_ ABSL_GUARDED_BY(mu_);
  mutable uint64_t order_epoch_ ABSL_GUARDED_BY(mu_) = 0;
};

// The tasks of an agent_jsonl file as problems: the prompt only describes
// the task (the worker sends the real one); the task rides along.
absl::StatusOr<std::vector<Problem>> ReadAgentProblems(const std::string& path,
                                                       const std::string& dataset) {
  auto tasks = ReadAgentTasks(path);
  if (!tasks.ok()) return tasks.status();
  std::vector<Problem> problems;
  for (AgentTask& task : *tasks) {
    Problem& problem = problems.emplace_back();
    problem.dataset = dataset;
    problem.id = dataset + "/" + task.task.id();
    problem.source = task.source;
    problem.messages =
        nlohmann::json::array({{{"role", "user"}, {"content", task.task.problem()}}});
    problem.agent_task = std::make_shared<const AgentTask>(std::move(task));
  }
  return problems;
}

// Problems of one file of a file dataset.
using ProblemReader = std::function<absl::StatusOr<std::vector<Problem>>(const std::string& path)>;

// A dataset of `spec.path` (and `spec.eval_path`) read by `read`.
absl::StatusOr<std::unique_ptr<Dataset>> LoadFileDataset(const config::DatasetSection& spec,
                                                         uint64_t run_seed,
                                                         const ProblemReader& read) {
  auto lines = read(spec.path);
  if (!lines.ok()) return lines.status();
  std::vector<Problem> train, eval;
  if (!spec.eval_path.empty()) {
    auto held_out = read(spec.eval_path);
    if (!held_out.ok()) return held_out.status();
    train = std::move(*lines);
    eval = std::move(*held_out);
  } else {
    for (auto& problem : *lines) {
      (IsHeldOut(problem, spec.eval_fraction) ? eval : train).push_back(std::move(problem));
    }
  }
  if (train.empty()) {
    return absl::InvalidArgumentError("dataset '" + spec.name + "': every line of " + spec.path +
                                      " is held out; lower eval_fraction");
  }
  if (spec.eval_size > 0 && eval.size() > static_cast<size_t>(spec.eval_size)) {
    eval.resize(spec.eval_size);
  }
  for (size_t i = 0; i < eval.size(); ++i) eval[i].id = spec.name + "/eval/" + std::to_string(i);
  return std::make_unique<JsonlDataset>(spec, run_seed, std::move(train), std::move(eval));
}

}  // namespace

bool IsHeldOut(const Problem& problem, double fraction) {
  std::string prompt = problem.messages.dump();
  if (problem.effort > 0) prompt += "\neffort " + std::to_string(problem.effort);
  const uint64_t bucket = Mix64(HashText(prompt)) % 1000000;
  return static_cast<double>(bucket) < fraction * 1e6;
}

absl::StatusOr<std::unique_ptr<Dataset>> LoadDataset(const config::DatasetSection& spec,
                                                     uint64_t run_seed) {
  if (spec.kind == "agent_jsonl") {
    return LoadFileDataset(spec, run_seed, [&spec](const std::string& path) {
      return ReadAgentProblems(path, spec.name);
    });
  }
  if (spec.environment == "sandbox") return std::make_unique<AgentDataset>(spec, run_seed);
  if (spec.kind == "jsonl") {
    return LoadFileDataset(spec, run_seed, [&spec](const std::string& path) {
      return ReadJsonlProblems(path, spec.name);
    });
  }
  auto generator = MakeGenerator(spec.kind);
  if (!generator.ok()) return generator.status();
  auto dataset = std::make_unique<GeneratedDataset>(spec, run_seed, std::move(*generator));
  if (auto status = dataset->BuildEval(); !status.ok()) return status;
  return std::unique_ptr<Dataset>(std::move(dataset));
}

absl::StatusOr<std::vector<std::unique_ptr<Dataset>>> LoadDatasets(
    const config::TasksSection& tasks, uint64_t run_seed) {
  std::vector<std::unique_ptr<Dataset>> datasets;
  for (const auto& spec : tasks.datasets) {
    auto dataset = LoadDataset(spec, run_seed);
    if (!dataset.ok()) return dataset.status();
    datasets.push_back(std::move(*dataset));
  }
  return datasets;
}

}  // namespace loom::tasks
