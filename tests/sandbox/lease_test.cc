// Leased sessions against a real `loom worker`: a client that goes away mid-
// episode (a preempted trainer) leaves its episode waiting on the worker; a
// new client attaches and the episode goes on where it stopped, with the
// request it had not answered sent again. A lease that lapses frees the
// slot; an attach after that, or to a session that never was, is NOT_FOUND.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "loom/rpc/worker_pool.h"
#include "loom/tasks/agent_tasks.h"
#include "worker_fixture.h"

namespace loom {
namespace {

using testing_support::StartWorkers;
using testing_support::ToolTurn;

rpc::PoolOptions Pool(const rpc::LocalWorkers& workers, double lease_s) {
  rpc::PoolOptions options;
  options.targets = workers.targets();
  options.episode_timeout_s = 60;
  options.lease_s = lease_s;
  return options;
}

// Writes a file, reads it back, submits what it read.
v1::RunEpisode FileTask() {
  v1::RunEpisode episode;
  episode.mutable_task()->set_id("file");
  episode.mutable_task()->set_problem("Write a file and read it back.");
  episode.mutable_task()->mutable_verification()->set_exact_answer("first");
  return episode;
}

absl::StatusOr<v1::GenerateReply> PlayFileTask(const v1::GenerateRequest& request) {
  switch (request.turn()) {
    case 0:
      return ToolTurn("bash", {{"command", "echo first > /workspace/a; echo written"}});
    case 1:
      return ToolTurn("bash", {{"command", "cat /workspace/a"}});
    default: {
      std::string out = request.append(0).result().stdout();
      return ToolTurn("submit", {{"answer", out.substr(0, out.find('\n'))}});
    }
  }
}

// The worker's load once no sandbox is left, or after 2 s.
rpc::WorkerLoad Settled(rpc::WorkerPool& pool) {
  std::vector<rpc::WorkerLoad> loads = pool.Loads();
  for (int i = 0; i < 100 && loads[0].live > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    loads = pool.Loads();
  }
  return loads[0];
}

struct Left {
  std::string target;
  std::string session_id;
  double lease_s = 0;
  v1::GenerateRequest unanswered;  // the request the first client never answered
};

// Plays the file task until turn `leave_at`, where the client goes away
// (its policy fails, so its stream is cancelled, as when a trainer exits).
Left LeaveAt(const rpc::PoolOptions& options, int leave_at) {
  rpc::WorkerPool pool(options);
  Left left;
  v1::Trajectory t = pool.RunEpisode(
      FileTask(),
      [&](const v1::GenerateRequest& r) -> absl::StatusOr<v1::GenerateReply> {
        if (r.turn() == leave_at) {
          left.unanswered = r;
          return absl::CancelledError("preempted");
        }
        return PlayFileTask(r);
      },
      [&](rpc::WorkerSession& session) {
        left.target = session.target();
        left.session_id = session.opened().session_id();
        left.lease_s = session.opened().lease_s();
      });
  EXPECT_TRUE(t.penalty());  // for this client the episode is lost
  return left;
}

TEST(LeaseTest, AClientAttachesToALeftEpisodeAndItGoesOn) {
  auto workers = StartWorkers(1, 2);
  ASSERT_TRUE(workers);
  const rpc::PoolOptions options = Pool(*workers, 30);
  const Left left = LeaveAt(options, 1);
  ASSERT_FALSE(left.session_id.empty());
  EXPECT_EQ(left.lease_s, 30);
  rpc::WorkerPool pool(options);
  // The episode waits on the worker, holding its sandbox.
  std::vector<rpc::WorkerLoad> loads = pool.Loads();
  for (int i = 0; i < 100 && loads[0].detached == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    loads = pool.Loads();
  }
  EXPECT_EQ(loads[0].detached, 1);
  EXPECT_EQ(loads[0].live, 1);
  EXPECT_EQ(loads[0].episodes, 1);

  std::vector<v1::GenerateRequest> seen;
  absl::StatusOr<v1::Trajectory> t =
      pool.ResumeEpisode(left.target, left.session_id, [&](const v1::GenerateRequest& r) {
        seen.push_back(r);
        return PlayFileTask(r);
      });
  ASSERT_TRUE(t.ok()) << t.status();
  // First the request the old client left unanswered, byte for byte.
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].SerializeAsString(), left.unanswered.SerializeAsString());
  EXPECT_EQ(seen[0].append(0).result().stdout(), "written\n");
  EXPECT_EQ(seen[1].turn(), 2);
  // The workspace the first client's turn wrote is still there.
  EXPECT_EQ(t->failure_reason(), "");
  EXPECT_EQ(t->answer(), "first");
  EXPECT_EQ(t->verdict().reward(), 1.0) << t->verdict().details();
  EXPECT_EQ(t->steps(), 3);
  EXPECT_EQ(t->commands_size(), 2);  // both turns' commands, across the two clients
  const rpc::WorkerLoad after = Settled(pool);
  EXPECT_EQ(after.live, 0);
  EXPECT_EQ(after.detached, 0);
  EXPECT_EQ(after.leases_lapsed, 0);
  // It ended: nothing is left to attach to.
  absl::StatusOr<v1::Trajectory> again = pool.ResumeEpisode(
      left.target, left.session_id, [](const v1::GenerateRequest& r) { return PlayFileTask(r); });
  EXPECT_TRUE(absl::IsNotFound(again.status())) << again.status();
}

