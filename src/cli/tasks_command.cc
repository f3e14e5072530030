// `loom tasks stats LEDGER|RUN_DIR [--dataset D] [--json]`: the task
// ledger's pass rates (loom/tasks/ledger.h, LedgerStats): per dataset, with
// its split by effort and harness and its trend across runs. With --json the
// last line is LedgerStats' JSON, with every task's row. Exit 2 when the
// ledger is missing or cannot be read.
//
// `loom tasks audit LEDGER|RUN_DIR [--dataset D] [--min-attempts N]
// [--jump J] [--json]`: the ledger's flagged tasks (LedgerAudit): always or
// never solved, broken, a jump in reward, won without work, failing for the
// infrastructure. A line per flag and a count per kind; with --json the last
// line is LedgerAudit's JSON. Exit 2 when the ledger is missing or unreadable.
//
// `loom tasks dedup FILE... [--threshold 0.8] [--json]`: near-duplicate
// tasks across task files, agent task files (kind agent_jsonl) or
// single-turn JSONL files (compared by their prompts; named by their `id`,
// else file:line) (loom/tasks/dedup.h): a line per pair with
// its exact Jaccard and MinHash estimate; with --json the last line is
// {"tasks", "threshold", "pairs": [{"a", "b", "source_a", "source_b",
// "jaccard", "estimate"}]}. Exit 2 for a bad file.
//
// `loom tasks check FILE... [--local N] [--worker ADDR]... [--auth-token-file F]
// [--jobs J] [--json]`: reads agent task files (kind agent_jsonl; every
// malformed line is reported, exit 2) and checks every task in real
// sandboxes (loom/agent/task_check.h): its verification must fail when
// nothing is done and pass with its reference solution. Prints a line per
// task that is not fine and a summary; with --json the last line is
// {"tasks", "ok", "broken": [{id, source, problem}], "not_checked": [...],
// "without_reference", "seconds"}. Exit 0 when every task is fine, 1 when
// one is broken or could not be checked, 2 for a bad file or flag.

#include <chrono>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cli/command.h"
#include "loom/agent/task_check.h"
#include "loom/base/parallel.h"
#include "loom/rpc/sandbox_clients.h"
#include "loom/tasks/dedup.h"
#include "loom/tasks/jsonl.h"
#include "loom/tasks/ledger.h"

