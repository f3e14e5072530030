#include "loom/dist/group.h"

#include <cstdlib>
#include <map>

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if defined(LOOM_WITH_GLOO)
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#if defined(LOOM_WITH_NCCL) && defined(USE_C10D_NCCL)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "absl/strings/str_cat.h"

namespace loom::dist {

// LibTorch 2.x split the process group: the Gloo and NCCL classes are
// c10d::Backends behind a dispatching ProcessGroup. Both expose the same
// collectives, so loom holds whichever class the version constructs.
#if TORCH_VERSION_MAJOR >= 2
using CollectiveBackend = c10d::Backend;
#else
using CollectiveBackend = c10d::ProcessGroup;
#endif

struct Group::Collectives {
  c10::intrusive_ptr<CollectiveBackend> backend;
};

namespace {

bool Loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

#if defined(LOOM_WITH_GLOO)
// The interface Gloo binds: GLOO_SOCKET_IFNAME when set (as in PyTorch), the
// loopback address for a loopback master, otherwise the host name's address.
std::shared_ptr<gloo::transport::Device> GlooDevice(const RankInfo& info) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr && *ifname) {
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  }
  if (Loopback(info.master_addr))
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}
#endif

}  // namespace

absl::StatusOr<std::unique_ptr<Group>> Group::Connect(const RankInfo& info,
                                                      const Options& options) {
  const std::string where = absl::StrCat("rank ", info.rank, " of ", info.world_size, ": ");
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<uint16_t>(info.master_port);
    store_options.isServer = info.rank == 0;
    store_options.numWorkers = info.world_size;
    store_options.waitWorkers = true;
    store_options.timeout = options.join_timeout;
    auto store = c10::make_intrusive<c10d::TCPStore>(info.master_addr, store_options);
    c10::intrusive_ptr<CollectiveBackend> group;
    const char* backend = nullptr;
    if (options.device.is_cuda()) {
#if defined(LOOM_WITH_NCCL) && defined(USE_C10D_NCCL)
      auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
      nccl_options->timeout = options.timeout;
      group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, info.rank, info.world_size,
                                                          nccl_options);
      backend = "nccl";
#else
      return absl::UnimplementedError(where +
                                      "the model is on CUDA but this build has no NCCL process "
                                      "group (a CUDA LibTorch built with NCCL is needed)");
#endif
    } else {
#if defined(LOOM_WITH_GLOO)
      auto gloo_options = c10d::ProcessGroupGloo::Options::create();
      gloo_options->devices.push_back(GlooDevice(info));
      // Gloo's one timeout bounds its mesh setup and every collective, and
      // a failed collective's work stays queued until it ends, so it is
      // the collectives' timeout. (Waiting for a late rank is the store's,
      // with join_timeout.)
      gloo_options->timeout = options.timeout;
      group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, info.rank, info.world_size,
                                                          gloo_options);
      backend = "gloo";
#else
      return absl::UnimplementedError(
          where + "this build has no Gloo process group (install libgloo-dev and rebuild)");
#endif
    }
    return std::unique_ptr<Group>(new Group(
        info, options, backend, std::make_unique<Collectives>(Collectives{std::move(group)})));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        where, "cannot join the process group at ", info.master_addr, ":", info.master_port,
        " within ", options.join_timeout.count() / 1000.0, " s: ", e.what()));
  }
}

Group::Group(RankInfo info, Options options, const char* backend,
             std::unique_ptr<Collectives> collectives)
    : info_(std::move(info)),
      options_(options),
      backend_(backend),
      collectives_(std::move(collectives)) {}

Group::~Group() = default;

absl::Status Group::Failed(const char* operation, const std::exception& e) const {
  std::string what = e.what();
  if (const size_t end = what.find('\n'); end != std::string::npos) what.resize(end);
  return absl::UnavailableError(
      absl::StrCat("rank ", info_.rank, " of ", info_.world_size, ": ", operation,
                   " failed (a peer rank exited, or did not take part within ",
                   options_.timeout.count() / 1000.0, " s): ", what));
}

absl::Status Group::AllReduceSum(std::vector<at::Tensor>& tensors) {
  try {
    collectives_->backend->allreduce(tensors)->wait(options_.timeout);
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return Failed("all-reduce", e);
  }
}

absl::Status Group::Broadcast(std::vector<at::Tensor>& tensors, int root) {
  try {
    c10d::BroadcastOptions broadcast;
    broadcast.rootRank = root;
    collectives_->backend->broadcast(tensors, broadcast)->wait(options_.timeout);
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return Failed("broadcast", e);
  }
}

