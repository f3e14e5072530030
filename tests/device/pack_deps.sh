#!/usr/bin/env bash
# Run HERE (Debian 12 dev machine): copies the Debian packages the whole loom
# build needs into .device/deps/usr (git-ignored, ~48 MB) for
# tests/device/train_cuda_check.sh on the GPU machine (carry [".device/deps"]).
# Static archives are dropped where a shared library exists; docs/man pages too.
set -euo pipefail
cd "$(dirname "$0")/../.."
DEV="libgrpc++-dev libgrpc-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
     libyaml-cpp-dev nlohmann-json3-dev libspdlog-dev libfmt-dev libabsl-dev libcli11-dev
     libpcre2-dev libutf8proc-dev libgtest-dev libbenchmark-dev"
# Base-system packages the GPU machine (Ubuntu 24.04) has in newer versions.
EXCL="libc6 libc6-dev libc-dev-bin libgcc-s1 libstdc++6 gcc-12-base linux-libc-dev libcrypt-dev
      libcrypt1 libnsl-dev libnsl2 libtirpc-common libtirpc-dev libtirpc3 libgssapi-krb5-2
      libk5crypto3 libkeyutils1 libkrb5-3 libkrb5support0 libcom-err2 catch2 googletest
      rpcsvc-proto libpcre2-16-0 libpcre2-32-0 libpcre2-posix3"
pkgs=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
         --no-replaces --no-enhances $DEV | grep -v '^ ' | sort -u |
       while read -r p; do dpkg -s "$p" >/dev/null 2>&1 && echo "$p"; done |
       grep -vxF -f <(tr -s ' \n' '\n' <<<"$EXCL"))
rm -rf .device/deps && mkdir -p .device/deps
for p in $pkgs; do dpkg -L "$p"; done | grep -v '^/usr/share/\(doc\|man\|lintian\|bug\|info\)' |
  sort -u | while read -r f; do
    if [[ -L $f ]]; then :; elif [[ -f $f ]]; then
      [[ $f == *.a && -e ${f%.a}.so ]] && continue
    else continue; fi
    rel=${f#/}; [[ $rel == lib/* ]] && rel=usr/$rel
    mkdir -p ".device/deps/$(dirname "$rel")"; cp -a "$f" ".device/deps/$rel"
  done
rm -rf .device/deps/usr/src
find .device/deps -xtype l -delete
du -sh .device/deps
