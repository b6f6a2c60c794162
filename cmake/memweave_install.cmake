# Install rules: headers, libraries, the CLI, an exported CMake package and pkg-config files.
#
# find_package(memweave) gives memweave::memweave (host-only: no CUDA toolkit needed to use
# it, no CUDA library loaded by the program) and memweave::capi; find_package(memweave
# COMPONENTS cuda) adds memweave::cuda (the cuda backend). The package is relocatable: the
# targets files name no absolute path, and the dependencies (oneTBB, OpenBLAS, the CUDA
# toolkit, cuDNN) are found again on the consumer's machine by memweave-config.cmake.
# pkg-config: memweave (the C API, libmemweave.so), memweave-cpp (the C++ library, host-only)
# and, when the cuda backend is built, memweave-cpp-cuda.
include(CMakePackageConfigHelpers)
set(_mw_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/memweave)
get_property(_mw_targets GLOBAL PROPERTY MEMWEAVE_EXPORTED_TARGETS)
install(TARGETS ${_mw_targets} memweave_lib EXPORT memweave-targets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT memweave-targets NAMESPACE memweave:: DESTINATION ${_mw_cmake_dir})
# The cuda component in its own export set: its file names CUDA::* and memweave::cudnn,
# which only a consumer asking for the component has to find.
if(MEMWEAVE_HAVE_CUDA)
  get_property(_mw_cuda_targets GLOBAL PROPERTY MEMWEAVE_CUDA_EXPORTED_TARGETS)
  install(TARGETS ${_mw_cuda_targets} EXPORT memweave-cuda-targets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(EXPORT memweave-cuda-targets NAMESPACE memweave:: DESTINATION ${_mw_cmake_dir})
endif()
# The onnx component likewise: its file names ONNX's and protobuf's targets.
get_property(_mw_onnx_targets GLOBAL PROPERTY MEMWEAVE_ONNX_EXPORTED_TARGETS)
install(TARGETS ${_mw_onnx_targets} EXPORT memweave-onnx-targets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT memweave-onnx-targets NAMESPACE memweave:: DESTINATION ${_mw_cmake_dir})
install(DIRECTORY include/memweave DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

configure_package_config_file(cmake/memweave-config.cmake.in
  ${PROJECT_BINARY_DIR}/memweave-config.cmake
  INSTALL_DESTINATION ${_mw_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/memweave-config-version.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/memweave-config.cmake
  ${PROJECT_BINARY_DIR}/memweave-config-version.cmake
  DESTINATION ${_mw_cmake_dir})

# pkg-config. The C++ libraries are static, so what they link (oneTBB, OpenBLAS, threads,
# dl; jemalloc is dlopen'ed at run time and never linked) goes in Requires/Libs, not the
# .private fields: a plain `pkg-config --libs` must give a program everything it links.
# -l flags in link order: every library before the ones it uses.
set(MEMWEAVE_PC_CPP_LIBS "-lmemweave_engine -lmemweave_host_kernels -lmemweave_kernel_checks \
-lmemweave_engine_graph -lmemweave_conv_workspace -lmemweave_cache -lmemweave_swap \
-lmemweave_recompute -lmemweave_schedule -lmemweave_comm -lmemweave_alloc -lmemweave_device -lmemweave_core")
set(MEMWEAVE_PC_SYSTEM_LIBS "-pthread")
foreach(_l IN LISTS CMAKE_DL_LIBS)
  string(APPEND MEMWEAVE_PC_SYSTEM_LIBS " -l${_l}")
endforeach()
foreach(_pc memweave memweave-cpp)
  configure_file(cmake/${_pc}.pc.in ${PROJECT_BINARY_DIR}/${_pc}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/${_pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()
if(MEMWEAVE_HAVE_CUDA)
  get_filename_component(MEMWEAVE_PC_CUDNN_LIBDIR ${CUDNN_LIBRARY} DIRECTORY)
  set(MEMWEAVE_PC_NCCL_WHOLE "")
  set(MEMWEAVE_PC_NCCL_LIB "")
  if(MEMWEAVE_HAVE_NCCL)
    set(MEMWEAVE_PC_NCCL_WHOLE "-lmemweave_comm_nccl ")
    set(MEMWEAVE_PC_NCCL_LIB "-lnccl ")
  endif()
  configure_file(cmake/memweave-cpp-cuda.pc.in ${PROJECT_BINARY_DIR}/memweave-cpp-cuda.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/memweave-cpp-cuda.pc
    DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()
