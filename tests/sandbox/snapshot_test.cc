// Episode snapshots against real `loom worker` processes: a client takes a
// snapshot of an episode as it waits for a turn (workspace archive, record
// so far, the request), its worker dies, and the episode goes on from the
// snapshot on another worker with the workspace the first one left. Limits
// and malformed snapshots get errors that name what is wrong.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "loom/rpc/worker_pool.h"
#include "worker_fixture.h"

namespace loom {
namespace {

using testing_support::StartWorkers;
using testing_support::ToolTurn;

rpc::PoolOptions Pool(const std::vector<std::string>& targets) {
  rpc::PoolOptions options;
  options.targets = targets;
  options.episode_timeout_s = 60;
  options.lease_s = 30;
  options.max_attempts = 3;
  options.backoff_max_s = 0.2;
  return options;
}

// Turn 0 writes a file and a directory tree with a link; turn 1 reads them;
// turn 2 submits what it read.
v1::RunEpisode TreeTask() {
  v1::RunEpisode episode;
  episode.mutable_task()->set_id("tree");
  episode.mutable_task()->set_problem("Build a tree and read it back.");
  (*episode.mutable_task()->mutable_environment()->mutable_files())["given.txt"] = "given\n";
  episode.mutable_task()->mutable_verification()->set_exact_answer("first given x");
  return episode;
}

absl::StatusOr<v1::GenerateReply> PlayTreeTask(const v1::GenerateRequest& request) {
  switch (request.turn()) {
    case 0:
      return ToolTurn("bash", {{"command",
                                "echo first > a; mkdir -p d/e; printf x > d/e/f; chmod +x d/e/f; "
                                "ln -s d/e/f link; echo written"}});
    case 1:
      return ToolTurn("bash", {{"command", "cat a given.txt link; test -x d/e/f && echo"}});
    default: {
      std::string out = request.append(0).result().stdout();
      std::replace(out.begin(), out.end(), '\n', ' ');
      while (!out.empty() && out.back() == ' ') out.pop_back();
      return ToolTurn("submit", {{"answer", out}});
    }
  }
}

// Plays the tree task on `options`' workers until turn `leave_at`, where it
// takes a snapshot of `max_bytes` and goes away.
struct Left {
  std::string target;
  v1::GenerateRequest unanswered;
  absl::StatusOr<v1::EpisodeSnapshot> snapshot = absl::UnknownError("not taken");
};

Left SnapshotAndLeave(const rpc::PoolOptions& options, int leave_at, int64_t max_bytes,
                      const std::string& write_first = "") {
  rpc::WorkerPool pool(options);
  Left left;
  rpc::WorkerSession* session = nullptr;
  pool.RunEpisode(
      TreeTask(),
      [&](const v1::GenerateRequest& r) -> absl::StatusOr<v1::GenerateReply> {
        if (r.turn() == 0 && !write_first.empty()) {
          return ToolTurn("bash", {{"command", write_first + "; echo written"}});
        }
        if (r.turn() != leave_at) return PlayTreeTask(r);
        left.unanswered = r;
        left.snapshot = session->Snapshot(max_bytes);
        return absl::CancelledError("preempted");
      },
      [&](rpc::WorkerSession& s) {
        session = &s;
        left.target = s.target();
      });
  return left;
}

TEST(SnapshotTest, AnEpisodeGoesOnFromItsSnapshotOnAnotherWorker) {
  auto workers = StartWorkers(2, 2);
  ASSERT_TRUE(workers);
  const Left left = SnapshotAndLeave(Pool(workers->targets()), 1, 1 << 20);
  ASSERT_TRUE(left.snapshot.ok()) << left.snapshot.status();
  const v1::EpisodeSnapshot& snapshot = *left.snapshot;
  // The request it waits on, as sent, and the record so far.
  EXPECT_EQ(snapshot.pending().SerializeAsString(), left.unanswered.SerializeAsString());
  EXPECT_EQ(snapshot.trajectory().steps(), 1);
  EXPECT_EQ(snapshot.trajectory().commands_size(), 1);
  // system, user, assistant (turn 0), tool result: the last is also pending.
  ASSERT_EQ(snapshot.trajectory().messages_size(), 4);
  EXPECT_EQ(snapshot.trajectory().messages(3).result().stdout(), "written\n");
  EXPECT_GT(snapshot.workspace().size(), 0u);
  EXPECT_TRUE(snapshot.error().empty());

  // Its worker dies; the other takes the episode from the snapshot.
  const int victim = left.target == workers->targets()[0] ? 0 : 1;
  workers->Kill(victim);
  rpc::WorkerPool pool(Pool(workers->targets()));
  v1::RunEpisode episode = TreeTask();
  *episode.mutable_resume() = snapshot;
  std::vector<v1::GenerateRequest> seen;
  std::string ran_on;
  v1::Trajectory t = pool.RunEpisode(
      episode,
      [&](const v1::GenerateRequest& r) {
        seen.push_back(r);
        return PlayTreeTask(r);
      },
      [&](rpc::WorkerSession& s) { ran_on = s.target(); });
  EXPECT_EQ(ran_on, workers->targets()[1 - victim]);
  ASSERT_EQ(seen.size(), 2u) << t.failure_reason();
  // First the request the snapshot waited on, byte for byte.
  EXPECT_EQ(seen[0].SerializeAsString(), left.unanswered.SerializeAsString());
  // The files, the link and the mode the first worker's turn made are here.
  EXPECT_EQ(seen[1].append(0).result().stdout(), "first\ngiven\nx\n");
  EXPECT_EQ(t.failure_reason(), "");
  EXPECT_EQ(t.verdict().reward(), 1.0) << t.verdict().details();
  EXPECT_EQ(t.steps(), 3);
  EXPECT_EQ(t.commands_size(), 2);  // the first worker's command and the second's
  ASSERT_EQ(t.messages_size(), 8);  // the whole conversation, across the two workers
  EXPECT_EQ(t.messages(3).result().stdout(), "written\n");
  EXPECT_GE(t.duration_ms(), snapshot.trajectory().duration_ms());
}

TEST(SnapshotTest, AWorkspaceOverTheLimitGivesNoSnapshotAndTheEpisodeGoesOn) {
  auto workers = StartWorkers(1, 1, "", {"--max-snapshot-mb", "1"});
  ASSERT_TRUE(workers);
  rpc::WorkerPool pool(Pool(workers->targets()));
  rpc::WorkerSession* session = nullptr;
  std::vector<absl::Status> refused;
  v1::RunEpisode episode = TreeTask();
  episode.mutable_task()->mutable_verification()->set_exact_answer("done");
  v1::Trajectory t = pool.RunEpisode(
      episode,
      [&](const v1::GenerateRequest& r) -> absl::StatusOr<v1::GenerateReply> {
        if (r.turn() == 0) {
          return ToolTurn("bash", {{"command", "head -c 3000000 /dev/urandom > big"}});
        }
        // Over what the client asks for; over the worker's cap.
        refused.push_back(session->Snapshot(100000).status());
        refused.push_back(session->Snapshot(int64_t{50} << 20).status());
        return ToolTurn("submit", {{"answer", "done"}});
      },
      [&](rpc::WorkerSession& s) { session = &s; });
  ASSERT_EQ(refused.size(), 2u);
  EXPECT_TRUE(absl::IsFailedPrecondition(refused[0])) << refused[0];
  EXPECT_NE(refused[0].message().find("over 100000 bytes"), std::string::npos) << refused[0];
  EXPECT_NE(refused[1].message().find("over 1048576 bytes"), std::string::npos) << refused[1];
  EXPECT_EQ(t.failure_reason(), "");
  EXPECT_EQ(t.verdict().reward(), 1.0);
}

TEST(SnapshotTest, AWorkerWithoutSnapshotsSaysSo) {
  auto workers = StartWorkers(1, 1, "", {"--max-snapshot-mb", "0"});
  ASSERT_TRUE(workers);
  const Left left = SnapshotAndLeave(Pool(workers->targets()), 1, 1 << 20);
  EXPECT_TRUE(absl::IsFailedPrecondition(left.snapshot.status()));
  EXPECT_NE(left.snapshot.status().message().find("takes no snapshots (--max-snapshot-mb 0)"),
            std::string::npos)
      << left.snapshot.status();
}

// A snapshot the client sends back is input like any other.
TEST(SnapshotTest, MalformedSnapshotsAreRefusedWithTheFieldNamed) {
  auto workers = StartWorkers(1, 2);
  ASSERT_TRUE(workers);
  const Left left = SnapshotAndLeave(Pool(workers->targets()), 1, 1 << 20);
  ASSERT_TRUE(left.snapshot.ok()) << left.snapshot.status();
  auto resume_with = [&](const std::function<void(v1::EpisodeSnapshot&)>& spoil) {
    v1::RunEpisode episode = TreeTask();
    *episode.mutable_resume() = *left.snapshot;
    spoil(*episode.mutable_resume());
    rpc::WorkerPool pool(Pool(workers->targets()));
    int asked = 0;
    v1::Trajectory t = pool.RunEpisode(episode, [&](const v1::GenerateRequest& r) {
      ++asked;
      return PlayTreeTask(r);
    });
    EXPECT_EQ(asked, 0) << "the worker asked for a turn of a spoilt snapshot";
    EXPECT_TRUE(t.penalty());
    return t.failure_reason();
  };
  EXPECT_NE(resume_with([](v1::EpisodeSnapshot& s) {
              s.set_workspace("not a tar archive");
            }).find("sandbox_error: the workspace archive cannot be restored"),
            std::string::npos);
  EXPECT_NE(resume_with([](v1::EpisodeSnapshot& s) {
              s.mutable_pending()->set_turn(40);
            }).find("run_episode.resume.pending.turn: 40 is outside 0..7"),
            std::string::npos);
  EXPECT_NE(resume_with([](v1::EpisodeSnapshot& s) {
              s.mutable_trajectory()->set_steps(0);
            }).find("run_episode.resume.trajectory.steps"),
            std::string::npos);
  EXPECT_NE(resume_with([](v1::EpisodeSnapshot& s) {
              s.mutable_pending()->clear_append();
            }).find("run_episode.resume.pending.append"),
            std::string::npos);
  EXPECT_NE(resume_with([](v1::EpisodeSnapshot& s) {
              s.set_error("too big");
            }).find("a snapshot that failed cannot be resumed (too big)"),
            std::string::npos);
  EXPECT_NE(resume_with([](v1::EpisodeSnapshot& s) {
              s.mutable_trajectory()->set_failure_reason("step_limit");
            }).find("had already ended"),
            std::string::npos);
  // Outside an episode a snapshot request is a protocol error.
  auto session = testing_support::OpenOn(workers->targets()[0]);
  ASSERT_TRUE(session.ok()) << session.status();
  absl::StatusOr<v1::EpisodeSnapshot> stray = (*session)->Snapshot(1000);
  EXPECT_TRUE(absl::IsInvalidArgument(stray.status())) << stray.status();
}

// The archive is unpacked inside the sandbox: members with absolute paths or
// `..` cannot reach the host's files.
TEST(SnapshotTest, AnArchiveThatClimbsOutStaysInTheSandbox) {
  auto workers = StartWorkers(1, 2);
  ASSERT_TRUE(workers);
  const Left left = SnapshotAndLeave(Pool(workers->targets()), 1, 1 << 20);
  ASSERT_TRUE(left.snapshot.ok()) << left.snapshot.status();
  std::string dir;
  ASSERT_EQ(testing_support::RunCommand("mktemp -d", &dir), 0);
  dir.pop_back();
  std::string ignored;
  ASSERT_EQ(testing_support::RunCommand(
                "cd " + dir + " && mkdir sub && echo owned > abs && echo owned > up && " +
                    "tar -czPf abs.tgz " + dir + "/abs && cd sub && tar -czPf ../up.tgz ../up && " +
                    "rm ../abs ../up",
                &ignored),
            0);
  for (const char* name : {"abs.tgz", "up.tgz"}) {
    std::string archive;
    ASSERT_EQ(testing_support::RunCommand("cat " + dir + "/" + name, &archive), 0);
    v1::RunEpisode episode = TreeTask();
    *episode.mutable_resume() = *left.snapshot;
    episode.mutable_resume()->set_workspace(archive);
    rpc::WorkerPool pool(Pool(workers->targets()));
    pool.RunEpisode(episode, [](const v1::GenerateRequest& r) { return PlayTreeTask(r); });
  }
  EXPECT_EQ(testing_support::RunCommand("test ! -e " + dir + "/abs && test ! -e " + dir + "/up",
                                        &ignored),
            0)
      << "a restored archive wrote on the host";
  testing_support::RunCommand("rm -rf " + dir, &ignored);
}

}  // namespace
}  // namespace loom