namespace loom::cli {
namespace {

struct CheckFlags {
  std::vector<std::string> files;
  std::vector<std::string> workers;
  std::string auth_token_file;
  int local = 2;
  int jobs = 2;
  bool json = false;
  std::string ledger;   // "" = none
  std::string dataset;  // the ledger's dataset name for these tasks
};

// What `loom tasks check` found, for the task ledger: per checked task, the
// episode that did nothing (split "unsolved") and the reference's
// ("reference"). `tasks` and `checks` are in the same order.
absl::Status AppendChecks(const CheckFlags& flags, const std::vector<tasks::AgentTask>& tasks,
                          const std::vector<agent::TaskCheck>& checks) {
  auto ledger = tasks::TaskLedger::Open(flags.ledger);
  if (!ledger.ok()) return ledger.status();
  const std::string dataset = flags.dataset.empty()
                                  ? std::filesystem::path(flags.files.front()).stem().string()
                                  : flags.dataset;
  std::vector<tasks::LedgerAttempt> attempts;
  for (size_t i = 0; i < checks.size(); ++i) {
    const agent::TaskCheck& check = checks[i];
    if (!check.checked()) continue;
    for (const auto& [split, trajectory] :
         {std::pair<const char*, const v1::Trajectory*>{"unsolved", &check.unsolved},
          {"reference", &check.reference}}) {
      if (trajectory == &check.reference && !check.has_reference) continue;
      tasks::LedgerAttempt& a = attempts.emplace_back();
      a.task_key = tasks::TaskKey(tasks[i]);
      a.task_id = check.id;
      a.dataset = dataset;
      a.split = split;
      a.harness = "check";
      a.reward = trajectory->verdict().reward();
      a.passed = trajectory->verdict().passed();
      a.failure = a.passed ? "" : trajectory->verdict().details().substr(0, 500);
      a.failure_kind = tasks::FailureKind(a.passed, false, false, true);
      a.run_id = "loom tasks check";
    }
  }
  return (*ledger)->Append(attempts);
}

// Every task of every file; the files' errors all together.
absl::StatusOr<std::vector<tasks::AgentTask>> ReadAll(const std::vector<std::string>& files) {
  std::vector<tasks::AgentTask> all;
  std::string errors;
  for (const std::string& file : files) {
    auto tasks = tasks::ReadAgentTasks(file);
    if (!tasks.ok()) {
      errors += (errors.empty() ? "" : "\n") + std::string(tasks.status().message());
      continue;
    }
    for (tasks::AgentTask& task : *tasks) all.push_back(std::move(task));
  }
  if (!errors.empty()) return absl::InvalidArgumentError(errors);
  return all;
}

// Checks `tasks` on `jobs` threads, in file order in the result.
std::vector<agent::TaskCheck> CheckAll(rpc::WorkerPool& pool,
                                       const std::vector<tasks::AgentTask>& tasks,
                                       const v1::ScaffoldOptions& options, int jobs) {
  std::vector<agent::TaskCheck> checks(tasks.size());
  std::mutex print;
  ParallelFor(tasks.size(), static_cast<size_t>(jobs), [&](size_t i) {
    checks[i] = agent::CheckAgentTask(pool, tasks[i], options);
    const std::string problem = checks[i].Problem();
    if (problem.empty()) return;
    std::lock_guard<std::mutex> lock(print);
    std::cerr << checks[i].source << ": " << checks[i].id << ": " << problem << "\n";
  });
  return checks;
}

int RunCheck(const CheckFlags& flags) {
  auto tasks = ReadAll(flags.files);
  if (!tasks.ok()) {
    std::cerr << "loom tasks check: " << tasks.status().message() << "\n";
    return kExitUsage;
  }
  config::SandboxSection sandbox;
  sandbox.workers = flags.workers;
  sandbox.local = flags.workers.empty() ? flags.local : 0;
  sandbox.local_max_sandboxes = flags.jobs;
  sandbox.auth_token_file = flags.auth_token_file;
  auto clients = rpc::StartSandboxClients(sandbox);
  if (!clients.ok()) {
    std::cerr << "loom tasks check: " << clients.status().message() << "\n";
    return kExitFailure;
  }
  const auto start = std::chrono::steady_clock::now();
  const std::vector<agent::TaskCheck> checks =
      CheckAll(*clients->pool, *tasks, rpc::ScaffoldOptionsFrom(sandbox), flags.jobs);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!flags.ledger.empty()) {
    if (absl::Status s = AppendChecks(flags, *tasks, checks); !s.ok()) {
      std::cerr << "loom tasks check: " << s.message() << "\n";
      return kExitFailure;
    }
  }

