#!/usr/bin/env bash
# bench/operator/kueue.sh [ROUNDS]: what Kueue costs a job (#39; docs/kueue.md). Runs
# lockstep-bench-scale on 100 KWOK nodes with 100 TrainingJobs x 8 pods and no failure storm,
# ROUNDS times (default 2) each without and with --kueue (a ClusterQueue that admits every job
# at once), alternating, the operator at --progress-period=0 in both (PodsReady is then written
# when every pod runs, the fake pods having no agent to read). Prints every round's apply -> all
# pods created and the operator's requests per job by verb, then the medians' ratio and
# difference. Target: at most 6 more requests per job with Kueue.
# Ctrl-C stops the round under way (which removes what it started).
set -euo pipefail
source "$(dirname "$0")/../../scripts/common.sh"
rounds=${1:-2}
"$ROOT/scripts/setup.sh" --tools > /dev/null
"$ROOT/scripts/build.sh" > /dev/null
export LOCKSTEP_K8S_BIN="$K8S_BIN" LOCKSTEP_KWOK_BIN="$KWOK_BIN/kwok" LOCKSTEP_KUEUE_DIR="$KUEUE_DIR" \
  LOCKSTEP_GANG_SCHEDULER_BIN="$SCHEDULER_PLUGINS_BIN/kube-scheduler-cosched"
trap 'echo; log "interrupted"; exit 130' INT
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# field FILE PATTERN: the first number after PATTERN in FILE's report.
field() { grep -m1 "$2" "$1" | sed -E "s/.*$2[^0-9]*([0-9.]+).*/\1/"; }
declare -a base_s base_req kueue_s kueue_req
for ((r = 1; r <= rounds; r++)); do
  for mode in plain kueue; do
    log "round $r/$rounds: $mode (about a minute)"
    flag=(); [[ $mode == kueue ]] && flag=(--kueue)
    f="$out/$mode-$r.txt"
    "$BUILD_DIR/bench/lockstep-bench-scale" --nodes 100 --jobs 100 --gang 8 --storm-percent 0 --succeed-after 2s \
      --timeout 600s "${flag[@]}" -- --progress-period=0 > "$f" 2>&1 || { tail -30 "$f"; exit 1; }
    s=$(field "$f" "pods created: ")
    req=$(grep -m1 "operator API requests:" "$f" | sed -E 's/.*= ([0-9.]+) per job.*/\1/')
    verbs=$(grep -m1 "operator API requests:" "$f" | sed -E 's/.*per job \((.*) per job, since start\).*/\1/')
    echo "  round $r $mode: apply -> all 800 pods created $s s; operator requests $req per job ($verbs)"
    if [[ $mode == plain ]]; then base_s+=("$s"); base_req+=("$req"); else kueue_s+=("$s"); kueue_req+=("$req"); fi
  done
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
bs=$(median "${base_s[@]}"); ks=$(median "${kueue_s[@]}"); br=$(median "${base_req[@]}"); kr=$(median "${kueue_req[@]}")
echo "medians of $rounds rounds: apply -> all pods created ${bs} s without Kueue, ${ks} s with (ratio $(awk -v a="$ks" -v b="$bs" 'BEGIN {printf "%.2f", a / b}'))"
echo "  operator requests per job: ${br} without, ${kr} with: $(awk -v a="$kr" -v b="$br" 'BEGIN {printf "%+.2f", a - b}') (target: at most +6)"
