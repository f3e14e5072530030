#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan, in build-fuzz/) and runs
# each for SECONDS (default 60): first on its committed regressions, then
# fuzzing from its seed corpus. Exits non-zero on the first crash, leaving the
# input in build-fuzz/artifacts/. New corpus entries go to build-fuzz/corpus/.
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-60}
shift || true

scripts/setup.sh

BUILD=build-fuzz
if [[ ! -f $BUILD/build.ninja ]]; then
  CC=clang-14 CXX=clang++-14 cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DLOOM_FUZZ=ON -DLOOM_BUILD_TESTS=OFF >/dev/null
fi
echo "fuzz: building the targets in $BUILD (log: $BUILD/build.log)"
cmake --build $BUILD -j "${LOOM_JOBS:-$(nproc)}" --target fuzz_all >$BUILD/build.log 2>&1 ||
  { tail -n 40 $BUILD/build.log; exit 1; }

TARGETS=("$@")
if ((${#TARGETS[@]} == 0)); then
  for f in tests/fuzz/*_fuzz.cc; do TARGETS+=("$(basename "$f" _fuzz.cc)"); done
fi
mkdir -p $BUILD/artifacts
for t in "${TARGETS[@]}"; do
  bin=$BUILD/fuzz/fuzz_$t
  if [[ -d tests/fuzz/regressions/$t ]]; then
    "$bin" -artifact_prefix=$BUILD/artifacts/$t- tests/fuzz/regressions/$t/* >/dev/null 2>&1 ||
      { echo "fuzz: $t crashes on a committed regression input:"; "$bin" tests/fuzz/regressions/$t/*; exit 1; }
  fi
  rm -f $BUILD/artifacts/$t-*
  mkdir -p $BUILD/corpus/$t tests/fuzz/corpus/$t
  echo "fuzz: $t for ${SECONDS_EACH}s"
  "$bin" -max_total_time="$SECONDS_EACH" -print_final_stats=1 -artifact_prefix=$BUILD/artifacts/$t- \
    -max_len=8192 $BUILD/corpus/$t tests/fuzz/corpus/$t 2>&1 | grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|==|SUMMARY|.*ERROR|.*deadly)" || true
  if ls $BUILD/artifacts/$t-* >/dev/null 2>&1; then
    echo "fuzz: $t found a failing input: $(ls $BUILD/artifacts/$t-*)"
    exit 1
  fi
done
echo "fuzz: no crash in ${#TARGETS[@]} targets"
