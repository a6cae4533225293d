# shellcheck shell=bash
# scripts/cluster.sh's NetworkPolicy controller: started (up), waited for with its packets on
# its queue (up), and its netfilter state removed (down). Sourced; not run.

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

# netpol_queue_bound [ROOT]: the controller's queue is bound (as ROOT/proc/net/netfilter lists
# it: check_clean's host root).
netpol_queue_bound() {
  awk -v q="$NETPOL_QUEUE" '$1 == q { found = 1 } END { exit !found }' "${1:-}/proc/net/netfilter/nfnetlink_queue" 2>/dev/null
}

# netpol_ready: once the controller has synced its informers it loads its nftables table, then
# binds its queue. Where the kernel refused the table's rules (it lacks nftables' `queue`
# expression, CONFIG_NFT_QUEUE, as the kernels of these machines do), iptables' NFQUEUE target
# (xt_NFQUEUE through nft_compat) puts the packets on the queue instead: every packet forwarded
# to or from a pod that is not part of an established connection, in the mangle table's FORWARD
# (bridged pod-to-pod traffic passes it: net.bridge.bridge-nf-call-iptables). The controller
# passes packets of pods that no policy selects. --queue-bypass: fail-open, as above.
# Sets NETPOL_HOW for up's progress line.
# shellcheck disable=SC2034  # NETPOL_HOW is up's
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
