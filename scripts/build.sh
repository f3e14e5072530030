#!/usr/bin/env bash
# Configures (once) and builds loom incrementally.
#   scripts/build.sh            Release build in build/
#   scripts/build.sh --debug    Debug build in build-debug/
#   scripts/build.sh --asan     Debug + AddressSanitizer/UBSan in build-asan/
# Extra arguments after the flag go to `cmake --build` (e.g. --target loom).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=build
CMAKE_ARGS=(-DCMAKE_BUILD_TYPE=Release)
case "${1:-}" in
  --debug) BUILD_DIR=build-debug; CMAKE_ARGS=(-DCMAKE_BUILD_TYPE=Debug); shift ;;
  --asan) BUILD_DIR=build-asan; CMAKE_ARGS=(-DCMAKE_BUILD_TYPE=Debug -DLOOM_ASAN=ON); shift ;;
esac
BUILD_DIR=${LOOM_BUILD_DIR:-$BUILD_DIR}

if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja "${CMAKE_ARGS[@]}"
fi
cmake --build "$BUILD_DIR" -j "${LOOM_JOBS:-$(nproc)}" "$@"
