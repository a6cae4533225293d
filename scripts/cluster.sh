#!/usr/bin/env bash
# A real Kubernetes of one or more nodes on this machine, without Docker: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kube-proxy, CoreDNS, and per node a kubelet with its
# own containerd + runc, CNI bridge and pod subnet, a second scheduler for gang scheduling (kube-scheduler with the
# Coscheduling plugin of scheduler-plugins, named scheduler-plugins-scheduler, with the
# PodGroup CRD), and a NetworkPolicy controller (kube-network-policies), all of the versions
# scripts/versions.env pins (scripts/setup.sh builds and caches them). Pods really run, and
# NetworkPolicies are enforced; see docs/development.md, "Real-node cluster".
#
#   scripts/cluster.sh up [--nodes N]  start it with N nodes (default 1, at most 8; about 12 s
#                                    for one); says "already up" when it is
#   scripts/cluster.sh down          stop it and remove all it made outside its state directory
#   scripts/cluster.sh status        what runs, the kubeconfig, the node, memory
#   scripts/cluster.sh import TAR... load image archives (docker or OCI) into the node
#   scripts/cluster.sh kubelet stop|start [NODE]   a node's kubelet alone (a node agent's
#                                    outage; pods run on); NODE defaults to the first
#   scripts/cluster.sh node freeze|thaw|poweroff|poweron NODE   node faults (docs/development.md,
#                                    "Several nodes and their faults")
#   scripts/cluster.sh nodes         the nodes' names, one a line (what up made)
#   scripts/cluster.sh check-clean   list anything a cluster left on this machine (exit 1 if any)
#   scripts/cluster.sh preflight     can this machine run it, and is everything set up? (0, 3 or 4)
#   scripts/cluster.sh purge         down, then delete the state directory (certificates, images)
#
# State: $LOCKSTEP_CLUSTER_DIR, default ~/.cache/lockstep/cluster; the admin kubeconfig is
# $LOCKSTEP_CLUSTER_DIR/kubeconfig. Certificates and the image store survive `down`; etcd,
# logs and everything of the running cluster live in $LOCKSTEP_CLUSTER_DIR/run and do not.
# One cluster runs per machine: interfaces, cgroups, ports and the DNS address are fixed.
# Nodes share the machine's network namespace and address; each has its own kubelet (own
# ports, root directory, cgroup), containerd (own image store and state), bridge lockstepI and
# pod subnet 10.244.I.0/24; pods of different nodes reach each other by the host's routes
# between the bridges. The first node's paths and names are those of the one-node cluster.
#
# Exit codes: 0 done (status: up); 1 failed (status: partly up); 2 bad usage; 3 this machine
# cannot run it (not root, cgroup v2, no overlayfs; the reason is printed); 4 a set-up product
# is missing (run scripts/setup.sh); 5 another cluster holds the machine; 6 (status) down.
set -euo pipefail
source "$(dirname "$0")/common.sh"

STATE=$(realpath -m "${LOCKSTEP_CLUSTER_DIR:-$CACHE/cluster}")
RUN=$STATE/run                  # one running cluster: removed by down
PKI=$STATE/pki                  # kept: kubeconfigs stay valid across down/up
CTRD_ROOT=$STATE/containerd     # kept: the image store
CTRD_SOCK=$RUN/containerd/containerd.sock
KUBECONFIG_PATH=$STATE/kubeconfig
BASELINE=$STATE/host-baseline   # the host as `up` found it, for check-clean

# Machine-wide names: one cluster at a time. NODE_NAME, BRIDGE: the first node's
# (node_* below give every node's).
NODE_NAME=lockstep-node
BRIDGE=lockstep0
MAX_NODES=8
CLUSTER_CIDR=10.244.0.0/16     # every node's pod subnet (kube-proxy, the NetworkPolicy queue)
CNI_NETWORK=lockstep-pods
CGROUP=lockstep-cluster         # in every cgroup v1 hierarchy; daemons/ and the kubelet's kubepods/
DNS_IP=169.254.25.10            # CoreDNS, on lo: this kernel has no dummy-interface driver
SERVICE_CIDR=10.96.0.0/16 API_SERVICE_IP=10.96.0.1
API_PORT=16443 ETCD_PORT=12379 ETCD_PEER_PORT=12380 DNS_READY_PORT=18181
# The gang scheduler's secure port (healthz, readyz, metrics): next to kube-scheduler's 10259;
# 10258 is cloud-controller-manager's by convention, 10260 no Kubernetes component's.
GANG_SCHEDULER_PORT=10260
# The NetworkPolicy controller's queue, nftables table, iptables chain and metrics port
# (NETPOL_*): scripts/common.sh, which the tests read too.
# Below the ephemeral range, so the test control plane's free loopback ports never collide.
# (Node I's kubelet: node_ports.)
PORTS="$API_PORT $ETCD_PORT $ETCD_PEER_PORT $DNS_READY_PORT 10249 10256 10257 10259 $GANG_SCHEDULER_PORT $NETPOL_METRICS_PORT"
# The daemons every cluster runs once; each node adds its containerd and kubelet (node_daemons).
SHARED_DAEMONS="etcd kube-apiserver coredns kube-scheduler kube-scheduler-cosched kube-controller-manager kube-proxy kube-network-policies"
# One client certificate and kubeconfig each (make_pki, up); node I's kubelet has its own too.
CLIENTS="admin kube-scheduler kube-controller-manager kube-proxy coredns kube-scheduler-cosched kube-network-policies"
# The gang scheduler: pods whose spec.schedulerName is this are placed by it, and it places
# nothing else. The name scheduler-plugins' own Helm chart gives its second scheduler, which
# examples/gpu.yaml names. (SCHEDULER_PLUGINS_BIN: scripts/common.sh.)
GANG_SCHEDULER_NAME=scheduler-plugins-scheduler
# Directories outside the state directory that the kubelet, containerd and the CNI plugins
# use whatever they are told (deepest first); `down` removes what the cluster made there.
OUTSIDE_DIRS="/run/containerd/s /run/containerd/fifo /run/containerd /var/lib/cni/results /var/lib/cni
/var/log/containers /var/log/pods /var/lib/kubelet/device-plugins /var/lib/kubelet /run/netns
/usr/libexec/kubernetes/kubelet-plugins/volume/exec /usr/libexec/kubernetes/kubelet-plugins/volume
/usr/libexec/kubernetes/kubelet-plugins /usr/libexec/kubernetes /opt/containerd/bin /opt/containerd/lib
/opt/containerd /etc/cni/net.d /etc/cni /opt/cni/bin /opt/cni"
# What the kubelet and kube-proxy tune; restored by down.
SYSCTLS="net.ipv4.ip_forward vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.bridge.bridge-nf-call-iptables
net.ipv4.conf.all.route_localnet net.netfilter.nf_conntrack_max"

