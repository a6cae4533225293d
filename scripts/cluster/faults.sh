# shellcheck shell=bash
# scripts/cluster.sh's faults: a node's kubelet stopped and started alone (kubelet), and the
# node faults (node freeze|thaw|poweroff|poweron), undone by down. Sourced; not run.

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
# A node's processes are those in its cgroup node-I (Note in host_cgroups_up, processes.sh).
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
