#include "loom/sandbox/seccomp.h"

#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <initializer_list>

#include "absl/strings/str_cat.h"

namespace loom::sandbox {
namespace {

// Denied outright. Everything here is either a way out of the sandbox's
// namespaces or a large kernel attack surface that no task needs.
constexpr int kDenied[] = {
    SCMP_SYS(unshare),
    SCMP_SYS(setns),
    SCMP_SYS(mount),
    SCMP_SYS(umount2),
    SCMP_SYS(pivot_root),
    SCMP_SYS(fsopen),
    SCMP_SYS(fsconfig),
    SCMP_SYS(fsmount),
    SCMP_SYS(fspick),
    SCMP_SYS(move_mount),
    SCMP_SYS(open_tree),
    SCMP_SYS(mount_setattr),
    SCMP_SYS(ptrace),
    SCMP_SYS(process_vm_readv),
    SCMP_SYS(process_vm_writev),
    SCMP_SYS(keyctl),
    SCMP_SYS(add_key),
    SCMP_SYS(request_key),
    SCMP_SYS(bpf),
    SCMP_SYS(io_uring_setup),
    SCMP_SYS(io_uring_enter),
    SCMP_SYS(io_uring_register),
    SCMP_SYS(userfaultfd),
    SCMP_SYS(perf_event_open),
    SCMP_SYS(init_module),
    SCMP_SYS(finit_module),
    SCMP_SYS(delete_module),
    SCMP_SYS(kexec_load),
    SCMP_SYS(kexec_file_load),
    SCMP_SYS(open_by_handle_at),
    SCMP_SYS(swapon),
    SCMP_SYS(swapoff),
    SCMP_SYS(reboot),
    SCMP_SYS(syslog),
    SCMP_SYS(acct),
    SCMP_SYS(quotactl),
};

// clone's namespace flags (CLONE_NEWTIME shares its bit with the exit signal
// in clone's flags and exists only for unshare and clone3, both denied).
constexpr unsigned long kNamespaceFlags[] = {CLONE_NEWNS,    CLONE_NEWUTS, CLONE_NEWIPC,
                                             CLONE_NEWUSER,  CLONE_NEWPID, CLONE_NEWNET,
                                             CLONE_NEWCGROUP};

absl::Status Check(int rc, const char* what) {
  if (rc == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("seccomp: ", what, ": ", std::strerror(-rc)));
}

absl::StatusOr<std::string> Build() {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (ctx == nullptr) return absl::InternalError("seccomp: seccomp_init failed");
  auto deny = [&](int syscall, int error, std::initializer_list<scmp_arg_cmp> args) {
    return seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(error), syscall,
                                  static_cast<unsigned>(args.size()), args.begin());
  };
  absl::Status status = absl::OkStatus();
  for (int syscall : kDenied) {
    if (status.ok()) status = Check(deny(syscall, EPERM, {}), "deny rule");
  }
  for (unsigned long flag : kNamespaceFlags) {
    if (status.ok()) {
      status = Check(deny(SCMP_SYS(clone), EPERM, {SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag)}),
                     "clone flags");
    }
  }
  if (status.ok()) status = Check(deny(SCMP_SYS(clone3), ENOSYS, {}), "clone3");
  if (status.ok()) {
    status =
        Check(deny(SCMP_SYS(ioctl), EPERM, {SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCSTI)}),
              "ioctl TIOCSTI");
  }
  std::string program;
  if (status.ok()) {
    // libseccomp writes the program to a file descriptor.
    const int fd = memfd_create("loom-seccomp", MFD_CLOEXEC);
    status = fd < 0 ? absl::InternalError("seccomp: memfd_create failed")
                    : Check(seccomp_export_bpf(ctx, fd), "export");
    if (status.ok()) {
      char chunk[4096];
      lseek(fd, 0, SEEK_SET);
      for (ssize_t n; (n = read(fd, chunk, sizeof(chunk))) > 0;) program.append(chunk, n);
    }
    if (fd >= 0) close(fd);
  }
  seccomp_release(ctx);
  if (!status.ok()) return status;
  if (program.empty()) return absl::InternalError("seccomp: empty filter");
  return program;
}

}  // namespace

absl::StatusOr<std::string> SeccompProgram() {
  static const absl::StatusOr<std::string> program = Build();
  return program;
}

}  // namespace loom::sandbox
