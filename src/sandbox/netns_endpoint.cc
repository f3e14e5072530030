#include "sandbox/netns_endpoint.h"

#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "loom/serve/http.h"
#include "sandbox/unique_fd.h"

namespace loom::sandbox {
namespace {

// bubblewrap's info document: {"child-pid": N, ...}, written once.
absl::StatusOr<pid_t> ReadChildPid(int info_fd, const std::atomic<bool>& ended) {
  std::string info;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (info.find('}') == std::string::npos) {
    if (ended || std::chrono::steady_clock::now() > deadline) {
      return absl::UnavailableError("bubblewrap reported no sandbox pid");
    }
    pollfd p{info_fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    char buffer[512];
    const ssize_t n = ::read(info_fd, buffer, sizeof(buffer));
    if (n == 0) return absl::UnavailableError("bubblewrap closed its info pipe without a pid");
    if (n > 0) info.append(buffer, static_cast<size_t>(n));
    if (info.size() > 4096) return absl::UnavailableError("bubblewrap's info is not a pid");
  }
  const size_t key = info.find("\"child-pid\"");
  const size_t colon = key == std::string::npos ? key : info.find(':', key);
  if (colon == std::string::npos) {
    return absl::UnavailableError(absl::StrCat("bubblewrap's info has no child-pid: ", info));
  }
  size_t end = colon + 1;
  auto part_of_number = [](char c) {
    return std::isspace(static_cast<unsigned char>(c)) ||
           std::isdigit(static_cast<unsigned char>(c));
  };
  while (end < info.size() && part_of_number(info[end])) ++end;
  int pid = 0;
  if (!absl::SimpleAtoi(info.substr(colon + 1, end - colon - 1), &pid) || pid <= 1) {
    return absl::UnavailableError(absl::StrCat("bubblewrap's child-pid does not parse: ", info));
  }
  return static_cast<pid_t>(pid);
}

// Whether the current network namespace's loopback is up. Bubblewrap's
// child reports its pid before it sets loopback up (its address first, then
// the link), so a listener made at once can find no 127.0.0.1 to bind.
bool LoopbackUp() {
  UniqueFd probe(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!probe.ok()) return false;
  ifreq request{};
  std::strncpy(request.ifr_name, "lo", IFNAMSIZ - 1);
  return ::ioctl(probe.get(), SIOCGIFFLAGS, &request) == 0 && (request.ifr_flags & IFF_UP) != 0;
}

// A socket listening on 127.0.0.1:port in the network namespace `netns`,
// once its loopback is up (waited for up to 5 s): made on a thread of its
// own that enters the namespace and ends there (a socket stays in the
// namespace it was made in; no other thread moves).
absl::StatusOr<int> ListenIn(int netns, int port) {
  absl::StatusOr<int> socket = absl::UnknownError("not run");
  std::thread([&] {
    if (::setns(netns, CLONE_NEWNET) != 0) {
      socket = absl::UnavailableError(
          absl::StrCat("cannot enter the sandbox's network namespace: ", std::strerror(errno)));
      return;
    }
    for (int wait = 0; wait < 500 && !LoopbackUp(); ++wait) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    socket = serve::ListenSocket("127.0.0.1", port);
  }).join();
  return socket;
}

}  // namespace

absl::Status OpenNetnsEndpoint(int info_fd, int block_fd, int port,
                               const std::function<void(int listen_fd)>& serve,
                               const std::atomic<bool>& ended) {
  absl::StatusOr<pid_t> pid = ReadChildPid(info_fd, ended);
  if (!pid.ok()) return pid.status();
  absl::Status status = [&]() -> absl::Status {
    // The pid is bubblewrap's child, held back before its command: no
    // sandboxed code has run, and it cannot have been reused (bubblewrap,
    // our child, has not reaped it).
    UniqueFd netns(::open(absl::StrCat("/proc/", *pid, "/ns/net").c_str(), O_RDONLY | O_CLOEXEC));
    if (!netns.ok()) {
      return absl::UnavailableError(
          absl::StrCat("cannot open the sandbox's network namespace: ", std::strerror(errno)));
    }
    absl::StatusOr<int> socket = ListenIn(netns.get(), port);
    if (!socket.ok()) return socket.status();
    serve(*socket);
    return ::write(block_fd, "x", 1) == 1
               ? absl::OkStatus()
               : absl::UnavailableError("cannot let the sandboxed command start");
  }();
  if (!status.ok()) ::kill(*pid, SIGKILL);  // the sandbox's init: the whole sandbox goes
  return status;
}

}  // namespace loom::sandbox
