# shellcheck shell=bash
# scripts/cluster.sh status, import and nodes: what runs, images into every node, the nodes'
# names. Sourced; not run.

status() {
  if [[ -z $(ls -A "$RUN/pids" 2>/dev/null) ]]; then
    say "down (state $STATE)"
    local other; other=$(holder)
    [[ -z $other ]] || say "another cluster is up: state $other"
    exit 6
  fi
  local d running=() dead=() rss=0 n=0 p i nodes off=" "; nodes=$(node_count)
  for ((i = 0; i < nodes; i++)); do   # a node powered off on purpose: its daemons are not missing
    [[ $(cat "$RUN/faults/$(node_name "$i")" 2>/dev/null) == off ]] && off+="$(node_daemons_of "$i") "
  done
  for d in $(all_daemons); do
    [[ $off == *" $d "* ]] && continue
    if alive "$d"; then running+=("$d $(cat "$RUN/pids/$d")"); else dead+=("$d"); fi
  done
  echo "state:      $STATE (up since $(date -d "@$(cat "$RUN/up-since" 2>/dev/null || stat -c %Y "$RUN")" +%T))"
  echo "kubeconfig: $KUBECONFIG_PATH"
  echo "            export KUBECONFIG=$KUBECONFIG_PATH"
  echo "api server: https://127.0.0.1:$API_PORT (and $(node_ip):$API_PORT; in pods https://kubernetes.default.svc)"
  echo "versions:   Kubernetes $KUBERNETES_VERSION, etcd $ETCD_VERSION, CoreDNS $COREDNS_VERSION, scheduler-plugins $SCHEDULER_PLUGINS_VERSION, containerd $(dpkg-query -W -f='${Version}' containerd 2>/dev/null), runc $(dpkg-query -W -f='${Version}' runc 2>/dev/null)"
  for ((i = 0; i < nodes; i++)); do
    local name fault; name=$(node_name "$i"); fault=$(cat "$RUN/faults/$name" 2>/dev/null || true)
    printf '%-12s%s (pods %s on %s, kubelet port %s)%s\n' "$( ((i == 0)) && echo "node$( ((nodes > 1)) && echo s):")" \
      "$(kubectl_ get node "$name" --no-headers 2>/dev/null || echo "$name not registered")" "$(node_cidr "$i")" \
      "$(node_bridge "$i")" "$(node_port "$i")" "${fault:+ [$fault: scripts/cluster.sh node ...]}"
  done
  echo "schedulers: default-scheduler, $GANG_SCHEDULER_NAME (Coscheduling: PodGroups, scheduling.x-k8s.io/v1alpha1; https://127.0.0.1:$GANG_SCHEDULER_PORT/readyz)"
  echo "netpol:     kube-network-policies $KUBE_NETWORK_POLICIES_VERSION enforces NetworkPolicy (nfqueue $NETPOL_QUEUE$(netpol_queue_bound || echo ", NOT BOUND"); http://127.0.0.1:$NETPOL_METRICS_PORT/metrics)"
  echo "pods:       $(kubectl_ get pods -A --no-headers 2>/dev/null | wc -l) in all namespaces"
  echo "processes:  $(IFS=,; echo "${running[*]}" | sed 's/,/, /g')"
  while read -r p; do
    rss=$((rss + $(awk '/^VmRSS:/ { print $2 }' "/proc/$p/status" 2>/dev/null || echo 0))); n=$((n + 1))
  done < <(find "$(pids_cgroup)" -name cgroup.procs -exec cat {} + 2>/dev/null)
  echo "memory:     $((rss / 1024)) MB resident in $n processes (daemons, shims, pods)"
  ((${#dead[@]} == 0)) || { echo "NOT RUNNING: ${dead[*]} (logs in $RUN/logs); scripts/cluster.sh down, then up"; exit 1; }
}

import_cmd() {
  (($#)) || { echo "usage: scripts/cluster.sh import IMAGE.tar..." >&2; exit 2; }
  alive containerd || { say "not up; run scripts/cluster.sh up first"; exit 1; }
  import_everywhere "$(node_count)" "$@"
}

nodes_cmd() { local i n; n=$(node_count); for ((i = 0; i < n; i++)); do node_name "$i"; done; }
