#!/usr/bin/env bash
# The GPU tier alone, on a GPU machine: builds the agent, the trainer and their GPU suites
# (tests/gpu) against python3's CUDA PyTorch (CUDA, NCCL) and runs them through ctest.
# Needs what the agent and the tests build with: prometheus-cpp, GoogleTest and gloo's headers,
# from the system (Debian: prometheus-cpp-dev libgtest-dev libgloo-dev) or, on a machine that
# cannot install packages, unpacked under LOCKSTEP_DEPS_PREFIX (a directory holding usr/).
# Extra arguments go to ctest. Without a GPU every entry says SKIPPED.
set -euo pipefail
source "$(dirname "$0")/common.sh"
read_installed_torch
[[ $TORCH_CUDA != none ]] || die "python3's PyTorch $TORCH_INSTALLED has no CUDA; the GPU tier needs a CUDA PyTorch"
build=${LOCKSTEP_BUILD_DIR:-$CACHE/build/gpu-tier-$BUILD_TYPE}
args=(-DLOCKSTEP_BUILD_TESTS=OFF -DLOCKSTEP_BUILD_OPERATOR=OFF -DLOCKSTEP_GPU_TESTS=ON
      "-DLOCKSTEP_LIBTORCH_DIR=$TORCH_PKG" "-DLOCKSTEP_TORCH_CXX11_ABI=$TORCH_ABI" -DLOCKSTEP_TORCH_CUDA=ON)
if [[ -n ${LOCKSTEP_DEPS_PREFIX:-} ]]; then
  args+=("-DCMAKE_PREFIX_PATH=$LOCKSTEP_DEPS_PREFIX/usr")
  export LD_LIBRARY_PATH="$LOCKSTEP_DEPS_PREFIX/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
for d in "$CUDA_HEADERS_DIR/include" "${CUDA_HOME:-/usr/local/cuda}/include"; do
  [[ -f $d/crt/host_config.h ]] && { args+=("-DLOCKSTEP_CUDA_HEADERS_DIR=$d"); break; }
done
log "GPU tier: PyTorch $TORCH_INSTALLED (CUDA $TORCH_CUDA) in $TORCH_PKG; build in $build"
cmake -S "$ROOT" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" "${args[@]}" >/dev/null
cmake --build "$build" -j "$(nproc)"
exec ctest --test-dir "$build" --output-on-failure "$@"
