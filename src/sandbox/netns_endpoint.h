#pragma once
// The listening socket of a sandbox's model endpoint, made inside the
// sandbox's own network namespace while bubblewrap holds the command back
// (--info-fd, --block-fd): the command starts only once the socket listens,
// and the worker, never the agent, names the namespace (by the pid bubblewrap
// reports, before any sandboxed code has run).

#include <atomic>
#include <functional>

#include "absl/status/status.h"

namespace loom::sandbox {

// Reads the sandbox's pid from bubblewrap's `info_fd`, listens on
// 127.0.0.1:`port` inside that pid's network namespace, hands the socket to
// `serve` and writes one byte to `block_fd`, which lets the command start.
// Gives up when `ended` turns true (bubblewrap exited first) or after 30 s.
// On failure the sandbox is killed before its command runs, and the status
// says why.
absl::Status OpenNetnsEndpoint(int info_fd, int block_fd, int port,
                               const std::function<void(int listen_fd)>& serve,
                               const std::atomic<bool>& ended);

}  // namespace loom::sandbox
