# CUDA language setup, included once nvcc is known (after find_package(Torch)).
#
# - Architecture: a CUDA LibTorch's cuda.cmake, run inside find_package(Torch), sets
#   CMAKE_CUDA_ARCHITECTURES to OFF and appends its own -gencode flags (from
#   TORCH_CUDA_ARCH_LIST or the visible GPU) to CMAKE_CUDA_FLAGS. Those flags are taken
#   out again and TIERGEN_CUDA_ARCHITECTURES is set on our CUDA targets, so one setting
#   decides, and a stale TORCH_CUDA_ARCH_LIST naming architectures the toolkit dropped
#   cannot break the build.
# - Runtime: the shared cudart, the one LibTorch's CUDA libraries load (CMake's default
#   for .cu sources is the static one, and two cudarts in one process is fragile).
# - Host compiler: when nvcc's host compiler is an older gcc than the C++ compiler
#   (Debian's nvcc 12.4 uses gcc 13 under gcc 14), CMake would put the older gcc's
#   library folder on the final link line, and libstdc++ from it lacks symbols that the
#   newer gcc's objects need (__cxa_call_terminate). The link uses the C++ compiler's.

# Not derived from CMAKE_CUDA_ARCHITECTURES: by now that holds LibTorch's OFF or the
# compiler's default (52 for nvcc 12.4), whatever the command line said.
set(TIERGEN_CUDA_ARCHITECTURES 90 CACHE STRING
    "CUDA architectures of tiergen's kernels (90: H100/H200); wins over TORCH_CUDA_ARCH_LIST")

if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES ${TIERGEN_CUDA_ARCHITECTURES})
endif()
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
enable_language(CUDA)

string(REGEX MATCHALL "-gencode[ =]+arch=[^ ]+" _tiergen_torch_gencode "${CMAKE_CUDA_FLAGS}")
if(_tiergen_torch_gencode)
  string(REGEX REPLACE "-gencode[ =]+arch=[^ ]+" "" CMAKE_CUDA_FLAGS "${CMAKE_CUDA_FLAGS}")
  message(STATUS "tiergen: CUDA: removed LibTorch's ${_tiergen_torch_gencode} from CMAKE_CUDA_FLAGS")
endif()
message(STATUS "tiergen: CUDA: kernels built for architectures ${TIERGEN_CUDA_ARCHITECTURES} "
               "(TIERGEN_CUDA_ARCHITECTURES; also export TORCH_CUDA_ARCH_LIST=9.0 for LibTorch's own checks)")

set(_tiergen_cuda_link_dirs "")
foreach(_dir ${CMAKE_CUDA_IMPLICIT_LINK_DIRECTORIES})
  if(_dir MATCHES "/gcc/" AND NOT _dir IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES)
    message(STATUS "tiergen: CUDA: ${_dir} (nvcc's host compiler) left off the link line; the C++ compiler's libstdc++ is used")
  else()
    list(APPEND _tiergen_cuda_link_dirs ${_dir})
  endif()
endforeach()
set(CMAKE_CUDA_IMPLICIT_LINK_DIRECTORIES ${_tiergen_cuda_link_dirs})

# Architectures and runtime on one of our targets with .cu sources.
function(tiergen_cuda_target target)
  set_target_properties(${target} PROPERTIES CUDA_ARCHITECTURES "${TIERGEN_CUDA_ARCHITECTURES}"
                                             CUDA_RUNTIME_LIBRARY Shared)
endfunction()

# The CUDA runtime LibTorch itself links (no toolkit libraries of our own: nothing in
# tiergen calls cuBLAS, and the toolkit's copy would load ahead of LibTorch's).
function(tiergen_link_torch_cudart target)
  if(TARGET torch::cudart)
    target_link_libraries(${target} PUBLIC torch::cudart)
  else()
    find_package(CUDAToolkit REQUIRED)
    target_link_libraries(${target} PUBLIC CUDA::cudart)
  endif()
endfunction()
