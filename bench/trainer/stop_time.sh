#!/usr/bin/env bash
# How long a stop on request takes (Note [Stop on request] in trainer/stop.hpp): a 2-rank Gloo run
# of the test model (tiny) under lockstep-agent gets SIGTERM once rank 1 has reported --at
# steps; every round prints the time from the SIGTERM to the step every rank agreed on (each
# rank's own figure), the checkpoint's write, and the agent's exit, and the exit code.
#   bench/trainer/stop_time.sh [--rounds N] [--strategy DDP|FSDP] [--at STEPS] [-- trainer flags]
# Uses the built lockstep-agent and lockstep-trainer (cmake --build "$BUILD_DIR" --target
# lockstep-agent lockstep-trainer); the checkpoints go to a temporary directory.
set -euo pipefail
source "$(dirname "$0")/../../scripts/common.sh"
rounds=5 strategy=DDP at=50
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --strategy) strategy=$2; shift 2 ;;
    --at) at=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "usage: $0 [--rounds N] [--strategy DDP|FSDP] [--at STEPS] [-- trainer flags]" >&2; exit 2 ;;
  esac
done
agent=$BUILD_DIR/agent/lockstep-agent trainer=$BUILD_DIR/trainer/lockstep-trainer
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
now() { date +%s.%N; }
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

echo "$(date -u +%F) $(nproc) cores, 2 ranks, $strategy, tiny, Gloo; SIGTERM after step $at"
echo "round  agreed_after_step  sigterm_to_agreed_s(rank0,rank1)  checkpoint_s  sigterm_to_exit_s  exit"
for round in $(seq 1 "$rounds"); do
  dir=$work/$round
  mkdir -p "$dir"
  GLOO_SOCKET_IFNAME=lo MASTER_ADDR=127.0.0.1 "$agent" --nproc-per-node 2 --master-port "$(port)" --no-metrics \
    --step-log "$dir/steps" -- "$trainer" --device cpu --strategy "$strategy" --steps 100000 \
    --checkpoint-dir "$dir/ckpt" --log-every 1000000 "$@" >"$dir/out" 2>&1 &
  pid=$!
  until [ "$({ wc -l <"$dir/steps/rank-1.jsonl"; } 2>/dev/null || echo 0)" -ge "$at" ]; do sleep 0.02; done
  t0=$(now)
  kill -TERM "$pid"
  code=0
  wait "$pid" || code=$?
  t1=$(now)
  agreed=$(sed -n 's/.*rank 0: stop agreed after step \([0-9]*\).*/\1/p' "$dir/out")
  latency=$(sed -n 's/.*stop agreed after step [0-9]* (SIGTERM here \([0-9.e-]*\) s ago).*/\1/p' "$dir/out" | paste -sd,)
  saved=$(sed -n 's/.*checkpoint at step [0-9]* written in \([0-9.]*\) s.*/\1/p' "$dir/out")
  printf '%5s  %17s  %32s  %12s  %17.3f  %4s\n' "$round" "${agreed:-none}" "${latency:-none}" "${saved:-none}" \
    "$(echo "$t1 - $t0" | bc)" "$code"
  [ -n "$agreed" ] || { echo "round $round: no stop agreed; the agent's output:" >&2; cat "$dir/out" >&2; exit 1; }
done
