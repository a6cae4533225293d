# shellcheck shell=bash
# scripts/cluster.sh down: the daemons stopped in order, then everything the cluster made
# outside its state directory removed (processes, mounts, interfaces, netfilter rules,
# sysctls, paths, cgroups). Sourced; not run.

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
