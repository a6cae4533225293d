# shellcheck shell=bash
# scripts/cluster.sh's daemons: started in their own session and in the cluster's cgroups,
# waited for, stopped; the cgroups made for them and emptied. Sourced; not run.

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
