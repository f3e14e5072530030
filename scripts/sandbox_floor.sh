#!/usr/bin/env bash
# The floor under any sandbox round trip on this machine: the mean wall time
# of N runs (default 100) of /bin/true started plainly, through bash, and
# through bubblewrap with more and more of loom's isolation. Compare these
# with `loom bench sandbox` before reading its p50 against an absolute
# target. Measure on an idle machine (load average under 0.5).
#   scripts/sandbox_floor.sh [N]
set -euo pipefail
N=${1:-100}
run() {
  local name=$1
  shift
  "$@" >/dev/null 2>&1 || { echo "$name: failed: $*" >&2; return 1; }
  local t0 t1
  t0=$(date +%s%N)
  for ((i = 0; i < N; i++)); do "$@" >/dev/null 2>&1; done
  t1=$(date +%s%N)
  printf '%-28s %6d us\n' "$name" $(((t1 - t0) / N / 1000))
}
B=(bwrap --die-with-parent --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib
   --symlink usr/lib64 /lib64 --proc /proc --dev /dev)
echo "load average at the start: $(cut -d' ' -f1 /proc/loadavg)"
run "fork+exec /bin/true" /bin/true
run "bash -c true" /bin/bash -c true
run "bwrap, no namespaces" "${B[@]}" /bin/true
run "bwrap --unshare-all" "${B[@]}" --unshare-all /bin/true
run "  --share-net" "${B[@]}" --unshare-all --share-net /bin/true
run "  --disable-userns" "${B[@]}" --unshare-all --unshare-user --disable-userns /bin/true
run "  ... bash -c true" "${B[@]}" --unshare-all --unshare-user --disable-userns --cap-drop ALL \
  /bin/bash -c true
