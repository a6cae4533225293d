#!/usr/bin/env bash
# Issue #5's GPU benchmark, one command on a GPU machine:
#   bench/trainer/gpu.sh [gpu_vs_eager.py options, e.g. --batch-size 32 --rounds 5]
# Installs what the trainer builds with (scripts/setup.sh --trainer), builds lockstep-trainer
# alone against the installed CUDA PyTorch (CUDA, NCCL) in its own build tree under the cache,
# and runs gpu_vs_eager.py: gpt2-124m in bf16, lockstep-trainer against the same model in
# PyTorch eager on the same GPU, tokens/s and MFU. Without a GPU it says SKIPPED and why.
set -euo pipefail
source "$(dirname "$0")/../../scripts/common.sh"
if ! python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "SKIPPED: no GPU: python3 has no PyTorch that sees a CUDA device (to check the script itself:" \
       "bench/trainer/gpu_vs_eager.py --device cpu --model tiny --trainer <lockstep-trainer>)"
  exit 0
fi
export LOCKSTEP_TORCH=system LOCKSTEP_BUILD_DIR="$CACHE/build/trainer-gpu-$BUILD_TYPE"
"$ROOT/scripts/setup.sh" --trainer
LOCKSTEP_CMAKE_ARGS="-DLOCKSTEP_BUILD_TESTS=OFF -DLOCKSTEP_BUILD_OPERATOR=OFF -DLOCKSTEP_BUILD_AGENT=OFF" \
  "$ROOT/scripts/build.sh"
exec python3 "$ROOT/bench/trainer/gpu_vs_eager.py" --trainer "$LOCKSTEP_BUILD_DIR/trainer/lockstep-trainer" "$@"
