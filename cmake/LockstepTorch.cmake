# Provides lockstep::torch, the one way the trainer links LibTorch.
#
# Two sources, chosen by scripts/build.sh:
#  * LOCKSTEP_LIBTORCH_DIR: the headers and CPU libraries unpacked from the pinned PyPI torch
#    wheel (scripts/setup.sh). Only libtorch_cpu and libc10 are linked; no CUDA library is.
#  * otherwise find_package(Torch): a GPU machine's installed PyTorch, via CMAKE_PREFIX_PATH
#    (python3 -c 'import torch; print(torch.utils.cmake_prefix_path)'), CUDA and NCCL included.
# The torch wheel ships no gloo headers, which c10d/ProcessGroupGloo.hpp includes; Debian's
# libgloo-dev provides them (docs/dependencies.md says why that is safe).
set(LOCKSTEP_LIBTORCH_DIR "" CACHE PATH "LibTorch from the torch wheel, CPU libraries only")

find_path(LOCKSTEP_GLOO_INCLUDE_DIR gloo/algorithm.h
  DOC "gloo headers (Debian: libgloo-dev), needed by c10d/ProcessGroupGloo.hpp")
if(NOT LOCKSTEP_GLOO_INCLUDE_DIR)
  message(FATAL_ERROR "gloo headers not found: install libgloo-dev (scripts/setup.sh does) "
                      "or set LOCKSTEP_GLOO_INCLUDE_DIR")
endif()

add_library(lockstep_torch INTERFACE)
add_library(lockstep::torch ALIAS lockstep_torch)

if(LOCKSTEP_LIBTORCH_DIR)
  set(_lt ${LOCKSTEP_LIBTORCH_DIR})
  foreach(_f include/torch/csrc/api/include/torch/torch.h lib/libtorch_cpu.so lib/libc10.so)
    if(NOT EXISTS ${_lt}/${_f})
      message(FATAL_ERROR "LOCKSTEP_LIBTORCH_DIR=${_lt} has no ${_f}; run scripts/setup.sh")
    endif()
  endforeach()
  target_include_directories(lockstep_torch SYSTEM INTERFACE
    ${_lt}/include ${_lt}/include/torch/csrc/api/include ${LOCKSTEP_GLOO_INCLUDE_DIR})
  target_link_libraries(lockstep_torch INTERFACE
    ${_lt}/lib/libtorch_cpu.so ${_lt}/lib/libc10.so Threads::Threads)
  target_compile_definitions(lockstep_torch INTERFACE
    USE_DISTRIBUTED USE_C10D_GLOO _GLIBCXX_USE_CXX11_ABI=1)
  set(LOCKSTEP_TORCH_CUDA OFF)
  set(LOCKSTEP_TORCH_SOURCE "torch wheel, CPU libraries (${_lt})")
else()
  find_package(Torch REQUIRED)
  target_include_directories(lockstep_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS} ${LOCKSTEP_GLOO_INCLUDE_DIR})
  target_link_libraries(lockstep_torch INTERFACE ${TORCH_LIBRARIES})
  target_compile_options(lockstep_torch INTERFACE ${TORCH_CXX_FLAGS})
  target_compile_definitions(lockstep_torch INTERFACE USE_DISTRIBUTED USE_C10D_GLOO)
  if(TARGET torch_cuda OR CUDA_FOUND OR CAFFE2_USE_CUDA)
    target_compile_definitions(lockstep_torch INTERFACE USE_C10D_NCCL LOCKSTEP_WITH_CUDA)
    set(LOCKSTEP_TORCH_CUDA ON)
  else()
    set(LOCKSTEP_TORCH_CUDA OFF)
  endif()
  set(LOCKSTEP_TORCH_SOURCE "installed PyTorch (${Torch_DIR})")
endif()
message(STATUS "LibTorch: ${LOCKSTEP_TORCH_SOURCE}; CUDA: ${LOCKSTEP_TORCH_CUDA}")
