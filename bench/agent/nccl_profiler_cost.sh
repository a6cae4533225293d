#!/usr/bin/env bash
# What the NCCL profiler plugin costs a training step (issue #27, item 4; target < 1% of the
# step time): two lockstep-agents of one job on this machine's one GPU (NCCL_HOSTID makes
# them two hosts to NCCL, so every all-reduce crosses NCCL's network path on loopback, as
# agent_gpu_test's NCCL case does), lockstep-trainer on each, with the plugin (the default)
# and without it (LOCKSTEP_NCCL_PROFILER=0), in alternating order, every round printed; the
# figure is rank 0's wall time per steady-state step (--stats-file, from the fourth step).
#   bench/agent/nccl_profiler_cost.sh AGENT TRAINER [ROUNDS] [SHAPE...]
# SHAPE: MODEL:BATCH:STEPS (default tiny:8:300 gpt2-124m:4:16): a small model, where NCCL's
# per-operation costs weigh most, and GPT-2 124M, where its bytes do.
set -uo pipefail
agent=${1:?usage: nccl_profiler_cost.sh AGENT TRAINER [ROUNDS] [SHAPE...]} trainer=${2:?need TRAINER}
rounds=${3:-2}
shift $(($# < 3 ? $# : 3))
shapes=("$@")
((${#shapes[@]})) || shapes=(tiny:8:300 gpt2-124m:4:16)
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
trap 'echo "interrupted"; exit 130' INT TERM

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# run MODE MODEL BATCH STEPS: prints rank 0's wall seconds per step, or "failed".
run() {
  local mode=$1 model=$2 batch=$3 steps=$4 dir master agent_port pids=() n no_plugin=()
  [[ $mode == off ]] && no_plugin=(LOCKSTEP_NCCL_PROFILER=0)
  dir=$(mktemp -d "$work/run.XXXX")
  master=$(port) agent_port=$(port)
  for n in 0 1; do
    env "${no_plugin[@]}" LOCKSTEP_NNODES=2 LOCKSTEP_NODE_RANK=$n LOCKSTEP_NPROC_PER_NODE=1 LOCKSTEP_MASTER_ADDR=127.0.0.1 \
      LOCKSTEP_MASTER_PORT="$master" LOCKSTEP_AGENT_PORT="$agent_port" LOCKSTEP_METRICS_PORT=0 \
      LOCKSTEP_JOB_NAME=cost NCCL_HOSTID="lockstep-bench-node-$n" NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 \
      "$agent" -- "$trainer" --device "${LOCKSTEP_BENCH_DEVICE:-cuda}" --model "$model" --batch-size "$batch" --steps "$steps" \
      --log-every 1000000 --stats-file "$dir/stats-$n" > "$dir/agent-$n.log" 2>&1 &
    pids+=($!)
  done
  local ok=1
  for n in "${pids[@]}"; do wait "$n" || ok=0; done
  if ((ok)) && [[ -f $dir/stats-0 ]]; then
    awk '$1 == "wall_s_per_step" {print $2}' "$dir/stats-0"
  else
    echo failed
    tail -n 5 "$dir"/agent-*.log >&2
  fi
}

echo "NCCL profiler plugin cost: 2 ranks on one GPU over NCCL's sockets, lockstep-trainer; plugin on vs LOCKSTEP_NCCL_PROFILER=0, $rounds paired rounds a shape, order alternating; figure: rank 0's wall time per steady-state step"
for shape in "${shapes[@]}"; do
  IFS=: read -r model batch steps <<< "$shape"
  ratios=()
  for ((r = 1; r <= rounds; ++r)); do
    if ((r % 2)); then on=$(run on "$model" "$batch" "$steps"); off=$(run off "$model" "$batch" "$steps"); order="on, off"
    else off=$(run off "$model" "$batch" "$steps"); on=$(run on "$model" "$batch" "$steps"); order="off, on"; fi
    if [[ $on == failed || $off == failed ]]; then
      echo "  $model batch $batch, round $r ($order): on $on, off $off"
      continue
    fi
    ratio=$(awk -v a="$on" -v b="$off" 'BEGIN {printf "%.4f", a / b}')
    ratios+=("$ratio")
    printf '  %s batch %s, round %d (%s): step on %.2f ms, off %.2f ms, ratio %s\n' "$model" "$batch" "$r" "$order" \
      "$(awk -v x="$on" 'BEGIN {print x * 1000}')" "$(awk -v x="$off" 'BEGIN {print x * 1000}')" "$ratio"
  done
  if ((${#ratios[@]})); then
    printf '%s\n' "${ratios[@]}" | sort -g | awk -v m="$model" -v b="$batch" '{a[NR] = $1} END {
      med = NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
      printf "%s batch %s: median ratio on/off %.4f over %d rounds (%+.2f%%; target: under +1%%)\n", m, b, med, NR, (med - 1) * 100}'
  fi
done
