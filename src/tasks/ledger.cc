#include "loom/tasks/ledger.h"

#include <chrono>
#include <filesystem>
#include <thread>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <openssl/evp.h>
#include <sqlite3.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "loom/tasks/agent_jsonl.h"

namespace loom::tasks {
namespace {

constexpr char kCreate[] = R"(
CREATE TABLE IF NOT EXISTS attempts (
  task_key TEXT NOT NULL,
  task_id TEXT NOT NULL,
  dataset TEXT NOT NULL,
  split TEXT NOT NULL,
  effort INTEGER NOT NULL,
  harness TEXT NOT NULL,
  reward REAL NOT NULL,
  passed INTEGER NOT NULL,
  failure_kind TEXT NOT NULL,
  failure TEXT NOT NULL,
  length INTEGER NOT NULL,
  steps INTEGER NOT NULL,
  policy_version INTEGER NOT NULL,
  run_id TEXT NOT NULL,
  config_version INTEGER NOT NULL,
  unix_time REAL NOT NULL,
  response TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS attempts_by_task ON attempts (task_key);
)";

constexpr char kColumns[] =
    "task_key, task_id, dataset, split, effort, harness, reward, passed, failure_kind, failure, "
    "length, steps, policy_version, run_id, config_version, unix_time, response";

// Schema 1 had no responses: its attempts keep an empty one.
constexpr char kMigrateFrom1[] =
    "ALTER TABLE attempts ADD COLUMN response TEXT NOT NULL DEFAULT '';";

// `rc` of a call on `db` as a status naming the ledger's path.
absl::Status Error(sqlite3* db, int rc, const std::string& path, const std::string& doing) {
  const std::string what = absl::StrCat("task ledger ", path, ": ", doing, ": ",
                                        db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(what + " (another run holds it locked)");
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(what + " (not a loom task ledger, or corrupt)");
    default:
      return absl::InternalError(what);
  }
}

absl::Status Exec(sqlite3* db, const char* sql, const std::string& path, const std::string& doing) {
  const int rc = sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
  return rc == SQLITE_OK ? absl::OkStatus() : Error(db, rc, path, doing);
}

// A prepared statement, finalised on scope exit.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  int rc() const { return rc_; }
  sqlite3_stmt* get() const { return stmt_; }

 private:
  sqlite3_stmt* stmt_ = nullptr;
  int rc_;
};

std::string Text(sqlite3_stmt* stmt, int column) {
  const unsigned char* text = sqlite3_column_text(stmt, column);
  return text != nullptr ? reinterpret_cast<const char*>(text) : "";
}

std::string Sha256Hex(const std::string& bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &size, EVP_sha256(), nullptr);
  return absl::BytesToHexString(std::string(reinterpret_cast<const char*>(digest), size));
}

}  // namespace

