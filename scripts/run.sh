#!/usr/bin/env bash
# The main job: run a TrainingJob from its YAML on this machine.
#
# Today (issue #2 landed; the operator, agent, trainer and `lockstep run` are issues #3-#7)
# it does everything that exists end to end: set-up, build, start a real control plane on
# loopback, install the TrainingJob CRD, submit the job with kubectl, and show what the API
# server stored (defaults filled in) and `kubectl get tj`. Ctrl-C stops everything cleanly.
set -euo pipefail
source "$(dirname "$0")/common.sh"
job=${1:-$ROOT/examples/ddp.yaml}
[[ -f $job ]] || die "no such TrainingJob file: $job"
job=$(cd "$(dirname "$job")" && pwd)/$(basename "$job")

"$ROOT/scripts/setup.sh"
"$ROOT/scripts/build.sh"
export LOCKSTEP_K8S_BIN="$K8S_BIN"
log "starting a local control plane and submitting $job"
exec "$BUILD_DIR/tests/controlplane/lockstep-controlplane" -- /bin/bash -c '
  set -euo pipefail
  kubectl apply -f "$1" >/dev/null
  kubectl wait --for=condition=Established crd/trainingjobs.lockstep.dev --timeout=60s >/dev/null
  kubectl apply -f "$2"
  name=$(kubectl get -f "$2" -o jsonpath="{.metadata.name}")
  echo "--- as stored, with defaults applied:"
  kubectl get tj "$name" -o yaml | sed -n "/^spec:/,\$p"
  echo "--- kubectl get tj -o wide:"
  kubectl get tj -o wide
  echo "(training itself arrives with the operator, agent and trainer: issues #3-#5, #7)"
' run-main "$ROOT/crds/lockstep.dev_trainingjobs.yaml" "$job"
