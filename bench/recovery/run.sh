#!/usr/bin/env bash
# Issue #13's recovery benchmark, one command (root, on a machine that can run the real-node
# cluster):   bench/recovery/run.sh
# Sets up, builds and builds the images (all cached), then runs the fault scenario of the
# cluster tier (lockstep_cluster_test's FaultsRestartInPlaceThenAsAGangAndResumeFromTheLastCheckpoint)
# in a real cluster of its own: examples/ddp-checkpoint.yaml trains with one in-place restart
# allowed per gang attempt, and each fault is injected in turn (SIGKILL of a trainer: an
# in-place restart; SIGSTOP of a trainer, beyond that budget: a gang restart; kubectl delete
# pod; a container killed through containerd with the operator's pod deleted during the
# restart; the kubelet away for 20 s). It prints, per fault: the step it hit, the checkpoint
# the gang resumed from, the steps redone, and the time from the fault to every rank stepping
# again
# (rank 0's first step after the resume: DDP steps only when every rank takes part); and the
# faulty job's wall time against the same job run without faults, in the same run.
set -euo pipefail
source "$(dirname "$0")/../../scripts/common.sh"
"$ROOT/scripts/setup.sh"
"$ROOT/scripts/build.sh"
"$ROOT/scripts/images.sh" build
report=$(mktemp /tmp/lockstep-recovery.XXXXXX)
trap 'rm -f "$report"' EXIT
log "recovery: running the fault scenario in a real cluster (several minutes; the test's own lines follow)"
set +e
LOCKSTEP_RECOVERY_REPORT=$report LOCKSTEP_K8S_BIN="$K8S_BIN" LOCKSTEP_REQUIRE_ALL=1 \
  "$BUILD_DIR/tests/lockstep_cluster_test" --gtest_filter='*Faults*' 2>&1 | grep -E '^\[cluster\]|FAILED|Failure|SKIPPED'
rc=${PIPESTATUS[0]}
set -e
((rc == 0)) || die "the fault scenario failed (exit $rc); its figures are not reported"
echo
echo "bench/recovery: examples/ddp-checkpoint.yaml (2 pods x 1 rank, tiny GPT, checkpoint every 20 steps), $(date -u +%F), $(nproc) cores"
printf '%-92s %9s %10s %8s %7s %10s\n' "fault" "at step" "checkpoint" "resumed" "redone" "recovery"
awk -F'\t' '$1 != "job" && $1 != "kubelet" { printf "%-92s %9d %10d %8d %7d %9.1fs\n", $1, $3, $2, $4, $3 - $4, $5 }' "$report"
awk -F'\t' '$1 == "job" { printf "\nfaulty job %.1f s, the same job without faults %.1f s: ratio %.2f (wall time the faults cost, restarts and steps redone)\n", $2, $3, $2 / $3 }' "$report"
awk -F'\t' '$1 == "kubelet" { printf "the kubelet away 20 s: training went on from step %d to %d, no restart%s\n", $2, $3, ($4 == 1 ? " (the node turned NotReady)" : "") }' "$report"
