#!/usr/bin/env bash
# The recovery benchmark (#13, #28), one command (root, on a machine that can run the real-node
# cluster):   bench/recovery/run.sh [all|pods|nodes]      (default all)
# Sets up, builds and builds the images (all cached), then runs the cluster tier's fault
# scenarios in real clusters of their own and prints, per fault: the step it hit, the
# checkpoint the gang resumed from, the steps redone, and the time from the fault to every rank
# stepping again (rank 0's first step after the resume: DDP steps only when every rank takes
# part).
#   pods   lockstep_cluster_test's FaultsRestartInPlaceThenAsAGangAndResumeFromTheLastCheckpoint,
#          one node: examples/ddp-checkpoint.yaml with one in-place restart allowed per gang
#          attempt; SIGKILL of a trainer (in place), SIGSTOP of a trainer beyond that budget (a
#          gang restart), kubectl delete pod, a container killed through containerd with the
#          operator's pod deleted during the restart, the kubelet away for 20 s; and the faulty
#          job's wall time against the same job run without faults.
#   nodes  nodes_in_cluster_test's NodeFaults.*, 3 nodes: the same job, one pod per node,
#          and a node frozen, powered off, tainted NoExecute, drained; then the same faults with
#          the operator's node watch off (--node-watch=false: waiting for Kubernetes' eviction,
#          as Kubeflow's and JobSet's operators do), each given 180 s before its node is healed.
set -euo pipefail
source "$(dirname "$0")/../../scripts/common.sh"
what=${1:-all}
case $what in all|pods|nodes) ;; *) die "usage: bench/recovery/run.sh [all|pods|nodes]" ;; esac
"$ROOT/scripts/setup.sh"
"$ROOT/scripts/build.sh"
"$ROOT/scripts/images.sh" build
report=$(mktemp /tmp/lockstep-recovery.XXXXXX)
trap 'rm -f "$report"' EXIT
run() {  # run LABEL BINARY FILTER [ENV=VALUE...]: one scenario; its figures go to $report
  local label=$1 binary=$2 filter=$3; shift 3
  log "recovery: $label (several minutes; the test's own lines follow)"
  set +e
  env "$@" LOCKSTEP_RECOVERY_REPORT="$report" LOCKSTEP_K8S_BIN="$K8S_BIN" LOCKSTEP_REQUIRE_ALL=1 PATH="$PATH" \
    "$BUILD_DIR/tests/cluster/$binary" --gtest_filter="$filter" 2>&1 | grep -E '^\[cluster\]|FAILED|Failure|SKIPPED'
  local rc=${PIPESTATUS[0]}
  set -e
  ((rc == 0)) || die "the scenario ($label) failed (exit $rc); its figures are not reported"
}
if [[ $what == all || $what == pods ]]; then
  run "pod and process faults, one node" lockstep_cluster_test '*Faults*'
fi
if [[ $what == all || $what == nodes ]]; then
  run "node faults, 3 nodes, with the node watch" nodes_in_cluster_test 'NodeFaults.*'
  run "node faults, 3 nodes, without the node watch" nodes_in_cluster_test 'NodeFaults.*' LOCKSTEP_RECOVERY_NODE_WATCH=off
fi
echo
echo "bench/recovery: examples/ddp-checkpoint.yaml (2 pods x 1 rank, tiny GPT, checkpoint every 20 steps), $(date -u +%F), $(nproc) cores"
printf '%-100s %9s %10s %8s %7s %10s\n' "fault" "at step" "checkpoint" "resumed" "redone" "recovery"
awk -F'\t' '$1 != "job" && $1 != "kubelet" {
  if ($5 < 0) printf "%-100s %9d %10d %8s %7s %10s\n", $1, $3, $2, "-", "-", "none in 180 s";
  else printf "%-100s %9d %10d %8d %7d %9.1fs\n", $1, $3, $2, $4, $3 - $4, $5 }' "$report"
awk -F'\t' '$1 == "job" { printf "\nfaulty job %.1f s, the same job without faults %.1f s: ratio %.2f (wall time the faults cost, restarts and steps redone)\n", $2, $3, $2 / $3 }' "$report"
awk -F'\t' '$1 == "kubelet" { printf "the kubelet away 20 s: training went on from step %d to %d, no restart%s\n", $2, $3, ($4 == 1 ? " (the node turned NotReady)" : "") }' "$report"
