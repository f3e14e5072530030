// The task ledger: attempts round-trip through SQLite, two processes append
// at once without losing a row, a locked, a corrupt and a newer-schema
// ledger each give a clear error naming the file (and the newer one is left
// as it was), task keys hash content and not ids, and the statistics are
// checked against a count by hand.

#include "loom/tasks/ledger.h"

#include <gtest/gtest.h>

#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cstdio>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "loom/tasks/agent_jsonl.h"
#include "testing/temp_dir.h"

namespace loom::tasks {
namespace {

using testing::TempDir;

LedgerAttempt Attempt(const std::string& task, bool passed, const std::string& run = "run-a",
                      const std::string& failure_kind = "") {
  LedgerAttempt a;
  a.task_key = "key-" + task;
  a.task_id = task;
  a.dataset = "code";
  a.effort = 100;
  a.harness = "builtin";
  a.reward = passed ? 1.0 : 0.0;
  a.passed = passed;
  a.failure_kind = passed ? "" : (failure_kind.empty() ? "agent" : failure_kind);
  a.length = 17;
  a.policy_version = 3;
  a.run_id = run;
  a.config_version = 1;
  a.unix_time = 1.5e9;
  return a;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

TEST(TaskLedgerTest, AttemptsRoundTripAcrossReopening) {
  TempDir dir;
  const std::string path = dir / "ledger.sqlite";
  LedgerAttempt odd = Attempt("t'1\"; DROP TABLE attempts; --", false, "run-a", "limit");
  odd.failure = "time_limit";
  odd.harness = "pi";
  odd.split = "eval";
  odd.effort = 50;
  odd.steps = 4;
  LedgerAttempt unstamped = Attempt("t2", true);
  unstamped.unix_time = 0;  // Append stamps it
  const double before =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  {
    auto ledger = TaskLedger::Open(path);
    ASSERT_TRUE(ledger.ok()) << ledger.status();
    ASSERT_TRUE((*ledger)->Append({Attempt("t0", true), odd, unstamped}).ok());
  }
  auto ledger = TaskLedger::Open(path);
  ASSERT_TRUE(ledger.ok()) << ledger.status();
  auto read = (*ledger)->Read();
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 3u);
  const LedgerAttempt& back = (*read)[1];
  EXPECT_EQ(back.task_id, odd.task_id);
  EXPECT_EQ(back.task_key, odd.task_key);
  EXPECT_EQ(back.split, "eval");
  EXPECT_EQ(back.effort, 50);
  EXPECT_EQ(back.harness, "pi");
  EXPECT_EQ(back.failure_kind, "limit");
  EXPECT_EQ(back.failure, "time_limit");
  EXPECT_EQ(back.length, 17);
  EXPECT_EQ(back.steps, 4);
  EXPECT_EQ((*read)[0].steps, -1);
  EXPECT_EQ(back.policy_version, 3);
  EXPECT_EQ(back.unix_time, 1.5e9);
  EXPECT_GE((*read)[2].unix_time, before);
  EXPECT_LT((*read)[2].unix_time, before + 600);
  EXPECT_TRUE((*read)[0].passed);
  auto other = (*ledger)->Read("another");
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(other->empty());
}

// Two processes, each creating the ledger and appending 100 attempts in 50
// transactions, at once: every row of both is there, each process's in its
// own order.
TEST(TaskLedgerTest, TwoProcessesAppendAtOnceAndLoseNothing) {
  TempDir dir;
  const std::string path = dir / "ledger.sqlite";
  std::vector<pid_t> children;
  for (const char* run : {"run-a", "run-b"}) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto ledger = TaskLedger::Open(path, /*busy_timeout_ms=*/30000);
      if (!ledger.ok()) {
        std::fprintf(stderr, "%s: %s\n", run, std::string(ledger.status().message()).c_str());
        _exit(2);
      }
      for (int i = 0; i < 100; i += 2) {
        if (!(*ledger)
                 ->Append({Attempt(std::to_string(i), true, run),
                           Attempt(std::to_string(i + 1), false, run)})
                 .ok()) {
          _exit(3);
        }
      }
      _exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  auto ledger = TaskLedger::Open(path);
  ASSERT_TRUE(ledger.ok()) << ledger.status();
  auto read = (*ledger)->Read();
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 200u);
  std::map<std::string, std::vector<int>> order;
  for (const LedgerAttempt& a : *read) order[a.run_id].push_back(std::stoi(a.task_id));
  for (const char* run : {"run-a", "run-b"}) {
    ASSERT_EQ(order[run].size(), 100u);
    for (int i = 0; i < 100; ++i) EXPECT_EQ(order[run][i], i) << run;
  }
}

TEST(TaskLedgerTest, ALockedLedgerIsUnavailableAndNamesTheFile) {
  TempDir dir;
  const std::string path = dir / "ledger.sqlite";
  auto ledger = TaskLedger::Open(path, /*busy_timeout_ms=*/100);
  ASSERT_TRUE(ledger.ok()) << ledger.status();
  sqlite3* holder = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &holder), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(holder, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  const absl::Status locked = (*ledger)->Append({Attempt("t0", true)});
  EXPECT_EQ(locked.code(), absl::StatusCode::kUnavailable) << locked;
  EXPECT_NE(locked.message().find(path), std::string::npos) << locked;
  EXPECT_NE(locked.message().find("locked"), std::string::npos) << locked;
  // Nothing half-written, and the ledger works once the lock is gone.
  ASSERT_EQ(sqlite3_exec(holder, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(holder);
  ASSERT_TRUE((*ledger)->Append({Attempt("t1", true)}).ok());
  auto read = (*ledger)->Read();
  ASSERT_TRUE(read.ok());
  ASSERT_EQ(read->size(), 1u);
  EXPECT_EQ((*read)[0].task_id, "t1");
}

TEST(TaskLedgerTest, ACorruptLedgerIsDataLossAndNamesTheFile) {
  TempDir dir;
  const std::string garbage = dir.Write("garbage.sqlite", std::string(8192, 'x'));
  auto opened = TaskLedger::Open(garbage);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kDataLoss) << opened.status();
  EXPECT_NE(opened.status().message().find(garbage), std::string::npos) << opened.status();

  // A real ledger whose pages were overwritten past its header.
  const std::string path = dir / "ledger.sqlite";
  {
    auto ledger = TaskLedger::Open(path);
    ASSERT_TRUE(ledger.ok());
    std::vector<LedgerAttempt> many;
    for (int i = 0; i < 500; ++i) many.push_back(Attempt(std::to_string(i), i % 2 == 0));
    ASSERT_TRUE((*ledger)->Append(many).ok());
  }
  {
    // Checkpoint the WAL into the file first, so the damage hits the rows.
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  std::string bytes = ReadBytes(path);
  ASSERT_GT(bytes.size(), 16384u);
  for (size_t i = 4096; i < bytes.size(); ++i) bytes[i] = static_cast<char>(0xA5);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  auto ledger = TaskLedger::Open(path);
  absl::Status status = ledger.ok() ? (*ledger)->Read().status() : ledger.status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_NE(status.message().find(path), std::string::npos) << status;
}

TEST(TaskLedgerTest, ANewerSchemaIsRefusedAndLeftAsItWas) {
  TempDir dir;
  const std::string path = dir / "ledger.sqlite";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE attempts_v3 (x); PRAGMA user_version=3", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  const std::string before = ReadBytes(path);
  auto ledger = TaskLedger::Open(path);
  ASSERT_FALSE(ledger.ok());
  EXPECT_EQ(ledger.status().code(), absl::StatusCode::kFailedPrecondition) << ledger.status();
  EXPECT_NE(ledger.status().message().find(path), std::string::npos);
  EXPECT_NE(ledger.status().message().find("schema 3"), std::string::npos) << ledger.status();
  EXPECT_EQ(ReadBytes(path), before);
}

// A ledger of schema 1 (before responses were kept) is migrated in place:
// its attempts stay, with empty responses, and new ones keep theirs.
TEST(TaskLedgerTest, ASchemaOneLedgerIsMigratedKeepingItsAttempts) {
  TempDir dir;
  const std::string path = dir / "ledger.sqlite";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "CREATE TABLE attempts (task_key TEXT NOT NULL, task_id TEXT NOT NULL, "
                         "dataset TEXT NOT NULL, split TEXT NOT NULL, effort INTEGER NOT NULL, "
                         "harness TEXT NOT NULL, reward REAL NOT NULL, passed INTEGER NOT NULL, "
                         "failure_kind TEXT NOT NULL, failure TEXT NOT NULL, length INTEGER NOT "
                         "NULL, steps INTEGER NOT NULL, policy_version INTEGER NOT NULL, run_id "
                         "TEXT NOT NULL, config_version INTEGER NOT NULL, unix_time REAL NOT NULL);"
                         "INSERT INTO attempts VALUES ('k', 'old', 'code', 'train', 100, '', 1, 1, "
                         "'', '', 5, -1, 2, 'r', 1, 1.5e9);"
                         "PRAGMA user_version=1",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto ledger = TaskLedger::Open(path);
  ASSERT_TRUE(ledger.ok()) << ledger.status();
  LedgerAttempt fresh = Attempt("new", true);
  fresh.response = "85";
  ASSERT_TRUE((*ledger)->Append({fresh}).ok());
  auto read = (*ledger)->Read();
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 2u);
  EXPECT_EQ((*read)[0].task_id, "old");
  EXPECT_EQ((*read)[0].length, 5);
  EXPECT_EQ((*read)[0].response, "");
  EXPECT_EQ((*read)[1].response, "85");
  ledger->reset();
  ASSERT_TRUE(TaskLedger::Open(path).ok());  // opened again: already schema 2
}

// Someone else's SQLite database is not taken over: refused, and left
// byte for byte (its journal mode included).
TEST(TaskLedgerTest, AnotherSqliteDatabaseIsRefusedAndLeftAsItWas) {
  TempDir dir;
  const std::string path = dir / "app.db";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE users (name TEXT); INSERT INTO users VALUES ('ada')",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  const std::string before = ReadBytes(path);
  auto ledger = TaskLedger::Open(path);
  ASSERT_FALSE(ledger.ok());
  EXPECT_EQ(ledger.status().code(), absl::StatusCode::kDataLoss) << ledger.status();
  EXPECT_NE(ledger.status().message().find("tables of its own"), std::string::npos);
  EXPECT_EQ(ReadBytes(path), before);
  EXPECT_FALSE(std::filesystem::exists(path + "-wal"));
}

Problem AgentProblem(const std::string& id, const std::string& verification,
                     const std::vector<std::pair<std::string, std::string>>& files) {
  auto task = std::make_shared<AgentTask>();
  task->task.set_id(id);
  task->task.set_problem("Fix it.");
  for (const auto& [name, content] : files) {
    (*task->task.mutable_environment()->mutable_files())[name] = content;
  }
  task->task.mutable_verification()->set_command(verification);
  Problem problem;
  problem.id = "code/train/0";
  problem.agent_task = task;
  return problem;
}

TEST(TaskKeyTest, HashesContentNotIds) {
  const std::string key = TaskKey(AgentProblem("a", "true", {{"x.py", "1"}, {"y.py", "2"}}));
  EXPECT_EQ(key.size(), 64u);  // hex SHA-256
  EXPECT_EQ(TaskKey(AgentProblem("renamed", "true", {{"y.py", "2"}, {"x.py", "1"}})), key);
  EXPECT_NE(TaskKey(AgentProblem("a", "false", {{"x.py", "1"}, {"y.py", "2"}})), key);
  EXPECT_NE(TaskKey(AgentProblem("a", "true", {{"x.py", "1"}, {"y.py", "3"}})), key);

  Problem single;
  single.id = "arith/train/1";
  single.messages = nlohmann::json::array({{{"role", "user"}, {"content", "1+1"}}});
  single.answer = "2";
  Problem moved = single;
  moved.id = "arith/train/9";
  EXPECT_EQ(TaskKey(moved), TaskKey(single));
  moved.answer = "3";
  EXPECT_NE(TaskKey(moved), TaskKey(single));
}

// By hand: task a passes 3 of 4, task b 0 of 2 (and fails once for the
// infrastructure, left out); the second run holds b's attempts.
TEST(LedgerStatsTest, PassRatesAddUpByHand) {
  std::vector<LedgerAttempt> attempts = {
      Attempt("a", true),           Attempt("a", true),
      Attempt("a", false),          Attempt("a", true),
      Attempt("b", false, "run-b"), Attempt("b", false, "run-b", "infrastructure"),
      Attempt("b", false, "run-b")};
  attempts[4].policy_version = 7;
  attempts[6].policy_version = 9;
  attempts[6].effort = 50;
  const nlohmann::json stats = LedgerStats(attempts);
  ASSERT_EQ(stats["datasets"].size(), 1u);
  const nlohmann::json& d = stats["datasets"][0];
  EXPECT_EQ(d["tasks"], 2);
  EXPECT_EQ(d["attempts"], 6);
  EXPECT_EQ(d["infrastructure"], 1);
  EXPECT_DOUBLE_EQ(d["pass_rate"].get<double>(), 0.5);
  // Per-task rates 0.75 and 0: sd 0.5303 (n - 1), over √2.
  EXPECT_NEAR(d["pass_rate_stderr"].get<double>(), 0.375, 1e-12);
  EXPECT_EQ(d["by_effort"]["50"],
            nlohmann::json({{"attempts", 1}, {"pass_rate", 0.0}, {"infrastructure", 0}}));
  EXPECT_EQ(d["by_split"]["train"]["infrastructure"], 1);
  EXPECT_EQ(d["by_effort"]["100"]["attempts"], 5);
  EXPECT_DOUBLE_EQ(d["by_effort"]["100"]["pass_rate"].get<double>(), 0.6);
  ASSERT_EQ(d["by_run"].size(), 2u);
  EXPECT_EQ(d["by_run"][0]["run_id"], "run-a");
  EXPECT_DOUBLE_EQ(d["by_run"][0]["pass_rate"].get<double>(), 0.75);
  EXPECT_EQ(d["by_run"][1]["run_id"], "run-b");
  EXPECT_EQ(d["by_run"][1]["first_version"], 3);
  EXPECT_EQ(d["by_run"][1]["last_version"], 9);
  ASSERT_EQ(stats["tasks"].size(), 2u);
  const nlohmann::json& a = stats["tasks"][0];
  EXPECT_EQ(a["task_id"], "a");
  EXPECT_EQ(a["passes"], 3);
  EXPECT_NEAR(a["pass_rate_stderr"].get<double>(), std::sqrt(0.75 * 0.25 / 4), 1e-12);
  EXPECT_EQ(stats["tasks"][1]["infrastructure"], 1);
}

}  // namespace
}  // namespace loom::tasks

