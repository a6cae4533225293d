# shellcheck shell=bash
# scripts/cluster.sh's small helpers: logging, the clients of containerd and the API server,
# processes and cgroups looked up, every node's names and paths (node_*), and the one renderer
# of the configuration templates (templates/). Sourced by scripts/cluster.sh; not run.

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
# [ROOT]: the mounts as ROOT/proc/self/mounts lists them (check_clean's host root).
all_cgroup_mounts() { awk '$3 == "cgroup" || $3 == "cgroup2" { print $2 }' "${1:-}/proc/self/mounts"; }
pids_cgroup() { echo "$(awk '$3 == "cgroup" && $4 ~ /(^|,)pids(,|$)/ { print $2 }' /proc/self/mounts | head -1)/$CGROUP"; }
node_ip() { ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p'; }

# render TEMPLATE OUT NAME...: templates/TEMPLATE with every @NAME@ replaced by the value of the
# shell variable NAME (a global, or a local of the caller), written to OUT (- for stdout).
# Values go in as they are: /, &, |, \ and newlines included. A placeholder of the template
# not among the NAMEs is an error (a template and its caller out of step).
render() {
  local render_in=$CLUSTER_TEMPLATES/$1 render_out=$2 render_text render_rest render_name render_value; shift 2
  { IFS= read -r -d '' render_text || true; } < "$render_in" || return 1   # all of it, the last newline too
  render_rest=$render_text
  for render_name in "$@"; do
    render_value=${!render_name}
    render_text=${render_text//"@$render_name@"/"$render_value"}
    render_rest=${render_rest//"@$render_name@"/}
  done
  if [[ $render_rest =~ @[A-Za-z_][A-Za-z0-9_]*@ ]]; then
    echo "render: $render_in has ${BASH_REMATCH[0]}, which its caller does not give" >&2
    return 1
  fi
  if [[ $render_out == - ]]; then printf '%s' "$render_text"; else printf '%s' "$render_text" > "$render_out"; fi
}

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
