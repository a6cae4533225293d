#!/usr/bin/env bash
# bench/agent/injection.sh: what bringing the agent in costs a pod's start (#25), on the
# real-node cluster (scripts/cluster.sh), in alternating rounds, every round printed.
#
#   bench/agent/injection.sh [ROUNDS]        (default 6 of each; needs root, as the cluster does)
#
# Each round creates one pod and times from just before `kubectl create` to the moment its
# worker starts (the worker prints the host clock's time: one node, one clock):
#   injected: as the operator makes it (Note [Agent injection]): an emptyDir, the init container
#             from lockstep/agent copying the bundle, the trainer container starting
#             /lockstep/agent/lockstep-agent from the read-only mount;
#   baseline: the same trainer image starting its own lockstep-agent from its PATH
#             (what `--agent-image ''` does), no init container, no volume.
# The agent runs one worker, `sh -c 'date +%s.%N'`, with /metrics and stall detection off, so
# the figure is the pod's start plus the agent's, nothing of training. Target: injected adds
# < 1 s (median of the differences). Uses a running cluster if there is one, else starts one
# and stops it at the end; imports the trainer and agent images (scripts/images.sh build first).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/scripts/common.sh"
ROUNDS=${1:-6}
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a whole number >= 1, not '$ROUNDS'"
VERSION=$(sed -n 's/^project(lockstep VERSION \([0-9.]*\).*/\1/p' "$ROOT/CMakeLists.txt")
NS=bench-injection

started_cluster=0
cleanup() {
  kubectl delete namespace "$NS" --wait=false >/dev/null 2>&1 || true
  if ((started_cluster)); then "$ROOT/scripts/cluster.sh" down >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT
trap 'echo; log "interrupted"; exit 130' INT TERM

if ! "$ROOT/scripts/cluster.sh" status >/dev/null 2>&1; then
  log "starting the real-node cluster (scripts/cluster.sh up)"
  "$ROOT/scripts/cluster.sh" up >/dev/null
  started_cluster=1
fi
export KUBECONFIG=${LOCKSTEP_CLUSTER_DIR:-$CACHE/cluster}/kubeconfig
for i in trainer agent; do
  tar=$("$ROOT/scripts/images.sh" path "$i") || die "the $i image is not built: scripts/images.sh build $i"
  "$ROOT/scripts/cluster.sh" import "$tar" >/dev/null
done
kubectl create namespace "$NS" >/dev/null 2>&1 || true

# pod_yaml NAME injected|baseline
pod_yaml() {
  local name=$1 kind=$2 agent=lockstep-agent
  [[ $kind == injected ]] && agent=/lockstep/agent/lockstep-agent
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $name, namespace: $NS}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: trainer
    image: lockstep/trainer:$VERSION
    imagePullPolicy: Never
    command: [$agent, --no-metrics, --stall-timeout, "0", --, sh, -c, "date +%s.%N"]
EOF
  [[ $kind == injected ]] || return 0
  cat <<EOF
    volumeMounts: [{name: lockstep-agent, mountPath: /lockstep/agent, readOnly: true}]
  volumes: [{name: lockstep-agent, emptyDir: {sizeLimit: 256Mi}}]
  initContainers:
  - name: lockstep-agent
    image: lockstep/agent:$VERSION
    imagePullPolicy: Never
    command: [/lockstep/lockstep-agent, --install-bundle, /lockstep-install]
    volumeMounts: [{name: lockstep-agent, mountPath: /lockstep-install}]
    resources: {requests: {cpu: 10m, memory: 16Mi}, limits: {cpu: 500m, memory: 64Mi}}
    securityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, allowPrivilegeEscalation: false,
                      readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}, seccompProfile: {type: RuntimeDefault}}
EOF
}

# one_round NAME KIND: prints the seconds from create to the worker's start.
one_round() {
  local name=$1 kind=$2 t0 t1 out
  t0=$(date +%s.%N)
  pod_yaml "$name" "$kind" | kubectl create -f - >/dev/null
  kubectl -n "$NS" wait --for=jsonpath='{.status.phase}'=Succeeded "pod/$name" --timeout=120s >/dev/null ||
    die "pod $name did not succeed: $(kubectl -n "$NS" describe pod "$name" | tail -20)"
  out=$(kubectl -n "$NS" logs "$name" -c trainer)
  t1=$(sed -n 's/^\[rank 0\] \([0-9]*\.[0-9]*\)$/\1/p' <<< "$out" | head -n1)
  [[ -n $t1 ]] || die "no time in pod $name's log: $out"
  # Where an injected pod's time goes: the init container's copy ends when its one line is
  # logged (containerd stamps each line as it reads it), and the kubelet starts the trainer
  # container once it has seen the init container exit. Kept for the round's line.
  if [[ $kind == injected ]]; then
    local stamp
    stamp=$(kubectl -n "$NS" logs --timestamps "$name" -c lockstep-agent | sed -n 's/^\([0-9T:.-]*\)Z lockstep-agent: installed.*/\1/p' | head -n1)
    [[ -n $stamp ]] && INIT_DONE[$name]=$(awk -v a="$t0" -v b="$(date -u -d "${stamp}Z" +%s.%N)" 'BEGIN { printf "%.3f", b - a }')
  fi
  kubectl -n "$NS" delete pod "$name" --wait=false >/dev/null
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }'
}
declare -A INIT_DONE=()

TMP_ROUND=$(mktemp)
trap 'rm -f "$TMP_ROUND"; cleanup' EXIT
echo "bench/agent/injection.sh: pod creation -> worker start, trainer image lockstep/trainer:$VERSION, $ROUNDS rounds each, order alternating"
inj=() base=()
for ((r = 1; r <= ROUNDS; r++)); do
  if ((r % 2)); then order=(injected baseline); else order=(baseline injected); fi
  declare -A got=()
  for kind in "${order[@]}"; do
    one_round "r$r-$kind" "$kind" > "$TMP_ROUND"  # not in $(...): INIT_DONE must stay set here
    got[$kind]=$(< "$TMP_ROUND")
  done
  inj+=("${got[injected]}") base+=("${got[baseline]}")
  init=${INIT_DONE[r$r-injected]:-}
  printf '  round %2d (%s first): injected %s s, baseline %s s, added %+.3f s%s\n' "$r" "${order[0]}" \
    "${got[injected]}" "${got[baseline]}" "$(awk -v a="${got[injected]}" -v b="${got[baseline]}" 'BEGIN { print a - b }')" \
    "${init:+ (injected: the copy done at $init s, the worker $(awk -v a="${got[injected]}" -v b="$init" 'BEGIN { printf "%.3f", a - b }') s later)}"
done
median() { printf '%s\n' "$@" | LC_ALL=C sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
diffs=()
for ((i = 0; i < ${#inj[@]}; i++)); do diffs+=("$(awk -v a="${inj[i]}" -v b="${base[i]}" 'BEGIN { print a - b }')"); done
mi=$(median "${inj[@]}") mb=$(median "${base[@]}") md=$(median "${diffs[@]}")
printf 'median: injected %.3f s, baseline %.3f s, ratio %.2f; added (median of the rounds'"'"' differences) %+.3f s: target < 1 s %s\n' \
  "$mi" "$mb" "$(awk -v a="$mi" -v b="$mb" 'BEGIN { print a / b }')" "$md" "$(awk -v d="$md" 'BEGIN { print (d < 1 ? "met" : "NOT met") }')"
