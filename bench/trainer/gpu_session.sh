#!/usr/bin/env bash
# Issue #27's GPU checks in one command, for a lent GPU machine (one GPU, no network):
#   bench/trainer/gpu_session.sh [phase ...]
# Phases, in the order given (default: build tiers nccl profile levers big batch):
#   build    the agent, the trainer and the GPU tier (scripts/test-gpu.sh) against python3's
#            CUDA PyTorch
#   levers   gpu_vs_eager.py at gpt2-124m: every lever row (LOCKSTEP_LEVERS: some rows) against
#            eager (LOCKSTEP_EAGER: fused or foreach alone), alternating rounds
#   profile  one step of the best row and of eager under the profiler, summed by kind
#   tiers    the GPU tier's GPU entries (agent_gpu_test, trainer_gpu_test)
#   nccl     the NCCL profiler plugin's cost (bench/agent/nccl_profiler_cost.sh)
#   big      the gpt2-1558m shape on one GPU, the trainer alone (MFU; LOCKSTEP_BIG_LEVERS: rows)
#   batch    the best row against fused eager at batch 32 and 64
# Without apt, the build's packages come from .deps/ (Debian packages, unpacked with dpkg -x,
# mended by bench/trainer/deps_fixup.sh) and Prometheus from .deps/prometheus.xz, when there
# (bench/trainer/gpu_deps.sh makes .deps/). Logs go to
# $OUT (the device tool's folder) or $LOCKSTEP_CACHE/gpu-session; each phase has a time limit
# and a failed phase does not stop the next.
set -uo pipefail
source "$(dirname "$0")/../../scripts/common.sh"
out=${OUT:-$CACHE/gpu-session}
mkdir -p "$out"
phases=("$@")
[[ ${#phases[@]} -gt 0 ]] || phases=(build tiers nccl profile levers big batch)
build=${LOCKSTEP_BUILD_DIR:-$CACHE/build/gpu-tier-$BUILD_TYPE}
trainer=$build/trainer/lockstep-trainer
bench=(python3 "$ROOT/bench/trainer/gpu_vs_eager.py" --trainer "$trainer")
export PYTHONUNBUFFERED=1

if [[ -d $ROOT/.deps ]] && ! dpkg -s prometheus-cpp-dev >/dev/null 2>&1; then
  export LOCKSTEP_DEPS_PREFIX=/tmp/lockstep-deps
  mkdir -p "$LOCKSTEP_DEPS_PREFIX"
  for f in "$ROOT"/.deps/*.deb; do dpkg -x "$f" "$LOCKSTEP_DEPS_PREFIX"; done
  sh "$ROOT/bench/trainer/deps_fixup.sh" "$LOCKSTEP_DEPS_PREFIX"
  export LD_LIBRARY_PATH="$LOCKSTEP_DEPS_PREFIX/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  log "packages from .deps unpacked in $LOCKSTEP_DEPS_PREFIX"
fi
if ! command -v curl >/dev/null; then
  # The GPU tier's tests read /metrics and query Prometheus with curl (-s, --max-time,
  # --data-urlencode); an image without it gets this stand-in of those three options.
  mkdir -p /tmp/lockstep-bin
  cat > /tmp/lockstep-bin/curl <<'PY'
#!/usr/bin/env python3
import sys, urllib.parse, urllib.request
args, data, timeout, url = sys.argv[1:], [], 30.0, None
i = 0
while i < len(args):
    a = args[i]
    if a == "--max-time": timeout = float(args[i + 1]); i += 1
    elif a == "--data-urlencode":
        k, _, v = args[i + 1].partition("="); data.append((k, v)); i += 1
    elif not a.startswith("-"): url = a
    i += 1
try:
    body = urllib.parse.urlencode(data).encode() if data else None
    sys.stdout.write(urllib.request.urlopen(url, data=body, timeout=timeout).read().decode())
except Exception as e:
    sys.exit(7)
PY
  chmod +x /tmp/lockstep-bin/curl
  export PATH=/tmp/lockstep-bin:$PATH
  log "no curl here: a Python stand-in for the tests' curl calls"
fi
if [[ -z ${LOCKSTEP_PROMETHEUS_BIN:-} && -f $ROOT/.deps/prometheus.xz ]]; then
  xz -dc "$ROOT/.deps/prometheus.xz" > /tmp/prometheus && chmod +x /tmp/prometheus
  export LOCKSTEP_PROMETHEUS_BIN=/tmp/prometheus
fi

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "NCCL", ".".join(map(str, torch.cuda.nccl.version())), "cuDNN", torch.backends.cudnn.version())'
  nproc
} 2>&1 | tee "$out/device.log"

phase() {  # name, seconds, command...: runs it with a limit, its output to $out/<name>.log
  local name=$1 limit=$2 start=$SECONDS
  shift 2
  log "phase $name (limit ${limit}s)"
  timeout --signal=INT --kill-after=10 "$limit" "$@" 2>&1 | tee "$out/$name.log"
  local rc=${PIPESTATUS[0]}
  log "phase $name: exit $rc after $((SECONDS - start))s"
}

for p in "${phases[@]}"; do
  case $p in
    build) phase build 240 "$ROOT/scripts/test-gpu.sh" -N ;;
    levers) phase levers 170 "${bench[@]}" --rounds 2 --steps 22 --levers "${LOCKSTEP_LEVERS:-all}" \
              --eager "${LOCKSTEP_EAGER:-both}" --log /tmp/levers-trainer.txt ;;
    profile) phase profile 60 "${bench[@]}" --rounds 1 --steps 14 --levers 3 --eager fused --profile 10 \
               --profile-out /tmp/trainer-step.json ;;
    tiers) phase tiers 260 ctest --test-dir "$build" -V -j1 -R 'agent_gpu_test|trainer_gpu_test' ;;
    nccl) phase nccl 150 "$ROOT/bench/agent/nccl_profiler_cost.sh" "$build/agent/lockstep-agent" "$trainer" 2 ;;
    big) phase big 120 "${bench[@]}" --model gpt2-1558m --no-eager --levers "${LOCKSTEP_BIG_LEVERS:-3}" --rounds 1 --steps 10 --batch-size 8 ;;
    batch) phase batch 80 bash -c "for b in 32 64; do ${bench[*]} --levers 3 --eager fused --rounds 1 --steps 16 --batch-size \$b; done" ;;
    *) echo "unknown phase '$p' (build tiers nccl profile levers big batch)"; exit 64 ;;
  esac
done
[[ -f /tmp/trainer-step.json ]] && gzip -c /tmp/trainer-step.json > "$out/trainer-step.json.gz"
log "done: logs in $out"
