#pragma once
// Verification: turns the end state of an episode (its sandbox and the
// submitted answer) into a reward, with details saying what was checked.
// Kinds: a command's exit status, a regex over a command's output (or the
// answer), an exact answer, or fail-to-pass / pass-to-pass test lists.

#include <string>

#include "absl/status/status.h"
#include "loom/sandbox/sandbox.h"
#include "loom/v1/sandbox.pb.h"

namespace loom::sandbox {

// INVALID_ARGUMENT when the verification is unusable (no kind, bad regex, a
// test list without its command template); checked before a session starts.
absl::Status ValidateVerification(const v1::Verification& verification);

// Runs the checks: commands in a fresh sandbox made by
// `sandbox.ForVerification` (pristine files, hidden verification files,
// empty HOME and /tmp), never in the agent's; a regex must match the whole
// (trimmed) answer or output. A check command that cannot start, or a
// verification sandbox that cannot be made, gives reward 0 and says so.
// Each check command is appended to `log` when given.
v1::Verdict Verify(const Sandbox& sandbox, const v1::Verification& verification,
                   const std::string& answer, double timeout_s,
                   google::protobuf::RepeatedPtrField<v1::CommandRecord>* log = nullptr);

}  // namespace loom::sandbox
