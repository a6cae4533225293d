# shellcheck shell=bash
# scripts/cluster.sh check-clean: anything a cluster left on this machine, one line each.
# Sourced; not run.

# check_clean: prints what a cluster left behind, one line each; exit 1 if anything. The
# host's files are read under $LOCKSTEP_CLUSTER_HOST_ROOT (empty, the default: this machine's
# /): tests/scripts/cluster_check_clean_test.cpp points it at a fake process and cgroup tree,
# with fakes of the commands used here (ip, iptables-save, ip6tables-save, ss, pgrep, sysctl)
# first in PATH. The lines name the host's paths, without that prefix.
check_clean() {
  local found=() p h line root=${LOCKSTEP_CLUSTER_HOST_ROOT:-}
  # Processes: a node binary, anything whose command line names this state directory, and
  # anything in the cluster's cgroup. (The test control plane runs etcd and kube-apiserver
  # from the same cache, and for scale_test the gang scheduler too, with its files in a
  # lockstep-controlplane-XXXXXX directory (tests/controlplane): those are not a cluster's, and
  # the host lane runs them beside the cluster's suites.)
  local d
  for d in "$root"/proc/[0-9]*; do
    p=${d#"$root"/proc/}
    local exe cmd
    exe=$(readlink "$root/proc/$p/exe" 2>/dev/null) || continue
    cmd=$(tr '\0' ' ' < "$root/proc/$p/cmdline" 2>/dev/null) || continue
    local in_cgroup=0
    grep -qs ":/$CGROUP/" "$root/proc/$p/cgroup" && in_cgroup=1
    [[ $cmd == *"/lockstep-controlplane-"* && $cmd != *"$STATE/"* && $in_cgroup == 0 ]] && continue
    if [[ $exe == "$K8S_NODE_BIN"/* || $exe == "$COREDNS_BIN"/* || $exe == "$SCHEDULER_PLUGINS_BIN"/* || $exe == "$NETPOL_BIN"/* ||
          $cmd == *"$STATE/"* || $in_cgroup == 1 ]]; then
      found+=("process $p: ${cmd:0:150}")
    fi
  done
  while read -r line; do found+=("mount $line"); done < <(awk -v d="$STATE/" 'index($5, d) == 1 || $5 ~ /^\/run\/netns\/cni-/ { print $5 }' "$root/proc/self/mountinfo")
  for h in $(all_cgroup_mounts "$root"); do [[ -d $root$h/$CGROUP ]] && found+=("cgroup $h/$CGROUP"); done
  while read -r line; do found+=("interface $line"); done < <(ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2) } $2 ~ /^lockstep[0-9]+$/ || $2 ~ /^veth/ { print $2 }')
  ip -4 -o addr show dev lo | grep -q " $DNS_IP/" && found+=("address $DNS_IP on lo")
  while read -r line; do found+=("iptables: $line"); done < <({ iptables-save; ip6tables-save; } 2>/dev/null | grep -E '^[:-].*(KUBE-|CNI-|LOCKSTEP-)' || true)
  # The NetworkPolicy controller's nftables table (iptables-save does not show native nftables
  # tables), and its queue.
  if [[ -x $NETPOL_BIN/kube-network-policies ]]; then
    line=$("$NETPOL_BIN/kube-network-policies" -show-table -nftables-table "$NETPOL_TABLE" 2>&1) || line="(cannot list: $line)"
    [[ -z $line ]] || found+=("nftables table $line")
  fi
  netpol_queue_bound "$root" && found+=("NFQUEUE $NETPOL_QUEUE still bound")
  for p in "$root"/run/containerd/s/*; do
    [[ -S $p ]] && ! ss -Hxl 2>/dev/null | grep -qF " ${p#"$root"} " && found+=("stale shim socket ${p#"$root"}")
  done
  for p in "$root"/var/lib/cni/results/"$CNI_NETWORK"-* "$root"/var/lib/kubelet/device-plugins/kubelet.sock; do
    [[ -e $p ]] && found+=("path ${p#"$root"}")
  done
  for p in "$root"/var/log/containers/*; do
    [[ -L $p && $(readlink "$p") == */run/pod-logs/* ]] && found+=("pod log link ${p#"$root"}")
  done
  # Another containerd (scripts/images.sh runs one) makes the same directories.
  local other_containerd=0
  for p in $(pgrep -x containerd); do
    tr '\0' ' ' < "$root/proc/$p/cmdline" 2>/dev/null | grep -qF "$STATE/" || other_containerd=1
  done
  for p in $OUTSIDE_DIRS; do   # made by a cluster (not there before up) and left empty
    [[ -d $root$p && -z $(ls -A "$root$p") ]] || continue
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
