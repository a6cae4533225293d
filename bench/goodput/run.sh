#!/usr/bin/env bash
# Issue #14's goodput benchmark, one command per tier:
#   bench/goodput/run.sh local   [FLAGS]   agents as local processes (`lockstep run`)
#   bench/goodput/run.sh cluster [FLAGS]   the real-node cluster (root; scripts/cluster.sh)
# Sets up and builds what it needs (cached; the cluster tier also builds the images, starts
# the cluster, installs the chart, and takes it all down at the end unless the cluster was
# already up). Then lockstep-bench-goodput runs the same job in three modes in one run:
# in-place restarts, pod recreation (inPlaceRestarts 0) and no faults, SIGKILLing a random
# rank every --every seconds of training (default 60), and prints goodput, recovery p50/p99 and steps
# redone for each (bench_goodput.cpp says how each is measured). FLAGS go to the bench:
#   --every S  --steps N  --checkpoint-every N  --seed N  --modes in-place,recreate,none
set -euo pipefail
source "$(dirname "$0")/../../scripts/common.sh"
tier=${1:-local}
shift || true
case $tier in
  local|cluster) ;;
  *) die "usage: bench/goodput/run.sh local|cluster [--every S] [--steps N] [--checkpoint-every N] [--modes ...]" ;;
esac
if [[ $tier == local ]]; then
  "$ROOT/scripts/setup.sh" --trainer
  "$ROOT/scripts/build.sh"
  exec "$BUILD_DIR/bench/lockstep-bench-goodput" --tier local "$@"
fi

"$ROOT/scripts/setup.sh"
"$ROOT/scripts/build.sh"
"$ROOT/scripts/images.sh" build
cluster_dir=${LOCKSTEP_CLUSTER_DIR:-$CACHE/cluster}
kubeconfig=$cluster_dir/kubeconfig
started=0
if ! "$ROOT/scripts/cluster.sh" status >/dev/null 2>&1; then
  "$ROOT/scripts/cluster.sh" up
  started=1
fi
helm_home=$(mktemp -d /tmp/lockstep-goodput-helm.XXXXXX)
cleanup() {
  HELM_CACHE_HOME=$helm_home HELM_CONFIG_HOME=$helm_home HELM_DATA_HOME=$helm_home \
    helm --kubeconfig "$kubeconfig" uninstall lockstep -n lockstep-system >/dev/null 2>&1 || true
  rm -rf "$helm_home"
  ((started)) && "$ROOT/scripts/cluster.sh" down
  return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM
"$ROOT/scripts/cluster.sh" import "$("$ROOT/scripts/images.sh" path operator)" "$("$ROOT/scripts/images.sh" path trainer)"
export PATH=$TOOLS_BIN:$PATH
log "goodput: installing the chart (gang restart backoff held at 1 s: recreate measures the recreation, not the backoff policy; progress read every 2 s)"
HELM_CACHE_HOME=$helm_home HELM_CONFIG_HOME=$helm_home HELM_DATA_HOME=$helm_home \
  helm --kubeconfig "$kubeconfig" upgrade --install lockstep "$ROOT/charts/lockstep" -n lockstep-system \
  --create-namespace --wait --timeout 180s --set replicas=1 --set restartBackoff=1s --set restartBackoffMax=1s --set progressPeriod=2s
"$BUILD_DIR/bench/lockstep-bench-goodput" --tier cluster --kubeconfig "$kubeconfig" \
  --volume-dir "$cluster_dir/run/volumes/goodput" "$@"