  nlohmann::ordered_json broken = nlohmann::json::array(), unchecked = nlohmann::json::array();
  int without_reference = 0;
  for (const agent::TaskCheck& check : checks) {
    if (!check.has_reference) ++without_reference;
    const std::string problem = check.Problem();
    if (problem.empty()) continue;
    (check.checked() ? broken : unchecked)
        .push_back({{"id", check.id}, {"source", check.source}, {"problem", problem}});
  }
  const size_t ok = checks.size() - broken.size() - unchecked.size();
  std::cout << checks.size() << " tasks: " << ok << " fine, " << broken.size() << " broken, "
            << unchecked.size() << " not checked, " << without_reference
            << " without a reference solution (" << seconds << " s)\n";
  if (flags.json) {
    nlohmann::ordered_json out = {{"tasks", checks.size()},
                                  {"ok", ok},
                                  {"broken", broken},
                                  {"not_checked", unchecked},
                                  {"without_reference", without_reference},
                                  {"seconds", seconds}};
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  return broken.empty() && unchecked.empty() ? kExitOk : kExitFailure;
}

struct StatsFlags {
  std::string ledger;  // a ledger file, or a run directory holding ledger.sqlite
  std::string dataset;
  bool json = false;
};

int RunStats(const StatsFlags& flags) {
  auto attempts = tasks::ReadLedgerAt(flags.ledger, flags.dataset);
  if (!attempts.ok()) {
    std::cerr << "loom tasks stats: " << attempts.status().message() << "\n";
    return kExitUsage;
  }
  const nlohmann::json stats = tasks::LedgerStats(*attempts);
  std::printf("%-16s %6s %9s %-14s %6s\n", "dataset", "tasks", "attempts", "pass rate", "infra");
  for (const nlohmann::json& d : stats["datasets"]) {
    char rate[48];
    std::snprintf(rate, sizeof rate, "%.3f±%.3f", d["pass_rate"].get<double>(),
                  d["pass_rate_stderr"].get<double>());
    // One byte wider than the header: "±" is two bytes in UTF-8.
    std::printf("%-16s %6lld %9lld %-15s %6lld\n", d["dataset"].get<std::string>().c_str(),
                d["tasks"].get<long long>(), d["attempts"].get<long long>(), rate,
                d["infrastructure"].get<long long>());
    for (const char* split : {"by_split", "by_effort", "by_harness"}) {
      for (const auto& [name, t] : d[split].items()) {
        std::printf("  %-10s %-12s %9lld %.3f\n", split + 3, name.c_str(),
                    t["attempts"].get<long long>(), t["pass_rate"].get<double>());
      }
    }
    for (const nlohmann::json& run : d["by_run"]) {
      std::printf("  run %s (versions %lld..%lld): %lld attempts, pass rate %.3f\n",
                  run["run_id"].get<std::string>().c_str(), run["first_version"].get<long long>(),
                  run["last_version"].get<long long>(), run["attempts"].get<long long>(),
                  run["pass_rate"].get<double>());
    }
  }
  std::printf("± one standard error over the tasks; infrastructure failures are left out\n");
  if (flags.json)
    std::cout << stats.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  return kExitOk;
}

struct AuditFlags {
  std::string ledger;
  std::string dataset;
  tasks::AuditOptions options;
  bool json = false;
};

int RunAudit(const AuditFlags& flags) {
  auto attempts = tasks::ReadLedgerAt(flags.ledger, flags.dataset);
  if (!attempts.ok()) {
    std::cerr << "loom tasks audit: " << attempts.status().message() << "\n";
    return kExitUsage;
  }
  const nlohmann::json audit = tasks::LedgerAudit(*attempts, flags.options);
  for (const nlohmann::json& f : audit["flags"]) {
    std::printf("%-17s %-16s %-24s %s\n", f["flag"].get<std::string>().c_str(),
                f["dataset"].get<std::string>().c_str(), f["task_id"].get<std::string>().c_str(),
                f["detail"].get<std::string>().c_str());
  }
  std::printf("%lld tasks audited", audit["tasks"].get<long long>());
  for (const auto& [flag, count] : audit["counts"].items()) {
    std::printf(", %lld %s", count.get<long long>(), flag.c_str());
  }
  std::printf("\n");
  if (flags.json)
    std::cout << audit.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  return kExitOk;
}

struct DedupFlags {
  std::vector<std::string> files;
  double threshold = 0.8;
  bool json = false;
};

// A task as dedup compares it.
struct DedupItem {
  std::string id, source, text;
};

// Whether `file`'s first line is a single-turn problem (it has "messages").
bool SingleTurnFile(const std::string& file) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line) && line.find_first_not_of(" \t\r") == std::string::npos) {
  }
  const nlohmann::json first = nlohmann::json::parse(line, nullptr, false);
  return first.is_object() && first.contains("messages");
}

// The tasks of every file; every file's errors together.
absl::StatusOr<std::vector<DedupItem>> ReadDedupItems(const std::vector<std::string>& files) {
  std::vector<DedupItem> items;
  std::vector<std::string> agent_files;
  std::string errors;
  for (const std::string& file : files) {
    if (!SingleTurnFile(file)) {
      agent_files.push_back(file);
      continue;
    }
    auto problems = tasks::ReadJsonlProblems(file, "dedup");
    if (!problems.ok()) {
      errors += (errors.empty() ? "" : "\n") + std::string(problems.status().message());
      continue;
    }
    for (const tasks::Problem& p : *problems) {
      items.push_back({p.TaskId(), p.source, tasks::ProblemText(p)});
    }
  }
  auto agent_tasks = ReadAll(agent_files);
  if (!agent_tasks.ok()) {
    errors += (errors.empty() ? "" : "\n") + std::string(agent_tasks.status().message());
  } else {
    for (const tasks::AgentTask& t : *agent_tasks) {
      items.push_back({t.task.id(), t.source, tasks::TaskText(t)});
    }
  }
  if (!errors.empty()) return absl::InvalidArgumentError(errors);
  return items;
}