absl::StatusOr<std::vector<double>> Group::Reduce(const std::vector<double>& values, bool max) {
  at::Tensor buffer = at::tensor(at::ArrayRef<double>(values), at::kDouble).to(options_.device);
  std::vector<at::Tensor> tensors{buffer};
  try {
    c10d::AllreduceOptions reduce;
    reduce.reduceOp = max ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM;
    collectives_->backend->allreduce(tensors, reduce)->wait(options_.timeout);
  } catch (const std::exception& e) {
    return Failed("all-reduce", e);
  }
  at::Tensor host = tensors[0].cpu();
  return std::vector<double>(host.data_ptr<double>(), host.data_ptr<double>() + host.numel());
}

absl::StatusOr<std::vector<double>> Group::Sum(const std::vector<double>& values) {
  return Reduce(values, false);
}

absl::StatusOr<std::vector<double>> Group::Max(const std::vector<double>& values) {
  return Reduce(values, true);
}

absl::StatusOr<std::vector<std::vector<double>>> Group::Gather(const std::vector<double>& values) {
  // A sum of one-hot rows: each rank fills its own row.
  const size_t n = values.size();
  std::vector<double> rows(n * static_cast<size_t>(size()), 0.0);
  std::copy(values.begin(), values.end(), rows.begin() + static_cast<ptrdiff_t>(n * rank()));
  auto summed = Sum(rows);
  if (!summed.ok()) return summed.status();
  std::vector<std::vector<double>> out;
  for (int r = 0; r < size(); ++r) {
    out.emplace_back(summed->begin() + static_cast<ptrdiff_t>(n * r),
                     summed->begin() + static_cast<ptrdiff_t>(n * (r + 1)));
  }
  return out;
}

absl::StatusOr<bool> Group::Any(bool flag) {
  auto max = Max({flag ? 1.0 : 0.0});
  if (!max.ok()) return max.status();
  return (*max)[0] > 0;
}

absl::Status Group::Barrier() {
  // An all-reduce of one number: a barrier every backend runs the same way.
  return Sum({0.0}).status();
}

absl::Status AllReduceGradients(Group& group, const std::vector<at::Tensor>& parameters,
                                int64_t bucket_bytes) {
  at::NoGradGuard no_grad;
  // Buckets of same-dtype parameters, in order, each at most bucket_bytes
  // (a larger parameter is a bucket of its own).
  std::map<at::ScalarType, std::vector<std::vector<at::Tensor>>> buckets;
  std::map<at::ScalarType, int64_t> filled;
  for (const at::Tensor& p : parameters) {
    at::Tensor& grad = const_cast<at::Tensor&>(p).mutable_grad();
    if (!grad.defined()) grad = at::zeros_like(p);
    auto& list = buckets[grad.scalar_type()];
    const int64_t bytes = grad.numel() * grad.element_size();
    if (list.empty() || filled[grad.scalar_type()] + bytes > bucket_bytes) {
      list.emplace_back();
      filled[grad.scalar_type()] = 0;
    }
    list.back().push_back(grad);
    filled[grad.scalar_type()] += bytes;
  }
  for (auto& [dtype, list] : buckets) {
    for (std::vector<at::Tensor>& grads : list) {
      std::vector<at::Tensor> flat;
      for (const at::Tensor& g : grads) flat.push_back(g.reshape({-1}));
      std::vector<at::Tensor> buffer{at::cat(flat)};
      if (absl::Status s = group.AllReduceSum(buffer); !s.ok()) return s;
      int64_t offset = 0;
      for (at::Tensor& g : grads) {
        g.copy_(buffer[0].narrow(0, offset, g.numel()).view_as(g));
        offset += g.numel();
      }
    }
  }
  return absl::OkStatus();
}

absl::Status BroadcastParameters(Group& group, const std::vector<at::Tensor>& parameters) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> flat;
  for (const at::Tensor& p : parameters) flat.push_back(p.detach().reshape({-1}).to(at::kFloat));
  std::vector<at::Tensor> buffer{at::cat(flat)};
  if (absl::Status s = group.Broadcast(buffer, 0); !s.ok()) return s;
  int64_t offset = 0;
  for (const at::Tensor& p : parameters) {
    at::Tensor target = p.detach();
    target.copy_(buffer[0].narrow(0, offset, p.numel()).view_as(target));
    offset += p.numel();
  }
  return absl::OkStatus();
}

double ParametersChecksum(const std::vector<at::Tensor>& parameters) {
  at::NoGradGuard no_grad;
  if (parameters.empty()) return 0;
  // Summed where the parameters live; one copy to the host at the end.
  at::Tensor sum = at::zeros({}, parameters[0].options().dtype(at::kDouble));
  for (size_t k = 0; k < parameters.size(); ++k) {
    const at::Tensor p = parameters[k].detach().to(at::kDouble);
    sum += static_cast<double>(k + 1) * p.abs().sum() + p.sum();
  }
  return sum.item<double>();
}

}  // namespace loom::dist
