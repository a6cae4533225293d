# shellcheck shell=bash
# scripts/cluster.sh preflight: can this machine run a cluster, is everything set up, and is
# the machine free (no other cluster holds it, its ports are free). Sourced; not run.

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

preflight() {
  local problem
  problem=$(host_problem); [[ -z $problem ]] || { say "this machine cannot run it: $problem"; exit 3; }
  problem=$(setup_problem); [[ -z $problem ]] || { say "$problem"; exit 4; }
  return 0
}
