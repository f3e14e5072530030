#!/usr/bin/env bash
# The unit tests under AddressSanitizer and UBSan: builds build-asan/ (Debug,
# -DLOOM_ASAN=ON, incrementally) and runs ctest there. Arguments go to ctest
# (e.g. -R 'Containment|Hardening' or -LE slow). Not part of CI: see
# docs/fuzzing.md for how long it takes and what it found.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh --asan
# LibTorch and gRPC keep allocations until exit: leak reports would be theirs.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir build-asan -j "${LOOM_JOBS:-$(nproc)}" --output-on-failure "$@"
