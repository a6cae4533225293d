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
#   scripts/cluster.sh throttle NS/POD PERCENT | unthrottle NS/POD   a pod's containers held to
#                                    PERCENT of one CPU (a straggler), and back (docs/development.md)
#   scripts/cluster.sh nodes         the nodes' names, one a line (what up made)
#   scripts/cluster.sh check-clean   list anything a cluster left on this machine (exit 1 if any)
#   scripts/cluster.sh preflight     can this machine run it, and is everything set up? (0, 3 or 4)
#   scripts/cluster.sh purge         down, then delete the state directory (certificates, images)
#
# State: $LOCKSTEP_CLUSTER_DIR, default ~/.cache/lockstep/cluster; the admin kubeconfig is
# $LOCKSTEP_CLUSTER_DIR/kubeconfig. Certificates and the image store survive `down`; etcd,
# logs and everything of the running cluster live in $LOCKSTEP_CLUSTER_DIR/run and do not.
# check-clean reads the host's files under $LOCKSTEP_CLUSTER_HOST_ROOT (empty, the default: this
# machine; its test points it at a fake tree).
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
# The code, one file per concern, in scripts/cluster/; the configurations it writes are the
# templates in scripts/cluster/templates/, rendered by render (lib.sh).
CLUSTER_LIB=$(dirname "$0")/cluster
CLUSTER_TEMPLATES=$CLUSTER_LIB/templates

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

# shellcheck source-path=SCRIPTDIR source=cluster/lib.sh
source "$CLUSTER_LIB/lib.sh"              # small helpers, node_* names, render
# shellcheck source-path=SCRIPTDIR source=cluster/preflight.sh
source "$CLUSTER_LIB/preflight.sh"        # can this machine run it; is it free
# shellcheck source-path=SCRIPTDIR source=cluster/pki.sh
source "$CLUSTER_LIB/pki.sh"              # certificates, kubeconfigs
# shellcheck source-path=SCRIPTDIR source=cluster/processes.sh
source "$CLUSTER_LIB/processes.sh"        # daemons started, waited for, stopped; cgroups
# shellcheck source-path=SCRIPTDIR source=cluster/up.sh
source "$CLUSTER_LIB/up.sh"               # up: network, containerd, control plane, nodes, gang scheduler
# shellcheck source-path=SCRIPTDIR source=cluster/netpol.sh
source "$CLUSTER_LIB/netpol.sh"           # the NetworkPolicy controller
# shellcheck source-path=SCRIPTDIR source=cluster/down.sh
source "$CLUSTER_LIB/down.sh"             # down
# shellcheck source-path=SCRIPTDIR source=cluster/faults.sh
source "$CLUSTER_LIB/faults.sh"           # kubelet stop|start, node freeze|thaw|poweroff|poweron, throttle
# shellcheck source-path=SCRIPTDIR source=cluster/status.sh
source "$CLUSTER_LIB/status.sh"           # status, import, nodes
# shellcheck source-path=SCRIPTDIR source=cluster/check_clean.sh
source "$CLUSTER_LIB/check_clean.sh"      # check-clean

case ${1:-} in
  up) shift; up "$@" ;;
  down) down ;;
  status) status ;;
  import) shift; import_cmd "$@" ;;
  kubelet) shift; kubelet_cmd "$@" ;;
  node) shift; node_cmd "$@" ;;
  throttle|unthrottle) throttle_cmd "$@" ;;
  nodes) nodes_cmd ;;
  check-clean) check_clean ;;
  preflight) preflight; say "this machine can run it, and everything is set up" ;;
  purge) down; rm -rf "$STATE"; say "state $STATE removed" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
