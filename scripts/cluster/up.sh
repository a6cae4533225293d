# shellcheck shell=bash
# scripts/cluster.sh up: the machine claimed, then the host network, the cgroups, each node's
# containerd, the control plane, the nodes' kubelets and the host daemons, the gang scheduler
# and the NetworkPolicy controller (netpol.sh), each waited for. The configurations are
# rendered from templates/. Sourced; not run.

up() {
  local t0=$SECONDS problem other nodes=1 i
  while (($#)); do
    case $1 in
      --nodes) [[ ${2:-} =~ ^[0-9]+$ ]] && (($2 >= 1 && $2 <= MAX_NODES)) ||
                 { say "--nodes needs a number of nodes from 1 to $MAX_NODES (got '${2:-}')"; exit 2; }
               nodes=$((10#$2)); shift 2 ;;
      --nodes=*) set -- --nodes "${1#--nodes=}" "${@:2}" ;;
      *) say "up: unknown argument '$1' (up [--nodes N])"; exit 2 ;;
    esac
  done
  preflight
  if [[ -n $(ls -A "$RUN/pids" 2>/dev/null) ]]; then
    local dead=() have; have=$(node_count)
    for d in $(all_daemons); do alive "$d" || dead+=("$d"); done
    ((have == nodes)) || { say "up with $have node(s) already; to have $nodes, run scripts/cluster.sh down first"; exit 1; }
    ((${#dead[@]} == 0)) && { say "already up with $have node(s) (state $STATE); KUBECONFIG=$KUBECONFIG_PATH"; exit 0; }
    say "partly up (${dead[*]} not running); run scripts/cluster.sh down first"; exit 1
  fi
  other=$(holder)
  [[ -z $other ]] || { say "another cluster holds this machine (state $other); stop it with LOCKSTEP_CLUSTER_DIR=$other scripts/cluster.sh down"; exit 5; }
  [[ ! -d $(pids_cgroup) ]] || { say "cgroup $(pids_cgroup) exists: a cluster was not torn down; run scripts/cluster.sh down (with its LOCKSTEP_CLUSTER_DIR)"; exit 5; }
  problem=$(ports_in_use "$nodes")
  [[ -z $problem ]] || { say "ports in use: $problem(another Kubernetes on this machine? \`ss -ltnp\` names the holder)"; exit 5; }
  ! netpol_queue_bound || { say "NFQUEUE $NETPOL_QUEUE is bound by another program (/proc/net/netfilter/nfnetlink_queue; another NetworkPolicy controller?)"; exit 5; }

  # Claim the machine: the bridge, named after this state directory, is what other clusters'
  # up and down look at (two ups at once: only one makes it).
  if ! ip link add "$BRIDGE" type bridge 2>/dev/null; then
    say "another cluster holds this machine (state $(holder)); stop it with LOCKSTEP_CLUSTER_DIR=$(holder) scripts/cluster.sh down"
    exit 5
  fi
  exec 3>&1 4>&2
  trap 'fail "interrupted" "" 130' INT TERM
  trap 'fail "an unexpected error (line $LINENO)"' EXIT
  ip link set "$BRIDGE" alias "$STATE"
  local ip; ip=$(node_ip)
  mkdir -p "$RUN"/{pids,logs,config}
  echo "$nodes" > "$RUN/nodes"
  for ((i = 0; i < nodes; i++)); do mkdir -p "$(node_dir "$i")"/{cni,kubelet,pod-logs,volume-plugins} "$(node_store "$i")"; done
  save_host_state
  make_pki "$ip" "$nodes"
  local c
  for c in $CLIENTS $(for ((i = 0; i < nodes; i++)); do node_client "$i"; done); do kubeconfig "$c" "$RUN/config/$c.kubeconfig"; done
  cp "$RUN/config/admin.kubeconfig" "$KUBECONFIG_PATH"
  say "certificates and kubeconfigs ready ($((SECONDS - t0)) s)"

  host_network_up "$nodes"
  host_cgroups_up "$nodes"
  for ((i = 0; i < nodes; i++)); do containerd_up "$i"; done
  for ((i = 0; i < nodes; i++)); do wait_for "containerd of $(node_name "$i")" 30 "$(node_daemon containerd "$i")" ctr_on "$i" version; done
  import_everywhere "$nodes" "$CLUSTER_IMAGES/pause.tar" "$CLUSTER_IMAGES/nettest.tar" || fail "the cluster's images could not be imported" containerd
  say "containerd ready on $nodes node(s), images imported ($((SECONDS - t0)) s)"
  control_plane_up
  say "etcd and kube-apiserver ready ($((SECONDS - t0)) s)"
  node_up "$ip" "$nodes"
  gang_scheduler_up   # after the nodes' daemons: its CRD and RBAC delay none of them
  netpol_up           # the same; it is waited for last
  for ((i = 0; i < nodes; i++)); do
    wait_for "node $(node_name "$i") Ready" 120 "$(node_daemon kubelet "$i")" node_ready "$(node_name "$i")"
  done
  say "$( ((nodes == 1)) && echo "node $NODE_NAME" || echo "$nodes nodes") Ready ($((SECONDS - t0)) s)"
  wait_for "the default ServiceAccount" 60 kube-controller-manager kubectl_ -n default get serviceaccount default
  wait_for "the kube-root-ca.crt ConfigMap" 60 kube-controller-manager kubectl_ -n default get configmap kube-root-ca.crt
  wait_for "CoreDNS ready" 60 coredns curl -sf "http://127.0.0.1:$DNS_READY_PORT/ready"
  # /readyz includes the scheduler's informers synced, PodGroups among them: a config or RBAC
  # mistake shows here, not as gang pods Pending for ever. (Its serving certificate is a
  # self-signed one made in memory, hence -k; the health paths need no credentials.)
  wait_for "the gang scheduler ready" 60 kube-scheduler-cosched curl -skf "https://127.0.0.1:$GANG_SCHEDULER_PORT/readyz"
  netpol_ready
  say "NetworkPolicy controller ready: $NETPOL_HOW ($((SECONDS - t0)) s)"
  trap - INT TERM EXIT
  date +%s > "$RUN/up-since"
  say "up in $((SECONDS - t0)) s: export KUBECONFIG=$KUBECONFIG_PATH"
}

node_ready() {
  [[ $(kubectl_ get node "${1:-$NODE_NAME}" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}

# save_host_state: what down restores and check-clean compares with.
save_host_state() {
  local s p
  : > "$RUN/sysctl.orig"
  for s in $SYSCTLS; do
    [[ -e /proc/sys/${s//.//} ]] && echo "$s=$(sysctl -n "$s")" >> "$RUN/sysctl.orig"
  done
  : > "$RUN/outside.orig"
  for p in $OUTSIDE_DIRS; do [[ -e $p ]] && echo "$p" >> "$RUN/outside.orig"; done
  { echo "# the host before the last up, $(date)"; cat "$RUN/sysctl.orig"; sed 's/^/existed /' "$RUN/outside.orig"; } > "$BASELINE"
  touch "$STATE/up-marker"
}

# host_network_up N: every node's bridge, up before its first pod (the first node's was made
# by up's claim), with the gateway address, so the host routes between the nodes' subnets;
# each node's CNI configuration (its bridge, its subnet, its own IP allocations:
# templates/cni.conflist).
# shellcheck disable=SC2034  # render reads its variables by name
host_network_up() {
  local i bridge dir cidr gateway
  sysctl -qw net.ipv4.ip_forward=1
  ip addr add "$DNS_IP/32" dev lo
  for ((i = 0; i < $1; i++)); do
    bridge=$(node_bridge "$i") dir=$(node_dir "$i") cidr=$(node_cidr "$i") gateway=$(node_gateway "$i")
    if ((i > 0)); then ip link add "$bridge" type bridge && ip link set "$bridge" alias "$STATE"; fi
    ip link set "$bridge" up
    render cni.conflist "$dir/cni/10-$CNI_NETWORK.conflist" CNI_NETWORK bridge cidr gateway dir
  done
}

# containerd_up I: node I's containerd (started; up waits for it), configured by
# templates/containerd.toml.
# shellcheck disable=SC2034  # render reads its variables by name
containerd_up() {
  local i=$1 dir store sock; dir=$(node_dir "$1") store=$(node_store "$1") sock=$(node_sock "$1")
  local name; name=$(node_daemon containerd "$i")
  render containerd.toml "$RUN/config/$name.toml" store dir sock PAUSE_IMAGE
  START_NODE=$i start "$name" containerd --config "$RUN/config/$name.toml"
}

# import_images I TAR...: into node I's image store, skipping archives imported unchanged.
import_images() {
  local i=$1 tar mark key; shift
  for tar in "$@"; do
    [[ -f $tar ]] || { say "no such image archive: $tar"; return 1; }
    mark="$(node_store "$i")/.imported-$(basename "$tar" .tar)"
    key="$(cd "$(dirname "$tar")" && pwd)/$(basename "$tar") $(stat -c '%s %Y' "$tar")"
    [[ $(cat "$mark" 2>/dev/null) == "$key" ]] && continue
    local t=$SECONDS
    ctr_on "$i" images import --no-unpack=false "$tar" >/dev/null || { say "ctr could not import $tar into $(node_name "$i")"; return 1; }
    echo "$key" > "$mark"
    say "  imported $(basename "$tar") into $(node_name "$i") ($((SECONDS - t)) s)"
  done
}

# import_everywhere N TAR...: into the image store of every node (each its own: nothing is
# pulled), the nodes at the same time.
import_everywhere() {
  local n=$1 i pids=() failed=0; shift
  for ((i = 0; i < n; i++)); do import_images "$i" "$@" & pids+=($!); done
  for i in "${pids[@]}"; do wait "$i" || failed=1; done
  return $failed
}

control_plane_up() {
  start etcd "$K8S_BIN/etcd" --name=lockstep --data-dir="$RUN/etcd" \
    --listen-client-urls="http://127.0.0.1:$ETCD_PORT" --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="lockstep=http://127.0.0.1:$ETCD_PEER_PORT" --listen-metrics-urls= \
    --unsafe-no-fsync=true --log-level=warn
  # --kubelet-preferred-address-types: kubectl logs and exec reach the kubelet at the node's
  # address, which its serving certificate names.
  start kube-apiserver "$K8S_BIN/kube-apiserver" --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address=0.0.0.0 --advertise-address="$(node_ip)" --secure-port="$API_PORT" --cert-dir="$RUN/apiserver" \
    --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" --client-ca-file="$PKI/ca.crt" \
    --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$PKI/ca.crt" --kubelet-preferred-address-types=InternalIP,Hostname \
    --authorization-mode=Node,RBAC --allow-privileged=true \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" --enable-priority-and-fairness=false --profiling=false --v=1
  wait_for "kube-apiserver /readyz" 120 kube-apiserver kubectl_ get --raw /readyz
}

# start_kubelet I IP: node I's kubelet.
start_kubelet() {
  local i=$1 name; name=$(node_daemon kubelet "$1")
  START_NODE=$i start "$name" "$K8S_NODE_BIN/kubelet" --config="$RUN/config/$name.yaml" \
    --kubeconfig="$RUN/config/$(node_client "$i").kubeconfig" --root-dir="$(node_dir "$i")/kubelet" \
    --hostname-override="$(node_name "$i")" --node-ip="$2" --v=1
}

# kubelet_up I: node I's kubelet started again (after `kubelet stop`, `node poweron`), until healthy.
kubelet_up() {
  start_kubelet "$1" "$(node_ip)"
  wait_for "the kubelet of $(node_name "$1")" 60 "$(node_daemon kubelet "$1")" curl -sf "http://127.0.0.1:$(node_healthz_port "$1")/healthz"
}

# user_role USER RULE...: the YAML of a ClusterRole named USER holding the RULEs (one rule, in
# flow style, each), bound to the User USER: what each host daemon reads the API as
# (templates/user-role.yaml).
# shellcheck disable=SC2034  # render reads its variables by name
user_role() {
  local user=$1 rules rule; shift
  rules=$(for rule in "$@"; do printf -- '- %s\n' "$rule"; done)
  render user-role.yaml - user rules
}

# node_up IP N: CoreDNS, the N kubelets, the scheduler, the controller manager, kube-proxy.
# shellcheck disable=SC2034  # render reads its variables by name
node_up() {
  local ip=$1 nodes=$2 cfg=$RUN/config i
  # CoreDNS runs on the host, not as a pod: it reads the API as the user lockstep:coredns.
  user_role lockstep:coredns '{apiGroups: [""], resources: [endpoints, services, pods, namespaces], verbs: [list, watch]}' \
    '{apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}' | kubectl_ apply -f - >/dev/null
  render Corefile "$cfg/Corefile" DNS_IP DNS_READY_PORT cfg
  start coredns "$COREDNS_BIN/coredns" -conf "$cfg/Corefile"

  # The kubelets (templates/kubelet.yaml): cgroupfs on cgroup v1; every path one would
  # otherwise write outside its root directory (pod logs, volume plugins) under its node's
  # directory in run/; no iptables chains of its own; image garbage collection off, since
  # images are imported, not pulled. Each has its own ports (node_port), containerd, cgroup
  # and certificates.
  for ((i = 0; i < nodes; i++)); do
    local dir port healthz_port client sock cgroup cidr
    dir=$(node_dir "$i") port=$(node_port "$i") healthz_port=$(node_healthz_port "$i") client=$(node_client "$i")
    sock=$(node_sock "$i") cgroup=$(node_cgroup "$i") cidr=$(node_cidr "$i")
    render kubelet.yaml "$cfg/$(node_daemon kubelet "$i").yaml" ip port healthz_port PKI client sock cgroup DNS_IP cidr dir
    start_kubelet "$i" "$ip"
  done
  start kube-scheduler "$K8S_NODE_BIN/kube-scheduler" --kubeconfig="$cfg/kube-scheduler.kubeconfig" \
    --authentication-kubeconfig="$cfg/kube-scheduler.kubeconfig" --authorization-kubeconfig="$cfg/kube-scheduler.kubeconfig" \
    --leader-elect=false --bind-address=127.0.0.1 --v=1
  start kube-controller-manager "$K8S_NODE_BIN/kube-controller-manager" --kubeconfig="$cfg/kube-controller-manager.kubeconfig" \
    --authentication-kubeconfig="$cfg/kube-controller-manager.kubeconfig" --authorization-kubeconfig="$cfg/kube-controller-manager.kubeconfig" \
    --leader-elect=false --bind-address=127.0.0.1 --use-service-account-credentials=true \
    --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
    --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" --allocate-node-cidrs=false \
    --flex-volume-plugin-dir="$RUN/volume-plugins" \
    --controllers='*,-cloud-node-lifecycle-controller,-service-lb-controller,-node-route-controller' --v=1
  # kube-proxy (templates/kube-proxy.yaml): ClusterIP Services, above all kubernetes.default
  # (10.96.0.1) for in-cluster clients. Conntrack limits and timeouts left as the host has them.
  render kube-proxy.yaml "$cfg/kube-proxy.yaml" cfg CLUSTER_CIDR NODE_NAME ip
  start kube-proxy "$K8S_NODE_BIN/kube-proxy" --config="$cfg/kube-proxy.yaml" --v=1
}

# gang_scheduler_up: the second scheduler, for pods with schedulerName scheduler-plugins-scheduler
# (what Lockstep sets from spec.scheduling.schedulerName): Coscheduling holds the pods of a
# PodGroup (label scheduling.x-k8s.io/pod-group) at Permit until minMember of them have a
# place, then binds them together, so a gang never half-starts. The plugins' PodGroup
# controller is not run: the plugin needs only the PodGroup's spec, and its status stays empty.
gang_scheduler_up() {
  local cfg=$RUN/config user=lockstep:kube-scheduler-cosched
  # The PodGroup CRD exactly as this scheduler-plugins version generates it, and RBAC for the
  # user of the scheduler's client certificate (templates/gang-scheduler-rbac.yaml):
  # kube-scheduler's own roles (what the first scheduler has as system:kube-scheduler; the
  # kube-system Role lets delegated authentication read the client CA), plus reading
  # PodGroups, which is all Coscheduling does with them (no writes; no ElasticQuotas: those
  # are CapacityScheduling's).
  { user_role "$user" '{apiGroups: [scheduling.x-k8s.io], resources: [podgroups], verbs: [get, list, watch]}'
    render gang-scheduler-rbac.yaml - user; } |
    kubectl_ apply -f "$ROOT/tests/cluster/cosched/podgroup-crd.yaml" -f - >/dev/null
  # Served before the scheduler starts: its PodGroup informer then syncs at once instead of
  # backing off on a 404.
  kubectl_ wait --for=condition=Established --timeout=30s crd/podgroups.scheduling.x-k8s.io >/dev/null ||
    fail "the PodGroup CRD was not established within 30 s" kube-apiserver
  # Coscheduling (templates/kube-scheduler-cosched.yaml) sorts the queue (a group's pods kept
  # together; a profile has one queueSort, so the default's is off) and, through multiPoint,
  # runs at PreFilter, PostFilter, Permit and Reserve beside the default plugins.
  # permitWaitingTimeSeconds: how long the first pods of a gang wait at Permit, holding their
  # place, for the rest; 30 s lets the operator create a job's pods on a busy 2-core machine,
  # and a gang that cannot fit gives its place back within that (a PodGroup's
  # spec.scheduleTimeoutSeconds overrides it). One replica: no leader election.
  render kube-scheduler-cosched.yaml "$cfg/kube-scheduler-cosched.yaml" cfg GANG_SCHEDULER_NAME
  start kube-scheduler-cosched "$SCHEDULER_PLUGINS_BIN/kube-scheduler-cosched" --config="$cfg/kube-scheduler-cosched.yaml" \
    --authentication-kubeconfig="$cfg/kube-scheduler-cosched.kubeconfig" --authorization-kubeconfig="$cfg/kube-scheduler-cosched.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$GANG_SCHEDULER_PORT" --v=1
}
