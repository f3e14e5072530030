#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite (slow
# end-to-end tests included; they carry the ctest label "slow").
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
cd build
ctest -j2 --output-on-failure "$@"