namespace loom::tasks {
namespace {

// A hand-built history with one task per flag (and one with none), each
// task's attempts under its own key; the audit must flag exactly those.
TEST(LedgerAuditTest, FlagsExactlyTheTasksBuiltToBeFlagged) {
  std::vector<LedgerAttempt> attempts;
  auto add = [&](const std::string& task, bool passed, int64_t version, int steps = 3,
                 const std::string& split = "train", const std::string& kind = "") {
    LedgerAttempt a = Attempt(task, passed, "run-a", kind);
    a.policy_version = version;
    a.steps = steps;
    a.split = split;
    attempts.push_back(a);
  };
  for (int v = 0; v < 6; ++v) add("easy", true, v);
  for (int v = 0; v < 6; ++v) add("hard", false, v);
  // Learnt, or hacked: 0 of 3, then 3 of 3. Also not always nor never.
  for (int v = 0; v < 6; ++v) add("jumpy", v >= 3, v);
  // Mixed and steady: nothing to flag.
  for (int v = 0; v < 6; ++v) add("fine", v % 2 == 0, v);
  // Won once with no tool call (and otherwise mixed).
  add("lazy", true, 0, /*steps=*/0);
  add("lazy", false, 1);
  add("lazy", true, 2);
  add("lazy", false, 3);
  // A third of its attempts lost to the infrastructure.
  add("flaky", true, 0);
  add("flaky", false, 1);
  add("flaky", false, 2, 3, "train", "infrastructure");
  // `loom tasks check`: its reference fails (recorded under the file's name,
  // the same key), and nothing is trained on it.
  LedgerAttempt reference = Attempt("broken", false);
  reference.split = "reference";
  reference.dataset = "code-train";
  attempts.push_back(reference);
  add("broken", true, 0);
  add("broken", false, 1);
  // A check whose unsolved episode passed.
  LedgerAttempt unsolved = Attempt("trivial", true);
  unsolved.split = "unsolved";
  attempts.push_back(unsolved);

  const nlohmann::json audit = LedgerAudit(attempts);
  EXPECT_EQ(audit["tasks"], 8);
  std::vector<std::pair<std::string, std::string>> found;  // (task, flag)
  for (const nlohmann::json& f : audit["flags"]) found.emplace_back(f["task_id"], f["flag"]);
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"broken", "broken"},     {"easy", "always_solved"}, {"flaky", "infrastructure"},
      {"hard", "never_solved"}, {"jumpy", "reward_jump"},  {"lazy", "won_without_work"},
      {"trivial", "broken"}};
  EXPECT_EQ(found, expected) << audit.dump(1);
  for (const nlohmann::json& f : audit["flags"]) {
    if (f["task_id"] == "broken") {
      EXPECT_EQ(f["dataset"], "code") << "named by its training attempts, not its check";
      EXPECT_EQ(f["detail"], "its reference solution fails its verification");
    }
    if (f["flag"] == "reward_jump") {
      EXPECT_EQ(f["detail"], "pass rate 0.00 over versions 0..2, then 1.00 over 3..5");
    }
    if (f["flag"] == "infrastructure") {
      EXPECT_EQ(f["attempts"], 2);
    }
  }
  EXPECT_EQ(audit["counts"]["broken"], 2);
  // Fewer attempts than --min-attempts: neither always nor never solved.
  AuditOptions strict;
  strict.min_attempts = 8;
  const nlohmann::json strict_audit = LedgerAudit(attempts, strict);
  // Left: the two broken, the workless win and the infrastructure.
  EXPECT_EQ(strict_audit["flags"].size(), 4u) << strict_audit.dump(1);
  for (const nlohmann::json& f : strict_audit["flags"]) {
    EXPECT_NE(f["flag"], "always_solved");
    EXPECT_NE(f["flag"], "never_solved");
    EXPECT_NE(f["flag"], "reward_jump") << "halves of 3 are below 8 / 2";
  }
}

}  // namespace
}  // namespace loom::tasks
