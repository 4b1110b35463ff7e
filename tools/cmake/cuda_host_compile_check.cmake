# Compile-only check of the CUDA branches (#ifdef TIERGEN_WITH_CUDA) of the core's C++
# sources, for machines whose LibTorch has no CUDA but which have the CUDA toolkit:
# they are compiled against LibTorch's own c10/cuda and ATen/cuda headers and the
# toolkit's, with TIERGEN_WITH_CUDA defined. Nothing links the objects (there is no
# libc10_cuda to link), but streams, events and kernel launches are type-checked.

find_package(CUDAToolkit QUIET)
if(NOT CUDAToolkit_FOUND)
  return()
endif()

set(_tiergen_cuda_host_sources "")
foreach(_src ${TIERGEN_CORE_SOURCES})
  file(STRINGS ${_src} _uses_cuda REGEX "TIERGEN_WITH_CUDA")
  if(_uses_cuda)
    list(APPEND _tiergen_cuda_host_sources ${_src})
  endif()
endforeach()
if(NOT _tiergen_cuda_host_sources)
  return()
endif()

# A CPU-only LibTorch ships c10/cuda headers but not the one its CMake build generates;
# this is its content in a CUDA LibTorch built as shared libraries.
set(_shim_dir ${PROJECT_BINARY_DIR}/generated/cuda_host_check)
find_file(_torch_cuda_macros c10/cuda/impl/cuda_cmake_macros.h PATHS ${TORCH_INCLUDE_DIRS} NO_DEFAULT_PATH)
if(NOT _torch_cuda_macros)
  file(WRITE ${_shim_dir}/c10/cuda/impl/cuda_cmake_macros.h
       "#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
endif()

add_library(tiergen_cuda_host_compile_check OBJECT ${_tiergen_cuda_host_sources})
# Linking an object library only brings the core's usage requirements (LibTorch,
# spdlog, include folders); its objects are never linked.
target_link_libraries(tiergen_cuda_host_compile_check PRIVATE tiergen_core)
target_compile_definitions(tiergen_cuda_host_compile_check PRIVATE TIERGEN_WITH_CUDA=1)
target_include_directories(tiergen_cuda_host_compile_check PRIVATE ${_shim_dir})
target_include_directories(tiergen_cuda_host_compile_check SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
target_compile_options(tiergen_cuda_host_compile_check PRIVATE -Wall -Wextra -Wno-unused-parameter)
