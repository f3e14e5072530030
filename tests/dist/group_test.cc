// Group: two ranks in two threads of this process, joined through a real
// c10d TCPStore and Gloo on 127.0.0.1. Collectives are checked against sums
// computed here directly; a peer that leaves or hangs is an UNAVAILABLE
// error, not a hang.

#include "loom/dist/group.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <future>
#include <thread>

#include "loom/dist/launch.h"
#include "train/step_figures.h"

namespace loom::dist {
namespace {

using std::chrono::milliseconds;

RankInfo Rank(int rank, int port, int world_size = 2) {
  RankInfo info;
  info.rank = rank;
  info.world_size = world_size;
  info.master_port = port;
  info.source = "torchrun";
  return info;
}

// Collectives time out after `collective`; joining may take up to a minute,
// however slowly a loaded machine starts the other rank's thread.
Group::Options Timeouts(milliseconds collective) {
  Group::Options options;
  options.timeout = collective;
  options.join_timeout = std::max(collective, milliseconds(60000));
  return options;
}

// Runs `body(rank, group)` on two connected ranks, one thread each.
void OnTwoRanks(const std::function<void(int, Group&)>& body,
                milliseconds timeout = milliseconds(20000)) {
  auto port = FreeLoopbackPort();
  ASSERT_TRUE(port.ok()) << port.status();
  auto run = [&](int rank) {
    auto group = Group::Connect(Rank(rank, *port), Timeouts(timeout));
    ASSERT_TRUE(group.ok()) << group.status();
    EXPECT_STREQ((*group)->backend(), "gloo");
    body(rank, **group);
  };
  std::thread other(run, 1);
  run(0);
  other.join();
}

TEST(GroupTest, ReductionsOfNumbers) {
  OnTwoRanks([](int rank, Group& group) {
    auto sum = group.Sum({1.0 + rank, 10.0 * rank});
    ASSERT_TRUE(sum.ok()) << sum.status();
    EXPECT_EQ(*sum, (std::vector<double>{3.0, 10.0}));
    auto max = group.Max({static_cast<double>(rank), -static_cast<double>(rank)});
    ASSERT_TRUE(max.ok());
    EXPECT_EQ(*max, (std::vector<double>{1.0, 0.0}));
    auto rows = group.Gather({rank + 0.5, rank * 2.0});
    ASSERT_TRUE(rows.ok());
    EXPECT_EQ(*rows, (std::vector<std::vector<double>>{{0.5, 0.0}, {1.5, 2.0}}));
    auto any = group.Any(rank == 1);
    ASSERT_TRUE(any.ok());
    EXPECT_TRUE(*any);
    auto none = group.Any(false);
    ASSERT_TRUE(none.ok());
    EXPECT_FALSE(*none);
    EXPECT_TRUE(group.Barrier().ok());
  });
}

// Gradients of a few parameters of two dtypes, some missing on one rank,
// summed in buckets small enough that several are needed.
TEST(GroupTest, GradientsAreSummedInBucketsWithMissingOnesAsZeros) {
  // Distinct values per rank and parameter (no global RNG: the ranks are threads).
  auto grads_of = [](int rank) {
    auto values = [rank](int64_t n, double offset) {
      return at::arange(n, at::kDouble) * (rank + 1.5) + offset;
    };
    return std::vector<at::Tensor>{values(35, 0.25).reshape({7, 5}).to(at::kFloat),
                                   values(300, -3).to(at::kFloat), values(12, 1).reshape({3, 4}),
                                   values(4, 7).reshape({2, 2}).to(at::kFloat)};
  };
  OnTwoRanks([&](int rank, Group& group) {
    std::vector<at::Tensor> params;
    const std::vector<at::Tensor> mine = grads_of(rank);
    for (size_t k = 0; k < mine.size(); ++k) {
      at::Tensor p = at::zeros_like(mine[k]).requires_grad_(true);
      // The last parameter has no gradient on rank 1 (an expert it never routed to).
      if (!(rank == 1 && k == 3)) p.mutable_grad() = mine[k].clone();
      params.push_back(p);
    }
    ASSERT_TRUE(AllReduceGradients(group, params, /*bucket_bytes=*/256).ok());
    const std::vector<at::Tensor> a = grads_of(0), b = grads_of(1);
    for (size_t k = 0; k < params.size(); ++k) {
      const at::Tensor expected = k == 3 ? a[k] : a[k] + b[k];
      EXPECT_TRUE(at::allclose(params[k].grad(), expected, 1e-6, 1e-6)) << "parameter " << k;
    }
  });
}

TEST(GroupTest, BroadcastGivesEveryRankRankZerosParameters) {
  OnTwoRanks([](int rank, Group& group) {
    const at::Tensor reference = at::arange(12, at::kFloat).reshape({4, 3}) * 0.37 - 1;
    std::vector<at::Tensor> params{rank == 0 ? reference.clone() : at::zeros({4, 3}),
                                   at::full({5}, static_cast<float>(rank)).to(at::kBFloat16)};
    ASSERT_TRUE(BroadcastParameters(group, params).ok());
    EXPECT_TRUE(at::equal(params[0], reference));
    EXPECT_TRUE(at::equal(params[1], at::zeros({5}, at::kBFloat16)));
    EXPECT_EQ(ParametersChecksum(params), ParametersChecksum({reference, params[1]}));
  });
}

TEST(GroupTest, ChecksumTellsWeightsApart) {
  const at::Tensor a = at::ones({3}), b = at::ones({3});
  EXPECT_EQ(ParametersChecksum({a, b}), ParametersChecksum({a.clone(), b.clone()}));
  EXPECT_NE(ParametersChecksum({a, b}), ParametersChecksum({a, b * 1.0001}));
  // Swapping two parameters changes it too.
  EXPECT_NE(ParametersChecksum({a, b * 2}), ParametersChecksum({b * 2, a}));
}

// A rank that leaves: its peer's next collective fails at once, not after
// the timeout.
TEST(GroupTest, APeerThatLeftFailsTheNextCollective) {
  auto port = FreeLoopbackPort();
  ASSERT_TRUE(port.ok());
  const milliseconds timeout(60000);
  std::thread other([&] {
    auto group = Group::Connect(Rank(1, *port), Timeouts(timeout));
    ASSERT_TRUE(group.ok()) << group.status();
    EXPECT_TRUE((*group)->Barrier().ok());
  });  // the rank exits: its group closes
  auto group = Group::Connect(Rank(0, *port), Timeouts(timeout));
  const bool joined = group.ok() && (*group)->Barrier().ok();
  other.join();
  ASSERT_TRUE(joined) << group.status();
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = (*group)->Sum({1.0}).status();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(std::string(s.message()).find("rank 0 of 2: all-reduce failed"), std::string::npos)
      << s;
  EXPECT_LT(seconds, 10.0);
}

// A rank that stays but never joins the collective: the collective's
// timeout ends it (joining has its own, longer one).
TEST(GroupTest, AHungPeerTimesOut) {
  auto port = FreeLoopbackPort();
  ASSERT_TRUE(port.ok());
  const Group::Options options = Timeouts(milliseconds(1500));
  std::promise<void> done;
  std::thread other([&] {
    auto group = Group::Connect(Rank(1, *port), options);
    EXPECT_TRUE(group.ok()) << group.status();
    done.get_future().wait();  // holds its connections, calls nothing
  });
  auto group = Group::Connect(Rank(0, *port), options);
  absl::Status s = group.status();
  double seconds = 0;
  if (group.ok()) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<at::Tensor> t{at::ones({4})};
    s = (*group)->AllReduceSum(t);
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  done.set_value();
  other.join();
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(std::string(s.message()).find("1.5 s"), std::string::npos) << s;
  EXPECT_GE(seconds, 1.0);
  EXPECT_LT(seconds, 10.0);
}

// A rank that starts late is waited for up to the join timeout, even when
// that is longer than a collective's: rank 0 (which hosts the rendezvous) or
// another, with the others already joining.
TEST(GroupTest, ALateRankIsWaitedForUpToTheJoinTimeout) {
  for (int late : {0, 2}) {
    SCOPED_TRACE("late rank " + std::to_string(late));
    auto port = FreeLoopbackPort();
    ASSERT_TRUE(port.ok());
    const Group::Options options = Timeouts(milliseconds(2000));
    std::vector<absl::Status> barriers(3);
    std::vector<std::thread> ranks;
    for (int rank = 0; rank < 3; ++rank) {
      ranks.emplace_back([&, rank] {
        if (rank == late) std::this_thread::sleep_for(milliseconds(4500));
        auto group = Group::Connect(Rank(rank, *port, 3), options);
        barriers[rank] = group.ok() ? (*group)->Barrier() : group.status();
      });
    }
    for (std::thread& t : ranks) t.join();
    for (const absl::Status& barrier : barriers) EXPECT_TRUE(barrier.ok()) << barrier;
  }
}

// Rank 1 alone: nobody hosts the rendezvous.
TEST(GroupTest, NoRankZeroIsUnavailableAfterTheTimeout) {
  auto port = FreeLoopbackPort();
  ASSERT_TRUE(port.ok());
  Group::Options options;
  options.join_timeout = milliseconds(1000);
  auto group = Group::Connect(Rank(1, *port), options);
  ASSERT_FALSE(group.ok());
  EXPECT_EQ(group.status().code(), absl::StatusCode::kUnavailable) << group.status();
  EXPECT_NE(std::string(group.status().message()).find("cannot join the process group"),
            std::string::npos)
      << group.status();
}

// A trainer's step figures: named sums over both ranks in one reduce, this
// rank's own sums and maxima kept; ranks that added different names fail
// together rather than sum unrelated numbers.
TEST(GroupTest, StepFiguresSumByNameOverRanks) {
  OnTwoRanks([](int rank, Group& group) {
    train::StepFigures figures;
    figures.Add("samples", 2 + rank);              // 2 and 3
    figures.Add("reward", rank == 0 ? 1.5 : 3.5);  // 5 in all
    figures.Add("tokens", 0);                      // named, zero on both
    figures.Max("lag", 4 - 3 * rank);              // 4 and 1: stays each rank's
    EXPECT_DOUBLE_EQ(figures.Per("reward", "samples"), rank == 0 ? 0.75 : 3.5 / 3);
    ASSERT_TRUE(figures.SumOverRanks(group).ok());
    EXPECT_TRUE(figures.summed());
    EXPECT_DOUBLE_EQ(figures["samples"], 5);
    EXPECT_DOUBLE_EQ(figures.Per("reward", "samples"), 1.0);
    EXPECT_DOUBLE_EQ(figures.Per("reward", "tokens"), 0.0);
    EXPECT_DOUBLE_EQ(figures.Local("samples"), 2 + rank);
    EXPECT_DOUBLE_EQ(figures.Maximum("lag"), 4 - 3 * rank);
    EXPECT_DOUBLE_EQ(figures["absent"], 0.0);

    train::StepFigures other;
    other.Add(rank == 0 ? "loss" : "kl", 1);  // as many names, not the same
    const absl::Status differ = other.SumOverRanks(group);
    EXPECT_EQ(differ.code(), absl::StatusCode::kInternal) << differ;
    EXPECT_NE(differ.message().find("differ in their names"), std::string::npos);
    train::StepFigures fewer;
    fewer.Add("samples", 1);
    if (rank == 1) fewer.Add("reward", 1);
    EXPECT_FALSE(fewer.SumOverRanks(group).ok());
  });
}

}  // namespace
}  // namespace loom::dist
