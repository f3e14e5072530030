#pragma once
// The seccomp filter every sandboxed command runs under (bubblewrap loads
// it with --seccomp just before exec). Denied with EPERM: creating or
// entering namespaces (unshare, setns, clone with CLONE_NEW* flags), mount
// and the new mount API, pivot_root, ptrace and process_vm_*, the kernel
// keyring, bpf, io_uring, userfaultfd, perf_event_open, module and kexec
// loading, open_by_handle_at, swap, reboot, syslog, acct, quotactl and the
// TIOCSTI terminal injection. clone3 answers ENOSYS, so that libc falls back
// to clone, whose flags the filter can see. Syscalls of a foreign
// architecture (i386 via int 0x80, x32) kill the process.

#include <string>

#include "absl/status/statusor.h"

namespace loom::sandbox {

// The filter as a classic BPF program, built once (libseccomp).
absl::StatusOr<std::string> SeccompProgram();

}  // namespace loom::sandbox
