#pragma once
// The worker's side of a run_harness (see sandbox.proto): the harness runs as
// the sandbox's main process (Sandbox::Serve) with its model endpoint at
// 127.0.0.1:PORT inside the sandbox's network namespace; each request it
// makes travels to the client as an http_call on the session's stream, and
// the client's http_answer parts go back to the harness's connection. The
// harness's only way out of the sandbox is that endpoint, and the endpoint
// reaches only this session's client: never the worker's control API, never
// another session.

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "loom/sandbox/sandbox.h"
#include "loom/v1/sandbox.grpc.pb.h"
#include "sandbox/leases.h"

namespace loom::sandbox {

struct HarnessRunResult {
  absl::Status status;  // INVALID_ARGUMENT for a malformed run_harness or a broken protocol
  // The client's first message after harness_done, read by the run's reader
  // (the session serves it next); none when the stream ended.
  std::optional<v1::ClientMessage> next;
};

// Runs `run` to its end and sends harness_done (unless the request is
// malformed: then only the status). `max_s` caps its wall time.
HarnessRunResult RunHarness(const ClientLink& link, const Sandbox& sandbox,
                            const v1::RunHarness& run, double max_s, const std::string& id);

}  // namespace loom::sandbox
