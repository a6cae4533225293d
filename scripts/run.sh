#!/usr/bin/env bash
# The main job: run a TrainingJob from its YAML on this machine with `lockstep run`, after
# the set-up and build it needs (both cached). The same YAML runs on a cluster with
# `kubectl apply -f`. Default: examples/ddp.yaml (2 nodes x 2 workers, DDP, the tiny GPT on
# the built-in synthetic task; about 15 s on two cores). Ctrl-C stops every process.
set -euo pipefail
source "$(dirname "$0")/common.sh"
job=${1:-$ROOT/examples/ddp.yaml}
[[ -f $job ]] || die "no such TrainingJob file: $job"
"$ROOT/scripts/setup.sh"
"$ROOT/scripts/build.sh"
exec "$BUILD_DIR/cli/lockstep" run "$job"
