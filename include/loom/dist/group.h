#pragma once
// Group: the ranks of one job, joined through a torch c10d process group —
// Gloo for CPU tensors, NCCL when the model is on CUDA (a CUDA LibTorch built
// with it). Rank 0 hosts the rendezvous (a c10d TCPStore on MASTER_PORT).
//
// Every collective is called by every rank in the same order; each one
// returns UNAVAILABLE naming the operation and this rank when a peer exited
// (its connection closed) or did not take part within `timeout` — never a
// hang and never an exception. After such an error the group is unusable: the
// caller ends the run with the error. One thread (the run loop's) uses it.

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/ATen.h>

#include "absl/status/statusor.h"
#include "loom/dist/rank.h"

namespace loom::dist {

class Group {
 public:
  struct Options {
    std::chrono::milliseconds timeout{std::chrono::minutes(5)};        // every collective
    std::chrono::milliseconds join_timeout{std::chrono::minutes(10)};  // the rendezvous
    at::Device device{at::kCPU};                                       // where collectives run
  };
  // Joins `info.world_size` ranks. UNAVAILABLE when the rendezvous fails or
  // times out; UNIMPLEMENTED when this build has no backend for the device.
  static absl::StatusOr<std::unique_ptr<Group>> Connect(const RankInfo& info,
                                                        const Options& options);
  ~Group();

  int rank() const { return info_.rank; }
  int size() const { return info_.world_size; }
  const char* backend() const { return backend_; }

  // Sums `tensors` across ranks, in place. Each must be dense and contiguous,
  // on the group's device.
  absl::Status AllReduceSum(std::vector<at::Tensor>& tensors);
  // Every rank gets rank `root`'s `tensors`, in place.
  absl::Status Broadcast(std::vector<at::Tensor>& tensors, int root);
  // The element-wise sum of every rank's `values`.
  absl::StatusOr<std::vector<double>> Sum(const std::vector<double>& values);
  // The element-wise maximum of every rank's `values`.
  absl::StatusOr<std::vector<double>> Max(const std::vector<double>& values);
  // Every rank's `values` (all of the same length), rank by rank.
  absl::StatusOr<std::vector<std::vector<double>>> Gather(const std::vector<double>& values);
  // True when `flag` is true on any rank.
  absl::StatusOr<bool> Any(bool flag);
  absl::Status Barrier();

 private:
  struct Collectives;  // the c10d process group (a c10d::Backend in LibTorch 2.x)
  Group(RankInfo info, Options options, const char* backend,
        std::unique_ptr<Collectives> collectives);
  absl::StatusOr<std::vector<double>> Reduce(const std::vector<double>& values, bool max);
  absl::Status Failed(const char* operation, const std::exception& e) const;

  RankInfo info_;
  Options options_;
  const char* backend_;
  std::unique_ptr<Collectives> collectives_;
};

// Sums the gradients of `parameters` across ranks, in buckets of at most
// `bucket_bytes` (one all-reduce each, flattened by dtype). A parameter
// without a gradient on this rank counts as zeros, so ranks that touched
// different parameters (an unrouted expert) still agree.
absl::Status AllReduceGradients(Group& group, const std::vector<at::Tensor>& parameters,
                                int64_t bucket_bytes = int64_t{32} << 20);

// Every rank takes rank 0's values of `parameters` (in place, no autograd).
absl::Status BroadcastParameters(Group& group, const std::vector<at::Tensor>& parameters);

// A number that tells replicas apart: Σ_k (k + 1)·Σ|p_k| + Σ p_k over the
// parameters, in float64. Ranks holding bitwise-equal weights agree on it
// exactly; a rank that missed one update does not.
double ParametersChecksum(const std::vector<at::Tensor>& parameters);

}  // namespace loom::dist
