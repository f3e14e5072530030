#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "loom/tasks/ledger.h"

namespace loom::tasks {
namespace {

// One task's attempts: the counted ones of training and evaluation in
// policy-version order, and what `loom tasks check` found.
struct TaskHistory {
  std::string dataset, task_id;  // its training or evaluation attempts' (else its checks')
  std::vector<const LedgerAttempt*> counted;
  int64_t infrastructure = 0;
  int64_t passes = 0;
  int64_t passes_without_work = 0;
  bool reference_failed = false, unsolved_passed = false;
};

double PassRate(const std::vector<const LedgerAttempt*>& attempts, size_t begin, size_t end) {
  int64_t passes = 0;
  for (size_t i = begin; i < end; ++i) passes += attempts[i]->passed ? 1 : 0;
  return end > begin ? static_cast<double>(passes) / static_cast<double>(end - begin) : 0.0;
}

}  // namespace

nlohmann::json LedgerAudit(const std::vector<LedgerAttempt>& attempts,
                           const AuditOptions& options) {
  // By content: a task checked from one file and trained from another, or
  // renamed between runs, is one history.
  std::map<std::string, TaskHistory> by_key;
  for (const LedgerAttempt& a : attempts) {
    TaskHistory& t = by_key[a.task_key];
    const bool check = a.split == "reference" || a.split == "unsolved";
    if (t.task_id.empty() || (!check && t.counted.empty() && t.infrastructure == 0)) {
      t.dataset = a.dataset;
      t.task_id = a.task_id;
    }
    if (a.split == "reference") {
      t.reference_failed |= !a.passed;
    } else if (a.split == "unsolved") {
      t.unsolved_passed |= a.passed;
    } else if (a.failure_kind == "infrastructure") {
      ++t.infrastructure;
    } else {
      t.counted.push_back(&a);
      t.passes += a.passed ? 1 : 0;
      t.passes_without_work += a.passed && a.steps == 0 ? 1 : 0;
    }
  }
  // In dataset and task id order.
  std::map<std::tuple<std::string, std::string, std::string>, TaskHistory*> tasks;
  for (auto& [key, t] : by_key) tasks[{t.dataset, t.task_id, key}] = &t;
  nlohmann::json flags = nlohmann::json::array();
  std::map<std::string, int64_t> counts;
  for (auto& [key, history] : tasks) {
    // Named, not bound: a lambda may not capture a structured binding in C++17.
    const std::string& dataset = std::get<0>(key);
    const std::string& task_id = std::get<1>(key);
    const std::string& task_key = std::get<2>(key);
    TaskHistory& t = *history;
    const int64_t n = static_cast<int64_t>(t.counted.size());
    auto flag = [&](const char* name, const std::string& detail) {
      ++counts[name];
      flags.push_back({{"flag", name},
                       {"task_id", task_id},
                       {"task_key", task_key},
                       {"dataset", dataset},
                       {"attempts", n},
                       {"passes", t.passes},
                       {"detail", detail}});
    };
    if (t.reference_failed) flag("broken", "its reference solution fails its verification");
    if (t.unsolved_passed) flag("broken", "it passes with nothing done");
    if (n >= options.min_attempts && t.passes == n) {
      flag("always_solved", absl::StrCat("passed all ", n, " attempts"));
    }
    if (n >= options.min_attempts && t.passes == 0) {
      flag("never_solved", absl::StrCat("passed none of ", n, " attempts"));
    }
    const size_t half = t.counted.size() / 2;
    if (half >= static_cast<size_t>(std::max(1, options.min_attempts / 2))) {
      std::stable_sort(t.counted.begin(), t.counted.end(),
                       [](const LedgerAttempt* x, const LedgerAttempt* y) {
                         return x->policy_version < y->policy_version;
                       });
      const double before = PassRate(t.counted, 0, half);
      const double after = PassRate(t.counted, half, t.counted.size());
      if (std::abs(after - before) >= options.jump) {
        flag("reward_jump",
             absl::StrFormat("pass rate %.2f over versions %d..%d, then %.2f over %d..%d", before,
                             t.counted.front()->policy_version, t.counted[half - 1]->policy_version,
                             after, t.counted[half]->policy_version,
                             t.counted.back()->policy_version));
      }
    }
    if (t.passes_without_work > 0) {
      flag("won_without_work",
           absl::StrCat(t.passes_without_work, " of its ", t.passes, " passes made no tool call"));
    }
    const int64_t all = n + t.infrastructure;
    if (t.infrastructure > 0 &&
        static_cast<double>(t.infrastructure) >= options.infrastructure_rate * all) {
      flag("infrastructure", absl::StrCat(t.infrastructure, " of its ", all,
                                          " attempts failed for the "
                                          "infrastructure"));
    }
  }
  return {{"tasks", tasks.size()}, {"counts", counts}, {"flags", std::move(flags)}};
}

}  // namespace loom::tasks
