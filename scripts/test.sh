#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite (slow
# end-to-end tests included; they carry the ctest label "slow"). First checks
# that the C++ files the change touches are clang-formatted
# (scripts/check_format.sh), so an unformatted file fails the command early.
# Then a few seconds of every libFuzzer target (scripts/fuzz.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/check_format.sh
scripts/build.sh
(cd build && ctest -j2 --output-on-failure "$@")
scripts/fuzz.sh "${LOOM_FUZZ_SECONDS:-5}"
