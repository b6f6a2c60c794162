# Every dependency comes from Debian's packages (scripts/setup.sh installs them); nothing
# is fetched at build time.
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(TBB CONFIG REQUIRED)
# Data parallelism (comm/): OpenMPI's C API (libopenmpi-dev); mpirun runs the tests.
find_package(MPI REQUIRED COMPONENTS C)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
# jemalloc is loaded at run time with dlopen(RTLD_LOCAL) so that it never replaces the host
# program's malloc; at build time we only need its header and the soname to open.
pkg_check_modules(JEMALLOC REQUIRED jemalloc)
find_path(JEMALLOC_INCLUDE_DIR jemalloc/jemalloc.h HINTS ${JEMALLOC_INCLUDE_DIRS} REQUIRED)
set(MEMWEAVE_JEMALLOC_SONAME "libjemalloc.so.2" CACHE STRING "jemalloc library opened at run time")

# ONNX import (onnx_import/): Debian's libonnx-dev (its CMake package names protobuf's
# targets, so protobuf comes first).
find_package(Protobuf REQUIRED)
find_package(ONNX CONFIG REQUIRED)

if(MEMWEAVE_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()
if(MEMWEAVE_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()

# CUDA: AUTO builds the backend whenever the toolkit and cuDNN are found.
set(MEMWEAVE_HAVE_CUDA OFF)
set(MEMWEAVE_HAVE_NCCL OFF)
if(NOT MEMWEAVE_WITH_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    find_library(CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib64 lib)
    find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  endif()
  if(CUDAToolkit_FOUND AND CUDNN_LIBRARY AND CUDNN_INCLUDE_DIR)
    set(MEMWEAVE_HAVE_CUDA ON)
    add_library(memweave_cudnn INTERFACE)
    target_include_directories(memweave_cudnn INTERFACE ${CUDNN_INCLUDE_DIR})
    target_link_libraries(memweave_cudnn INTERFACE ${CUDNN_LIBRARY})
    # NCCL (installed with the toolkit): the cuda backend's collectives (comm/).
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib64 lib)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    if(NCCL_LIBRARY AND NCCL_INCLUDE_DIR)
      # As memweave_cudnn: this machine's paths, never exported (memweave::nccl installed).
      add_library(memweave_nccl INTERFACE)
      target_include_directories(memweave_nccl INTERFACE ${NCCL_INCLUDE_DIR})
      target_link_libraries(memweave_nccl INTERFACE ${NCCL_LIBRARY})
      set(MEMWEAVE_HAVE_NCCL ON)
    endif()
    message(STATUS "memweave: cuda backend ON (CUDA ${CUDAToolkit_VERSION}, cuDNN ${CUDNN_LIBRARY})")
  elseif(MEMWEAVE_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "MEMWEAVE_WITH_CUDA=ON but the CUDA toolkit or cuDNN was not found "
      "(CUDAToolkit_FOUND=${CUDAToolkit_FOUND}, CUDNN_LIBRARY=${CUDNN_LIBRARY}). Install them, "
      "point CUDAToolkit_ROOT at the toolkit, or configure with -DMEMWEAVE_WITH_CUDA=AUTO|OFF.")
  else()
    message(STATUS "memweave: cuda backend OFF (CUDA toolkit or cuDNN not found)")
  endif()
endif()
