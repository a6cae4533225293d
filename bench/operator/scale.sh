#!/usr/bin/env bash
# bench/operator/scale.sh [bench flags...] [-- operator flags...]: sets up (KWOK, the gang
# scheduler, the control plane: scripts/setup.sh, cached), builds, and runs
# lockstep-bench-scale: lockstep-operator at its defaults against 1,000 KWOK nodes, 1,250
# TrainingJobs x 8 pods, a failure storm of 10% of the running pods, and completion.
# Flags: --nodes N --jobs J --gang P --storm-percent P (0: none) --succeed-after D --timeout D
# --keep-dir DIR (keeps the logs of every component); after `--`, flags for the operator.
# Ctrl-C stops every process it started and removes the control plane.
set -euo pipefail
source "$(dirname "$0")/../../scripts/common.sh"
"$ROOT/scripts/setup.sh"
"$ROOT/scripts/build.sh"
export LOCKSTEP_K8S_BIN="$K8S_BIN" LOCKSTEP_KWOK_BIN="$KWOK_BIN/kwok" \
  LOCKSTEP_GANG_SCHEDULER_BIN="$SCHEDULER_PLUGINS_BIN/kube-scheduler-cosched"
exec "$BUILD_DIR/bench/lockstep-bench-scale" "$@"
