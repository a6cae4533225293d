#!/usr/bin/env bash
# A demonstration of the cluster side on this machine: the TrainingJob submitted to a real
# control plane, and what lockstep-operator makes of it.
# Set-up, build, a real control plane on loopback, the TrainingJob CRD, lockstep-operator,
# and the job submitted with kubectl; it shows the job as stored (with defaults), the pods,
# Service and PodGroup the operator made, and the job's status. No kubelet runs here, so the
# pods stay Pending (scripts/run.sh runs the training itself). Ctrl-C stops everything.
set -euo pipefail
source "$(dirname "$0")/common.sh"
job=${1:-$ROOT/examples/ddp.yaml}
[[ -f $job ]] || die "no such TrainingJob file: $job"
job=$(cd "$(dirname "$job")" && pwd)/$(basename "$job")

"$ROOT/scripts/setup.sh"
"$ROOT/scripts/build.sh"
export LOCKSTEP_K8S_BIN="$K8S_BIN" LOCKSTEP_OPERATOR="$BUILD_DIR/operator/lockstep-operator"
log "starting a local control plane and lockstep-operator, then submitting $job"
exec "$BUILD_DIR/tests/controlplane/lockstep-controlplane" -- /bin/bash -c '
  set -euo pipefail
  kubectl apply -f "$1" -f "$2" >/dev/null
  kubectl wait --for=condition=Established crd --all --timeout=60s >/dev/null
  "$LOCKSTEP_OPERATOR" --http-port=0 --leader-elect=false --log-level=warn &
  op=$!
  trap "kill $op 2>/dev/null; wait $op 2>/dev/null" EXIT
  kubectl apply -f "$3"
  name=$(kubectl get -f "$3" -o jsonpath="{.metadata.name}")
  nodes=$(kubectl get tj "$name" -o jsonpath="{.spec.nodes}")
  for _ in $(seq 100); do
    [[ $(kubectl get pods -l lockstep.dev/job-name="$name" -o name | wc -l) -ge $nodes ]] && break
    sleep 0.1
  done
  echo "--- the job as stored, with defaults applied:"
  kubectl get tj "$name" -o yaml | sed -n "/^spec:/,/^status:/p" | sed "\$d"
  echo "--- what lockstep-operator created:"
  kubectl get tj,pods,services,podgroups -l lockstep.dev/job-name="$name" -o wide 2>/dev/null || true
  kubectl get tj "$name" -o wide
  echo "--- pod $name-0 runs: $(kubectl get pod "$name-0" -o jsonpath="{.spec.containers[0].command}")"
  echo "(no kubelet runs here, so the pods stay Pending; scripts/run.sh trains locally)"
' run-main "$ROOT/crds/lockstep.dev_trainingjobs.yaml" "$ROOT/tests/crds/podgroup.yaml" "$job"
