# shellcheck shell=bash
# scripts/cluster.sh's faults: a node's kubelet stopped and started alone (kubelet), the node
# faults (node freeze|thaw|poweroff|poweron) and a pod's CPU throttled (throttle|unthrottle),
# undone by down. Sourced; not run.

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

# faults_cleanup: every throttled pod's quota back, every node thawed and its packets passed;
# the chain gone (down).
faults_cleanup() {
  throttles_cleanup
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

# --- a pod slowed -------------------------------------------------------------------------------
# Note [CPU throttle]: a pod that runs on, slower (a noisy neighbour, a host's CPU power-capped:
# what a straggler is, #42), made through the CFS bandwidth limit of its cgroups.
#   throttle NS/POD PERCENT   every container cgroup of the pod in the cpu hierarchy gets
#             cpu.cfs_quota_us = PERCENT of one CPU (cpu.cfs_period_us x PERCENT / 100); its
#             old quota is kept in run/faults/throttle-NS_POD. The kubelet's cgroupfs driver lays
#             a pod out as CPU/lockstep-cluster/node-I/kubepods[/burstable|/besteffort]/pod<UID>/
#             <container id> (a Guaranteed pod straight under kubepods), one cgroup per container
#             and one for the sandbox. The containers, not the pod's own cgroup: the kubelet owns
#             the pod-level limit and may write it again; the containers' are runc's, set once.
#             cgroup v1 refuses a child quota above its parent's, so PERCENT cannot exceed the
#             pod's own CPU limit (said, and nothing changed). A container started after it (a
#             restart of the container, not the agent's in-place restart of its workers, which
#             stay in it) is not throttled.
#   unthrottle NS/POD         the old quotas back (on the cgroups still there).
# down removes every cgroup of the cluster, and with them the limits.
cpu_mount() { awk '$3 == "cgroup" && $4 ~ /(^|,)cpu(,|$)/ { print $2 }' /proc/self/mounts | head -1; }

# pod_cpu_cgroup NS POD: the pod's cgroup in the cpu hierarchy (exit 1, said on stderr, if none).
pod_cpu_cgroup() {
  local uid dir
  uid=$(kubectl_ -n "$1" get pod "$2" -o 'jsonpath={.metadata.uid}' 2>/dev/null) && [[ -n $uid ]] ||
    { say "no pod $1/$2" >&2; return 1; }
  dir=$(find "$(cpu_mount)/$CGROUP" -maxdepth 4 -type d -name "pod$uid" 2>/dev/null | head -1)
  [[ -n $dir ]] || { say "pod $1/$2 (uid $uid) has no cgroup on this machine's nodes (not started yet?)" >&2; return 1; }
  echo "$dir"
}

# unthrottle_mark FILE: each "CGROUP QUOTA" line of FILE written back, then FILE removed.
unthrottle_mark() {
  local cg quota
  while read -r cg quota; do [[ -d $cg ]] && echo "$quota" > "$cg/cpu.cfs_quota_us" 2>/dev/null || true; done < "$1"
  rm -f "$1"
}

throttle_cmd() {
  [[ -d $RUN/pids ]] || { say "the cluster is not up"; exit 6; }
  local what=$1 target=${2:-} percent=${3:-} usage="usage: scripts/cluster.sh throttle NS/POD PERCENT | unthrottle NS/POD"
  [[ $target =~ ^[a-z0-9.-]+/[a-z0-9.-]+$ ]] || { say "$usage"; exit 2; }
  local ns=${target%%/*} pod=${target#*/}; local mark=$RUN/faults/throttle-${ns}_$pod
  if [[ $what == unthrottle ]]; then
    [[ -f $mark ]] || { say "$target is not throttled"; exit 1; }
    unthrottle_mark "$mark"
    say "$target unthrottled"
    return 0
  fi
  [[ $percent =~ ^[0-9]+$ ]] && ((percent >= 1 && percent <= 1000)) ||
    { say "PERCENT '$percent': a whole number of percent of one CPU, 1 to 1000"; say "$usage"; exit 2; }
  [[ ! -f $mark ]] || { say "$target is throttled already (scripts/cluster.sh unthrottle $target first)"; exit 1; }
  local dir cg period n=0; dir=$(pod_cpu_cgroup "$ns" "$pod") || exit 1
  mkdir -p "$RUN/faults"
  for cg in "$dir"/*/; do
    cg=${cg%/}
    echo "$cg $(cat "$cg/cpu.cfs_quota_us")" >> "$mark"
    period=$(cat "$cg/cpu.cfs_period_us")
    if ! echo $((period * percent / 100)) > "$cg/cpu.cfs_quota_us" 2>/dev/null; then
      unthrottle_mark "$mark"
      say "cannot set $cg/cpu.cfs_quota_us to $((period * percent / 100)): PERCENT $percent is above the pod's own CPU limit ($(cat "$dir/cpu.cfs_quota_us") us per $(cat "$dir/cpu.cfs_period_us") us); nothing changed"
      exit 1
    fi
    n=$((n + 1))
  done
  ((n)) || { rm -f "$mark"; say "pod $target has no container cgroup under $dir"; exit 1; }
  say "$target throttled to $percent% of one CPU: $n container cgroups under $dir"
}

# throttles_cleanup: every throttled pod's quotas back (down, before it kills the pods).
throttles_cleanup() {
  local m
  for m in "$RUN"/faults/throttle-*; do [[ -f $m ]] && unthrottle_mark "$m"; done
  return 0
}
