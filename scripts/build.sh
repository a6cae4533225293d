#!/usr/bin/env bash
# Configures and builds Lockstep (every component and test) into a build tree under the
# cache, outside the repository. LOCKSTEP_BUILD_TYPE=Debug for a debug build.
#
# LibTorch: a GPU machine whose Python has a CUDA PyTorch builds against that (CUDA, NCCL);
# everywhere else, against the CPU libraries of the pinned wheel that scripts/setup.sh
# unpacked. LOCKSTEP_TORCH=wheel or LOCKSTEP_TORCH=system forces one.
set -euo pipefail
source "$(dirname "$0")/common.sh"

torch_args=()
mode=${LOCKSTEP_TORCH:-auto}
if [[ $mode == auto ]]; then
  mode=wheel
  if command -v nvidia-smi >/dev/null 2>&1 &&
     python3 -c 'import torch, sys; sys.exit(0 if torch.version.cuda else 1)' 2>/dev/null; then
    mode=system
  fi
fi
case $mode in
  system) torch_args=(-DLOCKSTEP_LIBTORCH_DIR= "-DCMAKE_PREFIX_PATH=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')")
          log "build: LibTorch from the installed PyTorch ($(python3 -c 'import torch; print(torch.__version__)'))" ;;
  wheel)  [[ -f $LIBTORCH_DIR/.complete ]] || die "LibTorch not found in $LIBTORCH_DIR; run scripts/setup.sh"
          torch_args=("-DLOCKSTEP_LIBTORCH_DIR=$LIBTORCH_DIR") ;;
  *)      die "LOCKSTEP_TORCH must be auto, wheel or system, not '$mode'" ;;
esac

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
log "build: $BUILD_TYPE in $BUILD_DIR"
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
  "${launcher[@]}" "${torch_args[@]}" ${LOCKSTEP_CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"
