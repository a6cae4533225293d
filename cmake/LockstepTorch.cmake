# Provides lockstep::torch, the one way the trainer links LibTorch.
#
# LOCKSTEP_LIBTORCH_DIR is a torch package directory (include/ and lib/), one of:
#  * the headers and CPU libraries scripts/setup.sh unpacks from the pinned PyPI torch wheel;
#  * an installed PyTorch's own package directory (scripts/build.sh passes
#    `python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))'` on a GPU machine),
#    whose lib/ also holds libtorch_cuda.so and whose CUDA, cuDNN and NCCL libraries sit beside
#    it in the nvidia-* wheels (site-packages/nvidia/...).
# find_package(Torch) is deliberately not used: a pip-installed CUDA PyTorch carries no CUDA
# toolkit (nvcc), and its TorchConfig.cmake stops with "Your installed Caffe2 version uses CUDA
# but I cannot find the CUDA libraries". Everything the trainer compiles against is in the wheels.
#
# LOCKSTEP_TORCH_CUDA: AUTO (CUDA and NCCL when lib/ has libtorch_cuda.so), ON or OFF.
# The torch wheel ships no gloo headers, which c10d/ProcessGroupGloo.hpp includes; Debian's
# libgloo-dev provides them (docs/development.md, "LibTorch", says why that is safe).
set(LOCKSTEP_LIBTORCH_DIR "" CACHE PATH "torch package directory: include/ and lib/ (scripts/build.sh sets it)")
set(LOCKSTEP_TORCH_CUDA AUTO CACHE STRING "link LibTorch's CUDA libraries and NCCL: AUTO, ON or OFF")
set_property(CACHE LOCKSTEP_TORCH_CUDA PROPERTY STRINGS AUTO ON OFF)
set(LOCKSTEP_CUDA_HEADERS_DIR "" CACHE PATH "extra CUDA headers (crt/, nv/) where the runtime wheel lacks them (scripts/setup.sh)")
set(LOCKSTEP_TORCH_CXX11_ABI 1 CACHE STRING "_GLIBCXX_USE_CXX11_ABI the torch libraries were built with (torch._C._GLIBCXX_USE_CXX11_ABI)")

if(NOT LOCKSTEP_LIBTORCH_DIR)
  message(FATAL_ERROR "LOCKSTEP_LIBTORCH_DIR is not set: build with scripts/build.sh, or pass "
                      "-DLOCKSTEP_LIBTORCH_DIR=<torch package directory with include/ and lib/>")
endif()
set(_lt ${LOCKSTEP_LIBTORCH_DIR})
foreach(_f include/torch/csrc/api/include/torch/torch.h lib/libtorch_cpu.so lib/libc10.so)
  if(NOT EXISTS ${_lt}/${_f})
    message(FATAL_ERROR "LOCKSTEP_LIBTORCH_DIR=${_lt} has no ${_f}: run scripts/setup.sh, or point it "
                        "at an installed PyTorch's package directory")
  endif()
endforeach()

find_path(LOCKSTEP_GLOO_INCLUDE_DIR gloo/algorithm.h
  DOC "gloo headers (Debian: libgloo-dev), needed by c10d/ProcessGroupGloo.hpp")
if(NOT LOCKSTEP_GLOO_INCLUDE_DIR)
  message(FATAL_ERROR "gloo headers not found: install libgloo-dev (scripts/setup.sh does) "
                      "or set LOCKSTEP_GLOO_INCLUDE_DIR")
endif()

add_library(lockstep_torch INTERFACE)
add_library(lockstep::torch ALIAS lockstep_torch)
target_include_directories(lockstep_torch SYSTEM INTERFACE
  ${_lt}/include ${_lt}/include/torch/csrc/api/include ${LOCKSTEP_GLOO_INCLUDE_DIR})
target_compile_definitions(lockstep_torch INTERFACE
  USE_DISTRIBUTED USE_C10D_GLOO _GLIBCXX_USE_CXX11_ABI=${LOCKSTEP_TORCH_CXX11_ABI})

set(_cuda OFF)
if(LOCKSTEP_TORCH_CUDA STREQUAL "AUTO")
  if(EXISTS ${_lt}/lib/libtorch_cuda.so AND EXISTS ${_lt}/lib/libc10_cuda.so)
    set(_cuda ON)
  endif()
elseif(LOCKSTEP_TORCH_CUDA)
  if(NOT EXISTS ${_lt}/lib/libtorch_cuda.so)
    message(FATAL_ERROR "LOCKSTEP_TORCH_CUDA=ON but ${_lt}/lib has no libtorch_cuda.so (a CPU-only LibTorch)")
  endif()
  set(_cuda ON)
endif()