int RunDedup(const DedupFlags& flags) {
  auto tasks = ReadDedupItems(flags.files);
  if (!tasks.ok()) {
    std::cerr << "loom tasks dedup: " << tasks.status().message() << "\n";
    return kExitUsage;
  }
  std::vector<std::string> texts;
  for (const DedupItem& task : *tasks) texts.push_back(task.text);
  tasks::DedupOptions options;
  options.threshold = flags.threshold;
  nlohmann::json pairs = nlohmann::json::array();
  for (const tasks::DuplicatePair& p : tasks::FindNearDuplicates(texts, options)) {
    const DedupItem &a = (*tasks)[p.a], &b = (*tasks)[p.b];
    std::printf("Jaccard %.3f (MinHash %.3f): %s (%s) ~ %s (%s)\n", p.jaccard, p.estimate,
                a.id.c_str(), a.source.c_str(), b.id.c_str(), b.source.c_str());
    pairs.push_back({{"a", a.id},
                     {"b", b.id},
                     {"source_a", a.source},
                     {"source_b", b.source},
                     {"jaccard", p.jaccard},
                     {"estimate", p.estimate}});
  }
  std::printf("%zu tasks, %zu near-duplicate pairs (Jaccard >= %.2f)\n", tasks->size(),
              pairs.size(), flags.threshold);
  if (flags.json) {
    const nlohmann::json out = {
        {"tasks", tasks->size()}, {"threshold", flags.threshold}, {"pairs", pairs}};
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  return kExitOk;
}

void SetupTasks(CLI::App& app, Context& context) {
  CLI::App* group = GroupCommand(app, "tasks", "Work with agent task files and the task ledger");
  auto flags = std::make_shared<CheckFlags>();
  CLI::App* check = group->add_subcommand(
      "check", "Check agent tasks in sandboxes: unsolved must fail, the reference must pass");
  check->add_option("files", flags->files, "agent_jsonl task files")->required();
  check->add_option("--worker", flags->workers,
                    "Sandbox worker address (repeatable); none: "
                    "start local workers");
  check->add_option("--auth-token-file", flags->auth_token_file, "File with the workers' token");
  check->add_option("--local", flags->local, "Local workers to start when no --worker is given")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  check->add_option("--jobs", flags->jobs, "Tasks checked at once")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  check->add_flag("--json", flags->json, "Print the summary as JSON too");
  check->add_option("--ledger", flags->ledger,
                    "Task ledger to record each task's two episodes in, for `loom tasks audit`");
  check
      ->add_option("--dataset", flags->dataset,
                   "The dataset name the ledger records the tasks under (as in a run's config)")
      ->default_str("the first file's name without .jsonl");
  check->callback([flags, &context] { context.exit_code = RunCheck(*flags); });

  auto stats_flags = std::make_shared<StatsFlags>();
  CLI::App* stats = group->add_subcommand(
      "stats", "Pass rates from a task ledger: per dataset, effort, harness and run");
  stats->add_option("ledger", stats_flags->ledger, "Ledger file, or a run directory")->required();
  stats->add_option("--dataset", stats_flags->dataset, "Only this dataset's attempts");
  stats->add_flag("--json", stats_flags->json,
                  "Print the statistics as JSON too, every task's row");
  stats->callback([stats_flags, &context] { context.exit_code = RunStats(*stats_flags); });

  auto audit_flags = std::make_shared<AuditFlags>();
  CLI::App* audit = group->add_subcommand(
      "audit", "Flag tasks in a task ledger: always or never solved, broken, suspicious wins");
  audit->add_option("ledger", audit_flags->ledger, "Ledger file, or a run directory")->required();
  audit->add_option("--dataset", audit_flags->dataset, "Only this dataset's tasks");
  audit
      ->add_option("--min-attempts", audit_flags->options.min_attempts,
                   "Attempts a task needs before it is called always or never solved")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  audit
      ->add_option("--jump", audit_flags->options.jump,
                   "Change in pass rate between a task's earlier and later attempts that is "
                   "flagged")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  audit->add_flag("--json", audit_flags->json, "Print the flags as JSON too");
  audit->callback([audit_flags, &context] { context.exit_code = RunAudit(*audit_flags); });

  auto dedup_flags = std::make_shared<DedupFlags>();
  CLI::App* dedup = group->add_subcommand(
      "dedup", "Find near-duplicate tasks across task files (MinHash over word shingles)");
  dedup->add_option("files", dedup_flags->files, "agent_jsonl task files")->required();
  dedup
      ->add_option("--threshold", dedup_flags->threshold,
                   "Jaccard similarity of word 3-shingles from which two tasks are duplicates")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  dedup->add_flag("--json", dedup_flags->json, "Print the pairs as JSON too");
  dedup->callback([dedup_flags, &context] { context.exit_code = RunDedup(*dedup_flags); });
}

}  // namespace

LOOM_REGISTER_COMMAND("tasks", SetupTasks);

}  // namespace loom::cli
