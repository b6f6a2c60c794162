# Install rules: headers, libraries, the CLI, an exported CMake package
# (find_package(memweave) gives memweave::memweave) and a pkg-config file.
include(CMakePackageConfigHelpers)
get_property(_mw_targets GLOBAL PROPERTY MEMWEAVE_EXPORTED_TARGETS)
install(TARGETS ${_mw_targets} memweave_lib EXPORT memweave-targets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/memweave DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT memweave-targets NAMESPACE memweave::
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/memweave)
configure_package_config_file(cmake/memweave-config.cmake.in
  ${PROJECT_BINARY_DIR}/memweave-config.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/memweave)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/memweave-config-version.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/memweave-config.cmake
  ${PROJECT_BINARY_DIR}/memweave-config-version.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/memweave)
configure_file(cmake/memweave.pc.in ${PROJECT_BINARY_DIR}/memweave.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/memweave.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