if(_cuda)
  # CUDA runtime and NCCL headers: from the nvidia-* wheels beside torch (CUDA 13: nvidia/cu13;
  # CUDA 12: nvidia/cuda_runtime), else a CUDA toolkit.
  file(GLOB _wheel_includes ${_lt}/../nvidia/*/include)
  find_path(LOCKSTEP_CUDA_INCLUDE_DIR cuda_runtime_api.h
    HINTS ${_wheel_includes} $ENV{CUDA_HOME}/include /usr/local/cuda/include
    DOC "CUDA runtime headers (the nvidia-cuda-runtime wheel, or a CUDA toolkit)")
  find_path(LOCKSTEP_NCCL_INCLUDE_DIR nccl.h
    HINTS ${_lt}/../nvidia/nccl/include ${_wheel_includes} $ENV{CUDA_HOME}/include /usr/local/cuda/include
    DOC "NCCL headers (the nvidia-nccl wheel, or libnccl-dev)")
  # CUDA 13's runtime headers include crt/host_config.h and <nv/target>, which its runtime wheel
  # lacks (they are in the nvidia-cuda-crt and nvidia-cuda-cccl wheels, and in a toolkit);
  # scripts/setup.sh unpacks those two pinned wheels into LOCKSTEP_CUDA_HEADERS_DIR when needed.
  set(_hints ${LOCKSTEP_CUDA_INCLUDE_DIR} ${LOCKSTEP_CUDA_HEADERS_DIR} ${_wheel_includes} $ENV{CUDA_HOME}/include /usr/local/cuda/include)
  find_path(LOCKSTEP_CUDA_CRT_INCLUDE_DIR crt/host_config.h HINTS ${_hints}
    DOC "CUDA's crt/ headers (the nvidia-cuda-crt wheel, or a CUDA toolkit)")
  find_path(LOCKSTEP_CUDA_CCCL_INCLUDE_DIR nv/target HINTS ${_hints}
    DOC "CUDA's CCCL headers, <nv/target> (the nvidia-cuda-cccl wheel, or a CUDA toolkit)")
  foreach(_v LOCKSTEP_CUDA_INCLUDE_DIR LOCKSTEP_NCCL_INCLUDE_DIR LOCKSTEP_CUDA_CRT_INCLUDE_DIR LOCKSTEP_CUDA_CCCL_INCLUDE_DIR)
    if(NOT ${_v})
      message(FATAL_ERROR "${_v}: not found beside ${_lt} (site-packages/nvidia/*/include), in CUDA_HOME or "
                          "/usr/local/cuda; install PyTorch's nvidia-* wheels, or set ${_v}")
    endif()
  endforeach()
  target_include_directories(lockstep_torch SYSTEM INTERFACE
    ${LOCKSTEP_CUDA_INCLUDE_DIR} ${LOCKSTEP_CUDA_CRT_INCLUDE_DIR} ${LOCKSTEP_CUDA_CCCL_INCLUDE_DIR} ${LOCKSTEP_NCCL_INCLUDE_DIR})
  target_compile_definitions(lockstep_torch INTERFACE USE_C10D_NCCL LOCKSTEP_WITH_CUDA)
  # libtorch_cuda registers CUDA with the dispatcher when loaded, so it is linked even where no
  # symbol of it is referenced; its own RPATH finds the nvidia-* libraries.
  target_link_libraries(lockstep_torch INTERFACE -Wl,--no-as-needed ${_lt}/lib/libtorch_cuda.so ${_lt}/lib/libc10_cuda.so)
  # c10's inline CUDA helpers (CUDAEvent::block: cudaStreamWaitEvent) call the CUDA runtime
  # directly, so it is linked too: the wheel's versioned libcudart (it ships no unversioned name).
  file(GLOB _wheel_libs ${_lt}/../nvidia/*/lib)
  find_library(LOCKSTEP_CUDART_LIBRARY NAMES cudart libcudart.so.13 libcudart.so.12
    HINTS ${_wheel_libs} $ENV{CUDA_HOME}/lib64 /usr/local/cuda/lib64
    DOC "the CUDA runtime library (the nvidia-cuda-runtime wheel, or a CUDA toolkit)")
  if(NOT LOCKSTEP_CUDART_LIBRARY)
    message(FATAL_ERROR "LOCKSTEP_CUDART_LIBRARY: no libcudart beside ${_lt} (site-packages/nvidia/*/lib), in "
                        "CUDA_HOME or /usr/local/cuda; install PyTorch's nvidia-* wheels, or set it")
  endif()
  target_link_libraries(lockstep_torch INTERFACE ${LOCKSTEP_CUDART_LIBRARY})
endif()
target_link_libraries(lockstep_torch INTERFACE ${_lt}/lib/libtorch_cpu.so ${_lt}/lib/libc10.so Threads::Threads)
message(STATUS "LibTorch: ${_lt}; CUDA and NCCL: ${_cuda}")
