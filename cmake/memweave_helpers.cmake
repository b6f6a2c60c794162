# memweave_add_library(NAME [CUDA|ONNX|INTERNAL] SOURCES ... DEPS ...): one static,
# position-independent library per folder, public headers under include/. CUDA / ONNX: the
# library belongs to the package's optional `cuda` / `onnx` component (exported to
# memweave-<component>-targets.cmake, loaded only by find_package(memweave COMPONENTS ...)),
# not to the host-only core. INTERNAL: not installed (the command line's own code).
function(memweave_add_library name)
  cmake_parse_arguments(ARG "CUDA;ONNX;INTERNAL" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
    PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  string(REPLACE "memweave_" "" short ${name})
  set_target_properties(${name} PROPERTIES EXPORT_NAME ${short})
  add_library(memweave::${short} ALIAS ${name})
  if(ARG_CUDA)
    set_property(GLOBAL APPEND PROPERTY MEMWEAVE_CUDA_EXPORTED_TARGETS ${name})
  elseif(ARG_ONNX)
    set_property(GLOBAL APPEND PROPERTY MEMWEAVE_ONNX_EXPORTED_TARGETS ${name})
  elseif(NOT ARG_INTERNAL)
    set_property(GLOBAL APPEND PROPERTY MEMWEAVE_EXPORTED_TARGETS ${name})
  endif()
endfunction()

# memweave_add_whole_archive(NAME): the INTERFACE target NAME_whole (memweave::<short>_whole,
# in the cuda component) that links the static library NAME whole (WHOLE_ARCHIVE). For the
# cuda backend's libraries, whose objects shadow host-only ones (device/CMakeLists.txt):
# everything links NAME_whole, never NAME itself, since CMake refuses one library linked both
# whole and plain in one program.
function(memweave_add_whole_archive name)
  add_library(${name}_whole INTERFACE)
  string(REPLACE "memweave_" "" short ${name})
  set_target_properties(${name}_whole PROPERTIES EXPORT_NAME ${short}_whole)
  # CMake 3.25 exports a target named inside $<LINK_LIBRARY> without its namespace: the
  # installed form names the imported target itself.
  target_link_libraries(${name}_whole INTERFACE
    "$<BUILD_INTERFACE:$<LINK_LIBRARY:WHOLE_ARCHIVE,${name}>>"
    "$<INSTALL_INTERFACE:$<LINK_LIBRARY:WHOLE_ARCHIVE,memweave::${short}>>")
  add_library(memweave::${short}_whole ALIAS ${name}_whole)
  set_property(GLOBAL APPEND PROPERTY MEMWEAVE_CUDA_EXPORTED_TARGETS ${name}_whole)
endfunction()

# Test files compile at -O1 in every optimized build (a third less time than -O2 under ASan,
# half of release's -O3: the tests' own code was 350 of the release build's 600 CPU seconds,
# and runs for a small share of their time), and at -O0 under AddressSanitizer (the engine
# test's first unity file: 48.9 s at -O1, 22.4 at -O0; the ASan build's test files were 439
# of its 763 CPU seconds, 2026-11-30); the code under test is the libraries', built at the
# preset's level (release -O3, tsan -O2, asan -O1 with its host kernels at -O2). A Debug
# build keeps its -O0.
function(memweave_test_optimization name)
  if(CMAKE_BUILD_TYPE STREQUAL "Debug")
    return()
  endif()
  if(MEMWEAVE_SANITIZE MATCHES "address")
    target_compile_options(${name} PRIVATE -O0)
  else()
    target_compile_options(${name} PRIVATE -O1)
  endif()
endfunction()

# memweave_add_test(NAME SOURCES ... LIBS ... LABELS ...): a GoogleTest binary whose cases
# are registered one by one with CTest; a GTEST_SKIP shows as skipped, not passed.
function(memweave_add_test name)
  # SLOW: a regular expression over the discovered test names; those it matches are also
  # labelled slow (kept out of CI, run by scripts/test.sh --slow).
  cmake_parse_arguments(ARG "" "TIMEOUT;SLOW" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  # A build that runs only one label's tests (tsan: concurrent) builds only those: the rest
  # would take most of its build time for nothing.
  if(MEMWEAVE_TEST_LABEL AND NOT MEMWEAVE_TEST_LABEL IN_LIST ARG_LABELS)
    return()
  endif()
  add_executable(${name} ${ARG_SOURCES})
  set_property(GLOBAL APPEND PROPERTY MEMWEAVE_TEST_TARGETS ${name})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gtest_main)
  target_precompile_headers(${name} REUSE_FROM memweave_test_pch)
  memweave_test_optimization(${name})
  # gtest_discover_tests splits list values of PROPERTIES, so labels (a list) are set by an
  # include file that runs after discovery, over the discovered names.
  gtest_discover_tests(${name}
    DISCOVERY_MODE PRE_TEST
    TEST_LIST ${name}_TESTS
    PROPERTIES TIMEOUT ${ARG_TIMEOUT}
               SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]"
               ENVIRONMENT "MEMWEAVE_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
  set(labels_file ${CMAKE_CURRENT_BINARY_DIR}/${name}_labels.cmake)
  set(slow_labels ${ARG_LABELS} slow)
  file(WRITE ${labels_file}
    "foreach(_t IN LISTS ${name}_TESTS)\n"
    "  set(_labels \"${ARG_LABELS}\")\n"
    "  if(NOT \"${ARG_SLOW}\" STREQUAL \"\" AND _t MATCHES \"${ARG_SLOW}\")\n"
    "    set(_labels \"${slow_labels}\")\n"
    "  endif()\n"
    "  set_tests_properties(\"\${_t}\" PROPERTIES LABELS \"\${_labels}\")\n"
    "endforeach()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${labels_file})
endfunction()