say() { log "cluster: $*"; }
ctr_() { ctr --address "$CTRD_SOCK" -n k8s.io "$@"; }
ctr_on() { local i=$1; shift; ctr --address "$(node_sock "$i")" -n k8s.io "$@"; }   # node I's containerd
kubectl_() { kubectl --kubeconfig "$KUBECONFIG_PATH" "$@"; }
# running PID: alive and not a zombie (the daemons' parent is whatever reaps orphans here, and
# that may take its time).
running() { local st; st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) && [[ ${st:0:1} != Z ]]; }
alive() { [[ -f $RUN/pids/$1 ]] && running "$(cat "$RUN/pids/$1")"; }
cgroup_mounts() { awk '$3 == "cgroup" { print $2 }' /proc/self/mounts; }
# runc also makes the pods' cgroups in a cgroup v2 hierarchy mounted beside v1 ("hybrid").
all_cgroup_mounts() { awk '$3 == "cgroup" || $3 == "cgroup2" { print $2 }' /proc/self/mounts; }
pids_cgroup() { echo "$(awk '$3 == "cgroup" && $4 ~ /(^|,)pids(,|$)/ { print $2 }' /proc/self/mounts | head -1)/$CGROUP"; }
node_ip() { ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p'; }

# --- nodes ------------------------------------------------------------------------------------
# Node I (0-based): the first keeps the one-node cluster's names and paths.
node_count() { cat "$RUN/nodes" 2>/dev/null || echo 1; }
node_name() { if (($1 == 0)); then echo "$NODE_NAME"; else echo "$NODE_NAME-$1"; fi; }
node_bridge() { echo "lockstep$1"; }
node_cidr() { echo "10.244.$1.0/24"; }
node_gateway() { echo "10.244.$1.1"; }
node_dir() { if (($1 == 0)); then echo "$RUN"; else echo "$RUN/node-$1"; fi; }       # its kubelet, pod logs, CNI
node_store() { if (($1 == 0)); then echo "$CTRD_ROOT"; else echo "$CTRD_ROOT-$1"; fi; }  # its image store (kept)
node_sock() { echo "$(node_dir "$1")/containerd/containerd.sock"; }
node_daemon() { if (($2 == 0)); then echo "$1"; else echo "$1-$2"; fi; }   # NAME I: run/pids/NAME[-I]
node_client() { node_daemon kubelet "$1"; }                                 # its certificate and kubeconfig
node_cgroup() { echo "$CGROUP/node-$1"; }    # in every hierarchy: daemons/ (containerd, kubelet, shims), kubepods/
# The kubelet's port and health port: node 0 the usual 10250 and 10248, node I 100*I above.
node_port() { echo $((10250 + 100 * $1)); }
node_healthz_port() { echo $((10248 + 100 * $1)); }
node_daemons() { local i; for ((i = 0; i < $1; i++)); do echo "$(node_daemon containerd "$i") $(node_daemon kubelet "$i")"; done; }
all_daemons() { echo "$(node_daemons "$(node_count)") $SHARED_DAEMONS"; }
# node_index NAME: the index of the node called NAME (exit 1 if none).
node_index() {
  local i n; n=$(node_count)
  for ((i = 0; i < n; i++)); do [[ $(node_name "$i") == "$1" ]] && { echo "$i"; return 0; }; done
  return 1
}

# --- preflight ----------------------------------------------------------------------------
# host_problem: why this machine cannot run the cluster at all (empty when it can).
host_problem() {
  [[ $(id -u) -eq 0 ]] || { echo "it needs root (containerd, the kubelet and the CNI bridge manage namespaces, mounts and cgroups)"; return; }
  [[ -n $(cgroup_mounts) ]] || { echo "no cgroup v1 hierarchy is mounted (cgroup v2 alone is not supported by scripts/cluster.sh yet)"; return; }
  [[ -d $(dirname "$(pids_cgroup)") && $(pids_cgroup) != /$CGROUP ]] || { echo "the cgroup v1 pids controller is not mounted"; return; }
  grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null || { echo "the kernel has no overlayfs (containerd's snapshotter)"; return; }
  [[ -n $(node_ip) ]] || { echo "no IPv4 route to take the node address from"; return; }
  unshare --net --mount --pid --fork true 2>/dev/null || { echo "cannot create namespaces (unshare --net --mount --pid failed)"; return; }
  # The NetworkPolicy controller judges packets through nfnetlink_queue (NFQUEUE).
  [[ -e /proc/net/netfilter/nfnetlink_queue ]] || modprobe nfnetlink_queue 2>/dev/null ||
    { echo "the kernel has no nfnetlink_queue (NFQUEUE), which the NetworkPolicy controller needs"; return; }
}

# setup_problem: a product of scripts/setup.sh that is missing (empty when all are there).
setup_problem() {
  local b
  for b in "$K8S_BIN/etcd" "$K8S_BIN/kube-apiserver" "$K8S_NODE_BIN/kubelet" "$K8S_NODE_BIN/kube-scheduler" \
           "$K8S_NODE_BIN/kube-controller-manager" "$K8S_NODE_BIN/kube-proxy" "$COREDNS_BIN/coredns" \
           "$SCHEDULER_PLUGINS_BIN/kube-scheduler-cosched" "$NETPOL_BIN/kube-network-policies" \
           "$TOOLS_BIN/kubectl" "$CLUSTER_IMAGES/pause.tar" "$CLUSTER_IMAGES/nettest.tar"; do
    [[ -e $b ]] || { echo "$b is missing; run scripts/setup.sh"; return; }
  done
  for b in containerd containerd-shim-runc-v2 runc ctr iptables; do
    command -v "$b" >/dev/null || { echo "$b is not installed; run scripts/setup.sh (Debian: $DEBIAN_CLUSTER_PACKAGES)"; return; }
  done
  [[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback ]] ||
    { echo "the CNI plugins are not in /usr/lib/cni; run scripts/setup.sh (Debian: containernetworking-plugins)"; return; }
}

# holder: the state directory of another cluster that holds this machine (empty when none).
holder() {
  local other
  other=$(ip -o link show "$BRIDGE" 2>/dev/null | sed -n 's/.* alias \(.*\)$/\1/p')
  [[ -n $other && $other != "$STATE" ]] && echo "$other"
  return 0
}

ports_in_use() {
  local p i
  for p in $PORTS $(for ((i = 0; i < ${1:-1}; i++)); do echo "$(node_port "$i") $(node_healthz_port "$i")"; done); do
    [[ -n $(ss -Hltn "sport = :$p" 2>/dev/null) ]] && echo -n "$p "
  done
  [[ -n $(ss -Hlun "src $DNS_IP" 2>/dev/null) ]] && echo -n "$DNS_IP:53 "
  return 0
}

# --- certificates and kubeconfigs -----------------------------------------------------------
# make_pki: a CA, serving certificates for the API server and kubelet, a client certificate
# per component, the ServiceAccount signing key (P-256 throughout: quick to make, and what
# Go's TLS and JWT signing accept). Kept across down/up; remade when the node address or the
# set of clients changes (a state directory from before a component was added has no
# certificate for it).
make_pki() {
  local ip=$1 nodes=$2 i key="$1 $NODE_NAME $2 $CLIENTS"
  [[ $(cat "$PKI/.for" 2>/dev/null) == "$key" ]] && return 0
  rm -rf "$PKI"; mkdir -p "$PKI"
  (
    cd "$PKI"
    ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
    openssl req -x509 $ec -keyout ca.key -out ca.crt -days 3650 -subj /CN=lockstep-cluster-ca 2>/dev/null
    openssl ecparam -name prime256v1 -genkey -noout -out sa.key
    openssl ec -in sa.key -pubout -out sa.pub 2>/dev/null
    # cert NAME SUBJECT [SANS]: a certificate signed by the CA; with SANS a server one too.
    cert() {
      if [[ -n ${3:-} ]]; then printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$3" > "$1.ext"
      else printf 'extendedKeyUsage=clientAuth\n' > "$1.ext"; fi
      openssl req -new $ec -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
      rm -f "$1.csr" "$1.ext"
    }
    cert apiserver /CN=kube-apiserver "IP:127.0.0.1,IP:$API_SERVICE_IP,IP:$ip,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    # Each node's kubelet: a serving certificate and a client one as system:node:NAME (the Node
    # authorizer lets a kubelet write only its own node and pods).
    for ((i = 0; i < nodes; i++)); do
      local name; name=$(node_name "$i")
      cert "$(node_client "$i")-serving" "/O=system:nodes/CN=system:node:$name" "IP:127.0.0.1,IP:$ip,DNS:$name,DNS:localhost"
      cert "$(node_client "$i")" "/O=system:nodes/CN=system:node:$name"
    done
    cert admin /O=system:masters/CN=lockstep-admin
    cert apiserver-kubelet-client /O=system:masters/CN=kube-apiserver-kubelet-client
    cert kube-scheduler /CN=system:kube-scheduler
    cert kube-controller-manager /CN=system:kube-controller-manager
    cert kube-proxy /CN=system:kube-proxy
    cert coredns /CN=lockstep:coredns
    cert kube-scheduler-cosched /CN=lockstep:kube-scheduler-cosched
    cert kube-network-policies /CN=lockstep:kube-network-policies
    chmod 600 ./*.key
  )
  echo "$key" > "$PKI/.for"
}

# kubeconfig NAME FILE: a kubeconfig for the client certificate NAME, with the data embedded
# so that the file works on its own.
kubeconfig() {
  local b64="base64 -w0"
  cat > "$2" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: lockstep
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $($b64 < "$PKI/ca.crt")
users:
- name: $1
  user:
    client-certificate-data: $($b64 < "$PKI/$1.crt")
    client-key-data: $($b64 < "$PKI/$1.key")
contexts:
- name: lockstep
  context: {cluster: lockstep, user: $1}
current-context: lockstep
EOF
  chmod 600 "$2"
}

# --- processes ------------------------------------------------------------------------------
# start NAME CMD...: a daemon in its own session (a Ctrl-C in the terminal later does not reach
# it) and in the cluster's cgroup (so down finds everything it forked, e.g. containerd's
# shims): the shared daemons/, or with START_NODE=I node I's daemons/; its pid in
# run/pids/NAME, its output in run/logs/NAME.log.
start() {
  local name=$1 cg; shift
  cg=$(pids_cgroup)/daemons
  [[ -z ${START_NODE:-} ]] || cg=$(dirname "$(pids_cgroup)")/$(node_cgroup "$START_NODE")/daemons
  setsid bash -c 'echo $$ > "$1"; echo $$ > "$2/cgroup.procs"; shift 2; exec "$@"' _ \
    "$RUN/pids/$name" "$cg" "$@" >> "$RUN/logs/$name.log" 2>&1 < /dev/null 3>&- 4>&- &
  for _ in $(seq 50); do [[ -s $RUN/pids/$name ]] && return 0; sleep 0.05; done
  fail "$name did not start" "$name"
}

# wait_for DESC SECONDS DAEMON CMD...: until CMD succeeds; fails early when DAEMON died.
wait_for() {
  local desc=$1 limit=$2 daemon=$3 start=$SECONDS next=10; shift 3
  until "$@" >/dev/null 2>&1; do
    alive "$daemon" || fail "$daemon exited while waiting for $desc" "$daemon"
    ((SECONDS - start < limit)) || fail "no $desc within $limit s" "$daemon"
    if ((SECONDS - start >= next)); then say "  waiting for $desc ($((SECONDS - start)) s)"; next=$((next + 10)); fi
    sleep 0.2
  done
}

# fail MESSAGE [DAEMON [EXIT_CODE]]: during up, says why with the end of DAEMON's log, keeps
# the logs, tears down, exits.
fail() {
  trap - INT TERM EXIT
  exec 1>&3 2>&4   # a trap runs inside the interrupted command's redirections (wait_for's >/dev/null)
  say "up failed: $1"
  if [[ -n ${2:-} && -f $RUN/logs/$2.log ]]; then
    echo "--- last lines of $2.log:"; tail -n 25 "$RUN/logs/$2.log"; echo "---"
  fi
  rm -rf "$STATE/failed-up-logs"; cp -r "$RUN/logs" "$STATE/failed-up-logs" 2>/dev/null || true
  say "logs kept in $STATE/failed-up-logs; tearing down"
  down >/dev/null
  exit "${3:-1}"
}

# --- up --------------------------------------------------------------------------------------
preflight() {
  local problem
  problem=$(host_problem); [[ -z $problem ]] || { say "this machine cannot run it: $problem"; exit 3; }
  problem=$(setup_problem); [[ -z $problem ]] || { say "$problem"; exit 4; }
  return 0
}

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
# each node's CNI configuration (its bridge, its subnet, its own IP allocations).
host_network_up() {
  local i bridge dir
  sysctl -qw net.ipv4.ip_forward=1
  ip addr add "$DNS_IP/32" dev lo
  for ((i = 0; i < $1; i++)); do
    bridge=$(node_bridge "$i") dir=$(node_dir "$i")
    if ((i > 0)); then ip link add "$bridge" type bridge && ip link set "$bridge" alias "$STATE"; fi
    ip link set "$bridge" up
    cat > "$dir/cni/10-$CNI_NETWORK.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "$CNI_NETWORK", "plugins": [
  {"type": "bridge", "bridge": "$bridge", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$(node_cidr "$i")", "gateway": "$(node_gateway "$i")"}]],
            "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$dir/cni-ipam"}}]}
EOF
  done
}

# host_cgroups_up N: the cluster's cgroup in every v1 hierarchy: daemons/ holds the shared
# daemons and what they fork; node-I/ each node's: its daemons/ (containerd, its shims, the
# kubelet) and kubepods/ (the kubelet's, under its cgroupRoot node-I), so that all of a node
# can be frozen or killed at once.
host_cgroups_up() {
  local h i d
  for h in $(cgroup_mounts); do
    for d in "$CGROUP" $(for ((i = 0; i < $1; i++)); do node_cgroup "$i"; done); do
      mkdir -p "$h/$d"
      if [[ -f $h/cpuset.cpus ]]; then   # a new cpuset is empty, and nothing can join an empty one
        cat "$h/cpuset.cpus" > "$h/$d/cpuset.cpus"; cat "$h/cpuset.mems" > "$h/$d/cpuset.mems"
      fi
    done
  done
  mkdir -p "$(pids_cgroup)/daemons"
  for ((i = 0; i < $1; i++)); do mkdir -p "$(dirname "$(pids_cgroup)")/$(node_cgroup "$i")/daemons"; done
}

# containerd_up I: node I's containerd (started; up waits for it).
containerd_up() {
  local i=$1 dir; dir=$(node_dir "$1")
  local name; name=$(node_daemon containerd "$i")
  cat > "$RUN/config/$name.toml" <<EOF
version = 2
root = "$(node_store "$i")"
state = "$dir/containerd"
# The opt plugin would create /opt/containerd; the other snapshotters are not used.
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$(node_sock "$i")"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # CAP_SYS_RESOURCE is not in the bounding set on these machines: runc fails on the
  # sandbox's oom_score_adj of -998 ("can't get final child's PID from pipe: EOF") unless
  # scores are clamped to containerd's own.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$dir/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/cni"
EOF
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

# kubelet_cmd stop|start [NODE]: a node's kubelet alone, as when it crashes or is upgraded on
# a real node. Its pods' containers run on under containerd meanwhile; the node turns NotReady
# once the node controller misses its heartbeats (about 40-50 s).
kubelet_cmd() {
  [[ -d $RUN ]] || { say "the cluster is not up"; exit 6; }
  local what=${1:-} node=${2:-$NODE_NAME} i
  i=$(node_index "$node") || { say "no node '$node' (nodes: $(nodes_cmd | tr '\n' ' '))"; exit 2; }
  local daemon; daemon=$(node_daemon kubelet "$i")
  case $what in
    stop) stop_daemons "$daemon"; say "kubelet of $node stopped (its pods keep running)" ;;
    start)
      alive "$daemon" && { say "kubelet of $node already runs"; return 0; }
      kubelet_up "$i"
      say "kubelet of $node started" ;;
    *) say "usage: scripts/cluster.sh kubelet stop|start [NODE]"; exit 2 ;;
  esac
}

# kubelet_up I: node I's kubelet started again (after `kubelet stop`, `node poweron`), until healthy.
kubelet_up() {
  start_kubelet "$1" "$(node_ip)"
  wait_for "the kubelet of $(node_name "$1")" 60 "$(node_daemon kubelet "$1")" curl -sf "http://127.0.0.1:$(node_healthz_port "$1")/healthz"
}

nodes_cmd() { local i n; n=$(node_count); for ((i = 0; i < n; i++)); do node_name "$i"; done; }

# user_role USER RULE...: the YAML of a ClusterRole named USER holding the RULEs (one rule, in
# flow style, each), bound to the User USER: what each host daemon reads the API as.
user_role() {
  local user=$1 rule; shift
  printf 'apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: "%s"}\nrules:\n' "$user"
  for rule in "$@"; do printf -- '- %s\n' "$rule"; done
  printf -- '---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: "%s"}\n' "$user"
  printf 'roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "%s"}\n' "$user"
  printf 'subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "%s"}]\n' "$user"
}

# node_up IP N: CoreDNS, the N kubelets, the scheduler, the controller manager, kube-proxy.
node_up() {
  local ip=$1 nodes=$2 cfg=$RUN/config i
  # CoreDNS runs on the host, not as a pod: it reads the API as the user lockstep:coredns.
  user_role lockstep:coredns '{apiGroups: [""], resources: [endpoints, services, pods, namespaces], verbs: [list, watch]}' \
    '{apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}' | kubectl_ apply -f - >/dev/null
  cat > "$cfg/Corefile" <<EOF
.:53 {
    bind $DNS_IP
    errors
    ready 127.0.0.1:$DNS_READY_PORT
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $cfg/coredns.kubeconfig lockstep
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }
    forward . /etc/resolv.conf
    cache 5
}
EOF
  start coredns "$COREDNS_BIN/coredns" -conf "$cfg/Corefile"

  # The kubelets: cgroupfs on cgroup v1; every path one would otherwise write outside its root
  # directory (pod logs, volume plugins) under its node's directory in run/; no iptables chains
  # of its own; image garbage collection off, since images are imported, not pulled. Each has
  # its own ports (node_port), containerd, cgroup and certificates.
  for ((i = 0; i < nodes; i++)); do
  local dir; dir=$(node_dir "$i")
  cat > "$cfg/$(node_daemon kubelet "$i").yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $ip
port: $(node_port "$i")
healthzBindAddress: 127.0.0.1
healthzPort: $(node_healthz_port "$i")
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $PKI/$(node_client "$i")-serving.crt
tlsPrivateKeyFile: $PKI/$(node_client "$i")-serving.key
containerRuntimeEndpoint: unix://$(node_sock "$i")
cgroupDriver: cgroupfs
cgroupRoot: /$(node_cgroup "$i")
failCgroupV1: false
failSwapOn: false
clusterDomain: cluster.local
clusterDNS: [$DNS_IP]
resolvConf: /etc/resolv.conf
podCIDR: $(node_cidr "$i")
podLogsDir: $dir/pod-logs
volumePluginDir: $dir/volume-plugins
maxPods: 110
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%"}
syncFrequency: 10s
fileCheckFrequency: 10s
nodeStatusUpdateFrequency: 10s
rotateCertificates: false
makeIPTablesUtilChains: false
EOF
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
  # kube-proxy: ClusterIP Services, above all kubernetes.default (10.96.0.1) for in-cluster
  # clients. Conntrack limits and timeouts left as the host has them.
  cat > "$cfg/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $cfg/kube-proxy.kubeconfig}
mode: iptables
clusterCIDR: $CLUSTER_CIDR
hostnameOverride: $NODE_NAME
bindAddress: $ip
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: [primary]
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
iptables: {localhostNodePorts: false}
EOF
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
  # user of the scheduler's client certificate: kube-scheduler's own roles (what the first
  # scheduler has as system:kube-scheduler; the kube-system Role lets delegated authentication
  # read the client CA), plus reading PodGroups, which is all Coscheduling does with them
  # (no writes; no ElasticQuotas: those are CapacityScheduling's).
  kubectl_ apply -f "$ROOT/tests/cluster/cosched/podgroup-crd.yaml" -f - >/dev/null <<EOF
$(user_role "$user" '{apiGroups: [scheduling.x-k8s.io], resources: [podgroups], verbs: [get, list, watch]}')
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "$user:kube-scheduler"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:kube-scheduler"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "$user"}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "$user:volume-scheduler"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:volume-scheduler"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "$user"}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: "$user:authentication-reader", namespace: kube-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: "extension-apiserver-authentication-reader"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "$user"}]
EOF
  # Served before the scheduler starts: its PodGroup informer then syncs at once instead of
  # backing off on a 404.
  kubectl_ wait --for=condition=Established --timeout=30s crd/podgroups.scheduling.x-k8s.io >/dev/null ||
    fail "the PodGroup CRD was not established within 30 s" kube-apiserver
  # Coscheduling sorts the queue (a group's pods kept together; a profile has one queueSort,
  # so the default's is off) and, through multiPoint, runs at PreFilter, PostFilter, Permit
  # and Reserve beside the default plugins. permitWaitingTimeSeconds: how long the first pods of a gang wait at
  # Permit, holding their place, for the rest; 30 s lets the operator create a job's pods on
  # a busy 2-core machine, and a gang that cannot fit gives its place back within that (a
  # PodGroup's spec.scheduleTimeoutSeconds overrides it). One replica: no leader election.
  cat > "$cfg/kube-scheduler-cosched.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection: {leaderElect: false}
clientConnection: {kubeconfig: $cfg/kube-scheduler-cosched.kubeconfig}
profiles:
- schedulerName: $GANG_SCHEDULER_NAME
  plugins:
    multiPoint:
      enabled: [{name: Coscheduling}]
    queueSort:
      enabled: [{name: Coscheduling}]
      disabled: [{name: "*"}]
  pluginConfig:
  - name: Coscheduling
    args: {permitWaitingTimeSeconds: 30}
EOF
  start kube-scheduler-cosched "$SCHEDULER_PLUGINS_BIN/kube-scheduler-cosched" --config="$cfg/kube-scheduler-cosched.yaml" \
    --authentication-kubeconfig="$cfg/kube-scheduler-cosched.kubeconfig" --authorization-kubeconfig="$cfg/kube-scheduler-cosched.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$GANG_SCHEDULER_PORT" --v=1
}

# netpol_up: the NetworkPolicy controller, kube-network-policies v0.8.0's controller with a main
# of ours (tests/gotools/netpol), a host process like the node's other daemons. It watches Pods,
# Namespaces and NetworkPolicies as the user lockstep:kube-network-policies (list and watch, as
# upstream's ClusterRole grants) and judges the first packet of every connection to or from a
# pod that the kernel hands it on NFQUEUE NETPOL_QUEUE; later packets of an admitted connection
# pass by conntrack. --fail-open: a packet it cannot judge (it is not running, its queue is
# full) passes, so that its crash or restart cannot cut every pod's connections in the other
# suites; isolation_in_cluster_test shows that it drops what a policy does not admit, and that
# it runs. --v=2 logs each judged packet with its pods and verdict (run/logs).
netpol_up() {
  local cfg=$RUN/config user=lockstep:kube-network-policies
  user_role "$user" '{apiGroups: [""], resources: [pods, namespaces], verbs: [list, watch]}' \
    '{apiGroups: [networking.k8s.io], resources: [networkpolicies], verbs: [list, watch]}' | kubectl_ apply -f - >/dev/null
  start kube-network-policies "$NETPOL_BIN/kube-network-policies" --kubeconfig="$cfg/kube-network-policies.kubeconfig" \
    --hostname-override="$NODE_NAME" --nfqueue-id="$NETPOL_QUEUE" --nftables-table="$NETPOL_TABLE" --fail-open \
    --metrics-bind-address="127.0.0.1:$NETPOL_METRICS_PORT" --v=2
}

netpol_queue_bound() {
  awk -v q="$NETPOL_QUEUE" '$1 == q { found = 1 } END { exit !found }' /proc/net/netfilter/nfnetlink_queue 2>/dev/null
}

# netpol_ready: once the controller has synced its informers it loads its nftables table, then
# binds its queue. Where the kernel refused the table's rules (it lacks nftables' `queue`
# expression, CONFIG_NFT_QUEUE, as the kernels of these machines do), iptables' NFQUEUE target
# (xt_NFQUEUE through nft_compat) puts the packets on the queue instead: every packet forwarded
# to or from a pod that is not part of an established connection, in the mangle table's FORWARD
# (bridged pod-to-pod traffic passes it: net.bridge.bridge-nf-call-iptables). The controller
# passes packets of pods that no policy selects. --queue-bypass: fail-open, as above.
# Sets NETPOL_HOW for up's progress line.
netpol_ready() {
  wait_for "the NetworkPolicy controller's queue $NETPOL_QUEUE" 60 kube-network-policies netpol_queue_bound
  if [[ -n $("$NETPOL_BIN/kube-network-policies" -show-table -nftables-table "$NETPOL_TABLE" 2>/dev/null) ]]; then
    NETPOL_HOW="kube-network-policies $KUBE_NETWORK_POLICIES_VERSION on nfqueue $NETPOL_QUEUE, through its nftables table inet $NETPOL_TABLE"
    return 0
  fi
  local q="-j NFQUEUE --queue-num $NETPOL_QUEUE --queue-bypass" err
  err=$( { iptables -t mangle -N "$NETPOL_CHAIN" &&
           iptables -t mangle -A "$NETPOL_CHAIN" -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN &&
           iptables -t mangle -A "$NETPOL_CHAIN" -d "$CLUSTER_CIDR" $q &&
           iptables -t mangle -A "$NETPOL_CHAIN" -s "$CLUSTER_CIDR" $q &&
           iptables -t mangle -A FORWARD -j "$NETPOL_CHAIN"; } 2>&1 ) ||
    fail "iptables could not add the NFQUEUE rules for the NetworkPolicy controller: $err" kube-network-policies
  NETPOL_HOW="kube-network-policies $KUBE_NETWORK_POLICIES_VERSION on nfqueue $NETPOL_QUEUE, through iptables mangle $NETPOL_CHAIN (the kernel refused its nftables rules)"
}

# netpol_cleanup: the controller's netfilter state, whatever way it ended (a SIGKILL leaves its table).
netpol_cleanup() {
  while iptables -t mangle -D FORWARD -j "$NETPOL_CHAIN" 2>/dev/null; do :; done
  iptables -t mangle -F "$NETPOL_CHAIN" 2>/dev/null && iptables -t mangle -X "$NETPOL_CHAIN" 2>/dev/null
  [[ -x $NETPOL_BIN/kube-network-policies ]] && "$NETPOL_BIN/kube-network-policies" -cleanup -nftables-table "$NETPOL_TABLE" >/dev/null 2>&1
  return 0
}

# --- down -------------------------------------------------------------------------------------
down() {
  local t0=$SECONDS other
  # Names, cgroups and interfaces are machine-wide: while another state directory's cluster
  # holds the machine, they are its, and only this state's own files go.
  other=$(holder)
  local recorded=()
  if [[ -n $other ]]; then
    mapfile -t recorded < <(ls "$RUN/pids" 2>/dev/null)
    stop_daemons "${recorded[@]}"
    rm -rf "$RUN"
    say "another cluster (state $other) holds this machine; removed only $RUN"
    return 0
  fi
  # 0. Frozen nodes thawed (a stopped process takes no SIGTERM), their packets let through.
  faults_cleanup
  local n i kubelets=() runtimes=(); n=$(node_count)
  for ((i = 0; i < n; i++)); do
    kubelets+=("$(node_daemon kubelet "$i")")
    runtimes+=("$(node_daemon containerd "$i")")
  done
  # 1. Control loops first, so nothing restarts containers; then the node agents.
  stop_daemons kube-controller-manager kube-scheduler kube-scheduler-cosched "${kubelets[@]}"
  # 2. Every container and sandbox (their shims exit once deleted).
  # Deleted, not just killed: the image store (and its container records) outlives down.
  for ((i = 0; i < n; i++)); do
    if [[ -S $(node_sock "$i") ]] && alive "$(node_daemon containerd "$i")"; then
      local ids
      ids=$(ctr_on "$i" tasks ls -q 2>/dev/null || true)
      [[ -z $ids ]] || ctr_on "$i" tasks delete --force $ids >/dev/null 2>&1 || true
      ids=$(ctr_on "$i" containers ls -q 2>/dev/null || true)
      [[ -z $ids ]] || ctr_on "$i" containers delete $ids >/dev/null 2>&1 || true
    fi
  done
  # The API server before etcd: stopped together, it may spend 10 s retrying a gone etcd.
  stop_daemons coredns kube-proxy kube-network-policies kube-apiserver
  stop_daemons etcd "${runtimes[@]}"
  mapfile -t recorded < <(ls "$RUN/pids" 2>/dev/null)
  stop_daemons "${recorded[@]}"   # anything else recorded (a daemon of an older layout)
  # 3. Whatever is left in the cluster's cgroup: shims, container processes.
  kill_cgroup
  # 4. Mounts under the state directory (netns pins, shm, rootfs, pod volumes), deepest first.
  unmount_under "$STATE"
  # 5. Network: veths still on the bridges, the bridges (every node's; the first, the claim,
  # last), the DNS address, iptables and nftables.
  local v b
  for b in $(our_bridges); do
    for v in $(ip -o link show master "$b" 2>/dev/null | awk -F': ' '{ print $2 }' | cut -d@ -f1); do ip link del "$v" 2>/dev/null || true; done
    [[ $b == "$BRIDGE" ]] || ip link del "$b" 2>/dev/null || true
  done
  ip link del "$BRIDGE" 2>/dev/null || true
  ip addr del "$DNS_IP/32" dev lo 2>/dev/null || true
  [[ -x $K8S_NODE_BIN/kube-proxy ]] && "$K8S_NODE_BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true
  # The kubelet's KUBE-FIREWALL (martian-packet drops), made even with makeIPTablesUtilChains off.
  local ipt
  for ipt in iptables ip6tables; do
    while "$ipt" -t filter -D INPUT -j KUBE-FIREWALL 2>/dev/null; do :; done
    while "$ipt" -t filter -D OUTPUT -j KUBE-FIREWALL 2>/dev/null; do :; done
    "$ipt" -t filter -F KUBE-FIREWALL 2>/dev/null && "$ipt" -t filter -X KUBE-FIREWALL 2>/dev/null || true
  done
  netpol_cleanup
  # 6. The host's sysctls as up found them; paths the cluster made outside its state directory.
  if [[ -f $RUN/sysctl.orig ]]; then
    local line
    while read -r line; do sysctl -qw "$line" 2>/dev/null || true; done < "$RUN/sysctl.orig"
  fi
  remove_outside_paths
  # 7. The cgroups, deepest first, and the running cluster's state.
  local h
  for h in $(all_cgroup_mounts); do
    if [[ -d $h/$CGROUP ]]; then find "$h/$CGROUP" -depth -type d -exec rmdir {} + 2>/dev/null || true; fi
  done
  rm -rf "$RUN"
  say "down in $((SECONDS - t0)) s"
}

# our_bridges: the bridges of this machine's cluster (lockstepN), the first node's last.
our_bridges() {
  ip -o link show type bridge 2>/dev/null | awk -F': ' '{ print $2 }' | cut -d@ -f1 | grep -E '^lockstep[0-9]+$' | grep -vx "$BRIDGE" || true
  echo "$BRIDGE"
}

# stop_daemons NAME...: TERM, up to 10 s, then KILL; only the pids this cluster recorded.
stop_daemons() {
  local name pid pids=()
  for name in "$@"; do
    [[ -f $RUN/pids/$name ]] || continue
    pid=$(cat "$RUN/pids/$name"); rm -f "$RUN/pids/$name"
    running "$pid" && kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
  done
  ((${#pids[@]})) || return 0
  for _ in $(seq 100); do
    local left=0
    for pid in "${pids[@]}"; do running "$pid" && left=1; done
    ((left)) || return 0
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
}

# kill_cgroup: SIGKILL every process in the cluster's pids cgroup until none is left.
kill_cgroup() {
  local cg; cg=$(pids_cgroup)
  [[ -d $cg ]] || return 0
  for _ in $(seq 50); do
    local procs
    procs=$(find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null)
    [[ -z $procs ]] && return 0
    kill -KILL $procs 2>/dev/null || true
    sleep 0.1
  done
  say "warning: processes in $cg survived SIGKILL: $(find "$cg" -name cgroup.procs -exec cat {} + | tr '\n' ' ')"
}

# unmount_under DIR: every mount point under DIR, deepest first (lazily if busy).
unmount_under() {
  local m
  for _ in 1 2 3; do
    # /proc/self/mountinfo escapes spaces as \040; none of the cluster's paths have any.
    m=$(awk -v d="$1/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
    [[ -z $m ]] && return 0
    while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done <<< "$m"
  done
}

# remove_outside_paths: only the entries this cluster makes there, then the directories it
# made if they are empty: another containerd (scripts/images.sh runs one) may use them too.
remove_outside_paths() {
  local f id
  # containerd 1.6 puts its shims' sockets in /run/containerd/s whatever its state directory;
  # ours are those nobody listens on once our shims are gone.
  for f in /run/containerd/s/*; do
    [[ -S $f ]] || continue
    ss -Hxl 2>/dev/null | grep -qF " $f " || rm -f "$f"
  done
  for f in /var/lib/cni/results/"$CNI_NETWORK"-*; do
    [[ -e $f ]] || continue
    id=${f#/var/lib/cni/results/"$CNI_NETWORK"-}; id=${id%-*}
    rm -f "$f" /var/lib/cni/results/cni-loopback-"$id"-lo
  done
  for f in /var/log/containers/*; do   # the kubelet's links to the pod logs under run/
    [[ -L $f && $(readlink "$f") == "$STATE"/* ]] && rm -f "$f"
  done
  rm -f /var/lib/kubelet/device-plugins/kubelet.sock   # a path the kubelet does not let one change
  local d
  for d in $OUTSIDE_DIRS; do
    [[ -d $d ]] || continue
    grep -qx "$d" "$RUN/outside.orig" 2>/dev/null && continue   # it was there before up
    rmdir "$d" 2>/dev/null || true
  done
}

# --- status, import, check-clean ------------------------------------------------------------
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

# --- node faults ----------------------------------------------------------------------------
# Note [Node faults]: what happens to a real node, made here to one node of the cluster while
# the others run on (tests/cluster/nodes_in_cluster_test.cpp; docs/development.md).
#   freeze    the node hangs (a kernel stall, a wedged host): its pod subnet's packets are
#             dropped in both directions (raw table, before conntrack: established connections
#             too), then every process of the node (kubelet, containerd, shims, containers) is
#             stopped with SIGSTOP. Peers see silence, not a reset; the node's heartbeats stop, so
#             the node controller marks it NotReady after its grace period.
#   thaw      the frozen node wakes: SIGCONT to all, its packets pass again. Its pods' processes
#             carry on from where they stopped, whatever happened meanwhile (fencing is theirs).
#   poweroff  the node loses power: its packets dropped (no reset ever comes back), then every
#             process of the node killed. What was in memory and its runtime state is lost.
#   poweron   the node boots again: what a reboot clears (the runtime's state, the kubelet's
#             tmpfs mounts, the pods' network namespaces) cleared, its packets pass, containerd
#             and the kubelet start; the kubelet finds its old pods gone and reports so.
# A node's processes are those in its cgroup node-I (Note in host_cgroups_up).
FAULT_CHAIN=LOCKSTEP-FAULTS

node_procs() { find "$(dirname "$(pids_cgroup)")/$(node_cgroup "$1")" -name cgroup.procs -exec cat {} + 2>/dev/null || true; }
node_daemons_of() { echo "$(node_daemon containerd "$1") $(node_daemon kubelet "$1")"; }

# fault_drop I / fault_pass I: node I's pod subnet's packets dropped / passed again.
fault_drop() {
  local cidr t; cidr=$(node_cidr "$1")
  iptables -t raw -N "$FAULT_CHAIN" 2>/dev/null || true
  for t in PREROUTING OUTPUT; do
    iptables -t raw -C "$t" -j "$FAULT_CHAIN" 2>/dev/null || iptables -t raw -I "$t" -j "$FAULT_CHAIN"
  done
  iptables -t raw -C "$FAULT_CHAIN" -s "$cidr" -j DROP 2>/dev/null || iptables -t raw -A "$FAULT_CHAIN" -s "$cidr" -j DROP
  iptables -t raw -C "$FAULT_CHAIN" -d "$cidr" -j DROP 2>/dev/null || iptables -t raw -A "$FAULT_CHAIN" -d "$cidr" -j DROP
}
fault_pass() {
  local cidr; cidr=$(node_cidr "$1")
  while iptables -t raw -D "$FAULT_CHAIN" -s "$cidr" -j DROP 2>/dev/null; do :; done
  while iptables -t raw -D "$FAULT_CHAIN" -d "$cidr" -j DROP 2>/dev/null; do :; done
}

# signal_node I SIG: SIG to every process of node I, until a pass finds no process it has not
# signalled (one forked meanwhile is caught by the next pass).
signal_node() {
  local i=$1 sig=$2 seen=" " p new
  for _ in 1 2 3 4 5; do
    new=0
    for p in $(node_procs "$i"); do
      [[ $seen == *" $p "* ]] && continue
      kill "-$sig" "$p" 2>/dev/null || true
      seen+="$p "; new=1
    done
    ((new)) || return 0
  done
}

node_cmd() {
  [[ -d $RUN/pids ]] || { say "the cluster is not up"; exit 6; }
  local what=${1:-} node=${2:-} i
  [[ -n $what && -n $node ]] || { say "usage: scripts/cluster.sh node freeze|thaw|poweroff|poweron NODE"; exit 2; }
  i=$(node_index "$node") || { say "no node '$node' (nodes: $(nodes_cmd | tr '\n' ' '))"; exit 2; }
  mkdir -p "$RUN/faults"
  local mark=$RUN/faults/$node was; was=$(cat "$mark" 2>/dev/null || true)
  case $what in
    freeze)
      [[ -z $was ]] || { say "$node is $was already"; exit 1; }
      fault_drop "$i"
      signal_node "$i" STOP
      echo frozen > "$mark"
      say "$node frozen: $(node_procs "$i" | wc -w) processes stopped, $(node_cidr "$i") dropped" ;;
    thaw)
      [[ $was == frozen ]] || { say "$node is not frozen"; exit 1; }
      signal_node "$i" CONT
      fault_pass "$i"
      rm -f "$mark"
      say "$node thawed" ;;
    poweroff)
      [[ -z $was || $was == frozen ]] || { say "$node is $was already"; exit 1; }
      fault_drop "$i"
      local _
      for _ in $(seq 50); do
        [[ -n $(node_procs "$i") ]] || break
        signal_node "$i" KILL; sleep 0.1
      done
      [[ -z $(node_procs "$i") ]] || { say "processes of $node survived SIGKILL: $(node_procs "$i" | tr '\n' ' ')"; exit 1; }
      local d; for d in $(node_daemons_of "$i"); do rm -f "$RUN/pids/$d"; done
      echo off > "$mark"
      say "$node powered off: every process killed, $(node_cidr "$i") dropped" ;;
    poweron)
      [[ $was == off ]] || { say "$node is not powered off"; exit 1; }
      local dir; dir=$(node_dir "$i")
      # What a reboot clears: mounts (tmpfs volumes, network namespace pins, root filesystems),
      # the runtime's state; the image store and the kubelet's directory stay.
      unmount_under "$dir/containerd"; unmount_under "$dir/kubelet"
      rm -rf "$dir/containerd" "$dir/runc"
      fault_pass "$i"
      rm -f "$mark"
      containerd_up "$i"
      wait_for "containerd of $node" 30 "$(node_daemon containerd "$i")" ctr_on "$i" version
      kubelet_up "$i"
      say "$node powered on" ;;
    *) say "usage: scripts/cluster.sh node freeze|thaw|poweroff|poweron NODE"; exit 2 ;;
  esac
}

# faults_cleanup: every node thawed and its packets passed; the chain gone (down).
faults_cleanup() {
  local cg; cg=$(pids_cgroup)
  if [[ -n $(ls -A "$RUN/faults" 2>/dev/null) ]]; then
    local p
    while read -r p; do kill -CONT "$p" 2>/dev/null || true; done < <(find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null)
  fi
  rm -rf "$RUN/faults"
  local t
  for t in PREROUTING OUTPUT; do while iptables -t raw -D "$t" -j "$FAULT_CHAIN" 2>/dev/null; do :; done; done
  iptables -t raw -F "$FAULT_CHAIN" 2>/dev/null && iptables -t raw -X "$FAULT_CHAIN" 2>/dev/null
  return 0
}

# check_clean: prints what a cluster left behind, one line each; exit 1 if anything.
check_clean() {
  local found=() p h line
  # Processes: a node binary, anything whose command line names this state directory, and
  # anything in the cluster's cgroup. (The test control plane runs etcd and kube-apiserver
  # from the same cache, and for scale_test the gang scheduler too, with its files in a
  # lockstep-controlplane-XXXXXX directory (tests/controlplane): those are not a cluster's, and
  # the host lane runs them beside the cluster's suites.)
  local d
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    local exe cmd
    exe=$(readlink "/proc/$p/exe" 2>/dev/null) || continue
    cmd=$(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null) || continue
    local in_cgroup=0
    grep -qs ":/$CGROUP/" "/proc/$p/cgroup" && in_cgroup=1
    [[ $cmd == *"/lockstep-controlplane-"* && $cmd != *"$STATE/"* && $in_cgroup == 0 ]] && continue
    if [[ $exe == "$K8S_NODE_BIN"/* || $exe == "$COREDNS_BIN"/* || $exe == "$SCHEDULER_PLUGINS_BIN"/* || $exe == "$NETPOL_BIN"/* ||
          $cmd == *"$STATE/"* || $in_cgroup == 1 ]]; then
      found+=("process $p: ${cmd:0:150}")
    fi
  done
  while read -r line; do found+=("mount $line"); done < <(awk -v d="$STATE/" 'index($5, d) == 1 || $5 ~ /^\/run\/netns\/cni-/ { print $5 }' /proc/self/mountinfo)
  for h in $(all_cgroup_mounts); do [[ -d $h/$CGROUP ]] && found+=("cgroup $h/$CGROUP"); done
  while read -r line; do found+=("interface $line"); done < <(ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2) } $2 ~ /^lockstep[0-9]+$/ || $2 ~ /^veth/ { print $2 }')
  ip -4 -o addr show dev lo | grep -q " $DNS_IP/" && found+=("address $DNS_IP on lo")
  while read -r line; do found+=("iptables: $line"); done < <({ iptables-save; ip6tables-save; } 2>/dev/null | grep -E '^[:-].*(KUBE-|CNI-|LOCKSTEP-)' || true)
  # The NetworkPolicy controller's nftables table (iptables-save does not show native nftables
  # tables), and its queue.
  if [[ -x $NETPOL_BIN/kube-network-policies ]]; then
    line=$("$NETPOL_BIN/kube-network-policies" -show-table -nftables-table "$NETPOL_TABLE" 2>&1) || line="(cannot list: $line)"
    [[ -z $line ]] || found+=("nftables table $line")
  fi
  netpol_queue_bound && found+=("NFQUEUE $NETPOL_QUEUE still bound")
  for p in /run/containerd/s/*; do
    [[ -S $p ]] && ! ss -Hxl 2>/dev/null | grep -qF " $p " && found+=("stale shim socket $p")
  done
  for p in /var/lib/cni/results/"$CNI_NETWORK"-* /var/lib/kubelet/device-plugins/kubelet.sock; do
    [[ -e $p ]] && found+=("path $p")
  done
  for p in /var/log/containers/*; do
    [[ -L $p && $(readlink "$p") == */run/pod-logs/* ]] && found+=("pod log link $p")
  done
  # Another containerd (scripts/images.sh runs one) makes the same directories.
  local other_containerd=0
  for p in $(pgrep -x containerd); do
    tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -qF "$STATE/" || other_containerd=1
  done
  for p in $OUTSIDE_DIRS; do   # made by a cluster (not there before up) and left empty
    [[ -d $p && -z $(ls -A "$p") ]] || continue
    [[ $other_containerd == 1 && ( $p == /run/containerd* || $p == /opt/containerd* ) ]] && continue
    grep -qx "existed $p" "$BASELINE" 2>/dev/null || found+=("empty directory $p")
  done
  if [[ -f $BASELINE ]]; then
    while IFS='=' read -r p line; do
      [[ $p == \#* || $p == existed* || -z $line ]] && continue
      [[ $(sysctl -n "$p" 2>/dev/null) == "$line" ]] || found+=("sysctl $p=$(sysctl -n "$p") (was $line)")
    done < "$BASELINE"
  fi
  [[ -d $RUN ]] && found+=("state $RUN (the cluster is up, or down did not finish)")
  ((${#found[@]} == 0)) && { say "clean: nothing of a cluster is left on this machine"; return 0; }
  printf '%s\n' "${found[@]}"
  return 1
}

case ${1:-} in
  up) shift; up "$@" ;;
  down) down ;;
  status) status ;;
  import) shift; import_cmd "$@" ;;
  kubelet) shift; kubelet_cmd "$@" ;;
  node) shift; node_cmd "$@" ;;
  nodes) nodes_cmd ;;
  check-clean) check_clean ;;
  preflight) preflight; say "this machine can run it, and everything is set up" ;;
  purge) down; rm -rf "$STATE"; say "state $STATE removed" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
