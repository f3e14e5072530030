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
scripts/setup.sh
scripts/build.sh --target loom
exec build/bin/loom train --config "$config" "$@"