absl::StatusOr<std::unique_ptr<TaskLedger>> TaskLedger::Open(const std::string& path,
                                                             int busy_timeout_ms) {
  sqlite3* db = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  std::unique_ptr<TaskLedger> ledger(new TaskLedger(db, path));
  if (rc != SQLITE_OK) return Error(db, rc, path, "opening");
  sqlite3_busy_timeout(db, busy_timeout_ms);
  // A database of schema 0 with tables is someone else's: left as it is.
  // Both read by one statement, so from one snapshot: read apart, another
  // run's schema could be created between them. Finalised at once: a
  // statement in progress holds a transaction open.
  auto check = [&]() -> absl::StatusOr<int64_t> {
    constexpr char kSql[] =
        "SELECT (SELECT user_version FROM pragma_user_version), "
        "(SELECT count(*) FROM sqlite_master)";
    Statement statement(db, kSql);
    if (statement.rc() != SQLITE_OK) return Error(db, statement.rc(), path, "reading its schema");
    const int step = sqlite3_step(statement.get());
    if (step != SQLITE_ROW) return Error(db, step, path, "reading its schema");
    const int64_t schema = sqlite3_column_int64(statement.get(), 0);
    const int64_t tables = sqlite3_column_int64(statement.get(), 1);
    if (schema > kSchema) {
      return absl::FailedPreconditionError(absl::StrCat("task ledger ", path, ": schema ", schema,
                                                        " is newer than this loom's (", kSchema,
                                                        "); use a newer loom, or another ledger"));
    }
    if (schema == 0 && tables > 0) {
      return absl::DataLossError(absl::StrCat(
          "task ledger ", path,
          ": not a loom task ledger (an SQLite database with tables of its own); left as it is"));
    }
    return schema;
  };
  // Taking the locks to change the journal mode or to create the schema,
  // SQLite may answer BUSY at once, without waiting in its busy handler,
  // while another run opens the same new file: retry until the busy timeout.
  auto retrying = [&](const char* sql, const char* doing) {
    absl::Status s;
    for (int waited = 0;; waited += 10) {
      s = Exec(db, sql, path, doing);
      if (s.ok() || !absl::IsUnavailable(s) || waited >= busy_timeout_ms) return s;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  };
  auto schema = check();
  if (!schema.ok()) return schema.status();
  if (absl::Status s = retrying("PRAGMA journal_mode=WAL", "setting its journal"); !s.ok()) {
    return s;
  }
  if (*schema == kSchema) return ledger;
  // A new ledger, or one of an older schema. Another run may be creating or
  // migrating it too: look again inside the write transaction.
  if (absl::Status s = retrying("BEGIN IMMEDIATE", "creating its schema"); !s.ok()) return s;
  auto create = [&]() -> absl::Status {
    auto now = check();
    if (!now.ok()) return now.status();
    if (*now == kSchema) return Exec(db, "COMMIT", path, "creating its schema");
    const std::string sql = absl::StrCat(*now == 1 ? kMigrateFrom1 : kCreate,
                                         "PRAGMA user_version=", kSchema, ";COMMIT;");
    return Exec(db, sql.c_str(), path, "creating its schema");
  };
  if (absl::Status s = create(); !s.ok()) {
    sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    return s;
  }
  return ledger;
}

TaskLedger::~TaskLedger() { sqlite3_close(db_); }

absl::Status TaskLedger::Append(const std::vector<LedgerAttempt>& attempts) {
  if (attempts.empty()) return absl::OkStatus();
  if (absl::Status s = Exec(db_, "BEGIN IMMEDIATE", path_, "appending"); !s.ok()) return s;
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto append = [&]() -> absl::Status {
    const std::string sql = absl::StrCat("INSERT INTO attempts (", kColumns,
                                         ") VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
    Statement insert(db_, sql.c_str());
    if (insert.rc() != SQLITE_OK) return Error(db_, insert.rc(), path_, "appending");
    sqlite3_stmt* stmt = insert.get();
    for (const LedgerAttempt& a : attempts) {
      sqlite3_reset(stmt);
      int column = 0;
      for (const std::string* text : {&a.task_key, &a.task_id, &a.dataset, &a.split}) {
        sqlite3_bind_text(stmt, ++column, text->c_str(), -1, SQLITE_TRANSIENT);
      }
      sqlite3_bind_int(stmt, ++column, a.effort);
      sqlite3_bind_text(stmt, ++column, a.harness.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_double(stmt, ++column, a.reward);
      sqlite3_bind_int(stmt, ++column, a.passed ? 1 : 0);
      sqlite3_bind_text(stmt, ++column, a.failure_kind.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_text(stmt, ++column, a.failure.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_int64(stmt, ++column, a.length);
      sqlite3_bind_int(stmt, ++column, a.steps);
      sqlite3_bind_int64(stmt, ++column, a.policy_version);
      sqlite3_bind_text(stmt, ++column, a.run_id.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_int64(stmt, ++column, a.config_version);
      sqlite3_bind_double(stmt, ++column, a.unix_time != 0 ? a.unix_time : now);
      sqlite3_bind_text(stmt, ++column, a.response.c_str(), -1, SQLITE_TRANSIENT);
      if (const int rc = sqlite3_step(stmt); rc != SQLITE_DONE) {
        return Error(db_, rc, path_, "appending");
      }
    }
    return Exec(db_, "COMMIT", path_, "appending");
  };
  absl::Status appended = append();
  if (!appended.ok()) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  return appended;
}

absl::StatusOr<std::vector<LedgerAttempt>> TaskLedger::Read(const std::string& dataset) const {
  const std::string sql =
      absl::StrCat("SELECT ", kColumns, " FROM attempts",
                   dataset.empty() ? "" : " WHERE dataset = ?", " ORDER BY rowid");
  Statement select(db_, sql.c_str());
  if (select.rc() != SQLITE_OK) return Error(db_, select.rc(), path_, "reading");
  sqlite3_stmt* stmt = select.get();
  if (!dataset.empty()) sqlite3_bind_text(stmt, 1, dataset.c_str(), -1, SQLITE_TRANSIENT);
  std::vector<LedgerAttempt> attempts;
  int rc;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    LedgerAttempt& a = attempts.emplace_back();
    a.task_key = Text(stmt, 0);
    a.task_id = Text(stmt, 1);
    a.dataset = Text(stmt, 2);
    a.split = Text(stmt, 3);
    a.effort = sqlite3_column_int(stmt, 4);
    a.harness = Text(stmt, 5);
    a.reward = sqlite3_column_double(stmt, 6);
    a.passed = sqlite3_column_int(stmt, 7) != 0;
    a.failure_kind = Text(stmt, 8);
    a.failure = Text(stmt, 9);
    a.length = sqlite3_column_int64(stmt, 10);
    a.steps = sqlite3_column_int(stmt, 11);
    a.policy_version = sqlite3_column_int64(stmt, 12);
    a.run_id = Text(stmt, 13);
    a.config_version = sqlite3_column_int64(stmt, 14);
    a.unix_time = sqlite3_column_double(stmt, 15);
    a.response = Text(stmt, 16);
  }
  if (rc != SQLITE_DONE) return Error(db_, rc, path_, "reading");
  return attempts;
}

absl::StatusOr<std::vector<LedgerAttempt>> ReadLedgerAt(const std::string& ledger_or_run_dir,
                                                        const std::string& dataset) {
  std::string path = ledger_or_run_dir;
  if (std::filesystem::is_directory(path)) path += "/ledger.sqlite";
  if (!std::filesystem::is_regular_file(path)) {
    return absl::InvalidArgumentError("no task ledger at " + path);
  }
  auto opened = TaskLedger::Open(path);
  if (!opened.ok()) return opened.status();
  return (*opened)->Read(dataset);
}

std::string TaskKey(const AgentTask& task) {
  v1::Task content = task.task;
  content.clear_id();
  std::string bytes;
  {
    // Deterministic: the environment's file map in key order.
    google::protobuf::io::StringOutputStream out(&bytes);
    google::protobuf::io::CodedOutputStream coded(&out);
    coded.SetSerializationDeterministic(true);
    content.SerializeToCodedStream(&coded);
  }
  return Sha256Hex(bytes);
}

std::string TaskKey(const Problem& problem) {
  if (problem.agent_task != nullptr) return TaskKey(*problem.agent_task);
  return Sha256Hex(nlohmann::json({{"messages", problem.messages},
                                   {"answer", problem.answer},
                                   {"verifier", static_cast<int>(problem.verifier)},
                                   {"task_seed", problem.task_seed}})
                       .dump());
}

bool IsLimitCause(const std::string& cause) {
  return cause == "step_limit" || cause == "time_limit" || cause == "sandbox_limit";
}

std::string FailureKind(bool passed, bool infrastructure, bool limit, bool parsed) {
  if (passed) return "";
  if (infrastructure) return "infrastructure";
  if (limit) return "limit";
  return parsed ? "agent" : "format";
}

}  // namespace loom::tasks