TEST(LeaseTest, AnEpisodeThatEndedWhileItsClientWasAwayDeliversItsTrajectoryOnAttach) {
  auto workers = StartWorkers(1, 1);
  ASSERT_TRUE(workers);
  const rpc::PoolOptions options = Pool(*workers, 30);
  v1::RunEpisode episode = FileTask();
  // Verification takes a second, during which the client goes away.
  episode.mutable_task()->mutable_verification()->set_command("sleep 1; test -f /workspace/a");
  std::string target, session_id;
  std::atomic<bool> submitted{false};
  rpc::WorkerPool first(options);
  std::thread client([&] {
    first.RunEpisode(
        episode,
        [&](const v1::GenerateRequest& r) -> absl::StatusOr<v1::GenerateReply> {
          if (r.turn() == 0) return PlayFileTask(r);
          submitted = true;
          return ToolTurn("submit", {{"answer", "done"}});
        },
        [&](rpc::WorkerSession& session) {
          target = session.target();
          session_id = session.opened().session_id();
        });
  });
  while (!submitted) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  first.CancelEpisodes();
  client.join();
  rpc::WorkerPool pool(options);
  int asked = 0;
  absl::StatusOr<v1::Trajectory> t =
      pool.ResumeEpisode(target, session_id, [&](const v1::GenerateRequest& r) {
        ++asked;
        return PlayFileTask(r);
      });
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(asked, 0);
  EXPECT_EQ(t->answer(), "done");
  EXPECT_EQ(t->verdict().reward(), 1.0) << t->verdict().details();
  EXPECT_EQ(Settled(pool).live, 0);
}

// The worker caps the lease; when it lapses the sandbox goes and its slot
// is free again.
TEST(LeaseTest, ALapsedLeaseFreesTheSlot) {
  auto workers = StartWorkers(1, 1, "", {"--max-lease-s", "1"});
  ASSERT_TRUE(workers);
  const rpc::PoolOptions options = Pool(*workers, 100);
  const Left left = LeaveAt(options, 1);
  EXPECT_EQ(left.lease_s, 1);
  auto refused = testing_support::OpenOn(workers->targets()[0]);
  EXPECT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
  rpc::WorkerPool pool(options);
  const rpc::WorkerLoad after = Settled(pool);
  EXPECT_EQ(after.live, 0);
  EXPECT_EQ(after.detached, 0);
  EXPECT_EQ(after.leases_lapsed, 1);
  absl::StatusOr<v1::Trajectory> late = pool.ResumeEpisode(
      left.target, left.session_id, [](const v1::GenerateRequest& r) { return PlayFileTask(r); });
  EXPECT_TRUE(absl::IsNotFound(late.status())) << late.status();
  EXPECT_TRUE(testing_support::OpenOn(workers->targets()[0]).ok());
}

// A trainer that will not come back releases its sessions: they end at
// once, their slots free, with no lease counted as lapsed.
TEST(LeaseTest, AReleasedSessionEndsAtOnce) {
  auto workers = StartWorkers(1, 1);
  ASSERT_TRUE(workers);
  const rpc::PoolOptions options = Pool(*workers, 600);
  const Left left = LeaveAt(options, 1);
  rpc::WorkerPool pool(options);
  absl::StatusOr<int> released =
      pool.ReleaseSessions(left.target, {left.session_id, "s9-0000000000000000"});
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_EQ(*released, 1);
  const rpc::WorkerLoad after = Settled(pool);
  EXPECT_EQ(after.live, 0);
  EXPECT_EQ(after.leases_lapsed, 0);
  absl::StatusOr<v1::Trajectory> late = pool.ResumeEpisode(
      left.target, left.session_id, [](const v1::GenerateRequest& r) { return PlayFileTask(r); });
  EXPECT_TRUE(absl::IsNotFound(late.status())) << late.status();
  EXPECT_TRUE(absl::IsNotFound(pool.ReleaseSessions("127.0.0.1:1", {"s0"}).status()));
}

TEST(LeaseTest, AttachingToWhatIsNotThereIsRefused) {
  auto workers = StartWorkers(1, 1);
  ASSERT_TRUE(workers);
  rpc::WorkerPool pool(Pool(*workers, 30));
  const std::string target = workers->targets()[0];
  auto play = [](const v1::GenerateRequest& r) { return PlayFileTask(r); };
  EXPECT_TRUE(absl::IsNotFound(pool.ResumeEpisode(target, "s0-0000000000000000", play).status()));
  EXPECT_TRUE(absl::IsNotFound(pool.ResumeEpisode("127.0.0.1:1", "s0", play).status()));
  // A session without a lease ends with its client: nothing waits.
  const Left left = LeaveAt(Pool(*workers, 0), 1);
  EXPECT_EQ(left.lease_s, 0);
  EXPECT_TRUE(absl::IsNotFound(pool.ResumeEpisode(target, left.session_id, play).status()));
}

// A client that is still there but whose answer the worker cannot read (a
// string that is not UTF-8 does not parse) is told so at once: its episode
// does not wait out the lease for a client that never left.
TEST(LeaseTest, AnAnswerThatDoesNotParseEndsTheEpisodeAtOnce) {
  auto workers = StartWorkers(1, 1);
  ASSERT_TRUE(workers);
  rpc::WorkerPool pool(Pool(*workers, 30));
  const auto start = std::chrono::steady_clock::now();
  v1::Trajectory t = pool.RunEpisode(FileTask(), [](const v1::GenerateRequest& r) {
    v1::GenerateReply reply;
    reply.set_turn(r.turn());
    reply.set_parse_error("cut at \xE2\x80");  // a UTF-8 character cut in two
    return absl::StatusOr<v1::GenerateReply>(reply);
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 10) << "waited for a client that was still there";
  EXPECT_TRUE(t.penalty());
  EXPECT_NE(t.failure_reason().find("could not be read"), std::string::npos) << t.failure_reason();
  EXPECT_EQ(Settled(pool).live, 0);
}

}  // namespace
}  // namespace loom
