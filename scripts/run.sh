#!/usr/bin/env bash
# Installs what is missing, builds the `loom` binary (not the tests: those
# are scripts/test.sh's), and runs `loom train` on a config:
#   scripts/run.sh configs/quickstart.yaml [loom train options]
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $# -lt 1 ]]; then
  echo "usage: scripts/run.sh CONFIG [loom train options]" >&2
  exit 2
fi
config=$1
shift
# Each part's time goes to stderr: a first run on a fresh machine spends most
# of its time installing and building (README, "Two commands").
SECONDS=0
scripts/setup.sh --run
echo "run.sh: setup took ${SECONDS}s" >&2
SECONDS=0
scripts/build.sh --target loom
echo "run.sh: building loom took ${SECONDS}s" >&2
exec build/bin/loom train --config "$config" "$@"
