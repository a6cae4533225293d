#!/usr/bin/env bash
# Makes .deps/ (git-ignored): what bench/trainer/gpu_session.sh needs on a GPU machine that has
# no network and no packages: the Debian packages the agent, the trainer and the GPU tier build
# with (apt-get download, unpacked there with dpkg -x and mended by deps_fixup.sh) and our
# Prometheus, xz-compressed (about 20 MB in all). Run it here, then carry .deps with the call.
set -euo pipefail
source "$(dirname "$0")/../../scripts/common.sh"
dir="$ROOT/.deps"
mkdir -p "$dir"
packages=(prometheus-cpp-dev libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libprometheus-cpp-push1.0
          civetweb libcivetweb1 libcivetweb-dev libgtest-dev libgmock-dev nlohmann-json3-dev libgloo-dev
          libxxhash-dev zlib1g-dev libssl-dev libsimdjson-dev libsimdjson14)
(cd "$dir" && apt-get download "${packages[@]}")
[[ -x $PROMETHEUS_BIN/prometheus ]] || die "no Prometheus in $PROMETHEUS_BIN: run scripts/setup.sh first"
xz -T2 -6 -c "$PROMETHEUS_BIN/prometheus" > "$dir/prometheus.xz"
log ".deps ready: $(du -sh "$dir" | cut -f1) in $dir"
