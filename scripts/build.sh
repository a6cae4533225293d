#!/usr/bin/env bash
# Configures and builds Lockstep into a build tree under the cache, outside the repository.
# LOCKSTEP_BUILD_TYPE=Debug for a debug build.
#   scripts/build.sh                  every component, test and benchmark (needs GoogleTest)
#   scripts/build.sh TARGET...        only those targets, e.g. the main job's
#                                     `lockstep lockstep-agent lockstep-trainer` (scripts/run.sh);
#                                     tests are configured only where GoogleTest is installed
#
# LibTorch: a GPU machine whose Python has a CUDA PyTorch builds against that (CUDA, NCCL);
# everywhere else, against the CPU libraries of the pinned wheel that scripts/setup.sh
# unpacked. LOCKSTEP_TORCH=wheel or LOCKSTEP_TORCH=system forces one.
set -euo pipefail
source "$(dirname "$0")/common.sh"

torch_args=()
mode=$(torch_mode)
case $mode in
  system) read_installed_torch
          torch_args=("-DLOCKSTEP_LIBTORCH_DIR=$TORCH_PKG" "-DLOCKSTEP_TORCH_CXX11_ABI=$TORCH_ABI" -DLOCKSTEP_TORCH_CUDA=AUTO)
          [[ -d $CUDA_HEADERS_DIR/include ]] && torch_args+=("-DLOCKSTEP_CUDA_HEADERS_DIR=$CUDA_HEADERS_DIR/include")
          log "build: LibTorch from the installed PyTorch $TORCH_INSTALLED in $TORCH_PKG" ;;
  wheel)  [[ -f $LIBTORCH_DIR/.complete ]] || die "LibTorch not found in $LIBTORCH_DIR; run scripts/setup.sh"
          torch_args=("-DLOCKSTEP_LIBTORCH_DIR=$LIBTORCH_DIR" -DLOCKSTEP_TORCH_CXX11_ABI=1 -DLOCKSTEP_TORCH_CUDA=OFF) ;;
esac

targets=("$@")
tests=ON
((${#targets[@]})) && tests=AUTO

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
log "build: $BUILD_TYPE in $BUILD_DIR${targets[*]:+ (${targets[*]})}"
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" -DLOCKSTEP_BUILD_TESTS="$tests" \
  "${launcher[@]}" "${torch_args[@]}" ${LOCKSTEP_CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" ${targets[@]:+--target "${targets[@]}"}
