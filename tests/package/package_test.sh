#!/usr/bin/env bash
# The installed package, used as an outside program would: installs this build into a
# temporary prefix, builds tests/package/consumer once with find_package(memweave) and once
# with pkg-config (memweave, memweave-cpp and, with the cuda backend, memweave-cpp-cuda),
# runs the programs, checks that the host-only C++ program neither links nor loads a CUDA
# library, builds and runs a program of the onnx component, then moves the prefix and builds
# against it again (relocatable).
#
# package_test.sh BUILD_DIR SOURCE_DIR LIBDIR HAVE_CUDA CMAKE GENERATOR CC CXX
set -euo pipefail
build=$1 source=$2 libdir=$3 have_cuda=$4 cmake=$5 generator=$6 cc=$7 cxx=$8
consumer=$source/tests/package/consumer
work=$(mktemp -d "${TMPDIR:-/tmp}/memweave_package_test.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "== $*"; }

step "install into $work/prefix"
"$cmake" --install "$build" --prefix "$work/prefix" > "$work/install.log"

# No file of the package may name this machine's build, source or CUDA folders: the
# targets files use the prefix they are found in, the dependencies are found again.
# (memweave-cpp-cuda.pc's cudalibdir is the one documented exception.)
if grep -rlE "$build|$source|/usr/local/cuda" "$work/prefix/$libdir/cmake" \
     "$work/prefix/$libdir/pkgconfig/memweave.pc" "$work/prefix/$libdir/pkgconfig/memweave-cpp.pc"; then
  fail "absolute paths in the installed package files above"
fi

# The host-only program: no CUDA library in its NEEDED entries, none loaded when it runs.
check_host_only() {
  local exe=$1
  if readelf -d "$exe" | grep -E 'NEEDED.*(cudart|cublas|cudnn|libcuda)'; then
    fail "$exe links a CUDA library"
  fi
  LD_DEBUG=libs "$exe" > "$work/run.log" 2> "$work/ld_debug.log" || {
    cat "$work/run.log"; fail "$exe failed"; }
  cat "$work/run.log"
  if grep -E 'find library=lib(cudart|cublas|cudnn|cuda)[^ ]*' "$work/ld_debug.log" | head -3 | grep .; then
    fail "$exe loaded a CUDA library"
  fi
}

# Configures and builds the consumer from PREFIX into DIR with find_package; further
# arguments go to the configure.
configure_and_build() {
  local prefix=$1 dir=$2
  shift 2
  "$cmake" -S "$consumer" -B "$dir" -G "$generator" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release "$@" \
    > "$dir.configure.log" 2>&1 || {
    cat "$dir.configure.log"; fail "configuring the consumer against $prefix"; }
  "$cmake" --build "$dir" > "$dir.build.log" 2>&1 || {
    cat "$dir.build.log"; fail "building the consumer against $prefix"; }
}

# find_package, from PREFIX, into build folders DIR-*.
build_with_cmake() {
  local prefix=$1 dir=$2
  # Without the cuda component, with the CUDA toolkit out of reach: the package must not
  # look for it. The onnx component's program too (it must not need CUDA either).
  configure_and_build "$prefix" "$dir-host" -DCONSUMER_WITH_CUDA=OFF -DCONSUMER_WITH_ONNX=ON \
    -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON
  check_host_only "$dir-host/host_only"
  "$dir-host/with_onnx" || fail "the onnx component's program failed"
  LD_LIBRARY_PATH="$prefix/$libdir" "$dir-host/c_api" || fail "the C API program failed"
  if [[ $have_cuda == ON ]]; then
    configure_and_build "$prefix" "$dir-cuda" -DCONSUMER_WITH_CUDA=ON
    check_host_only "$dir-cuda/host_only"
    readelf -d "$dir-cuda/with_cuda" | grep -q 'NEEDED.*libcudart' ||
      fail "with_cuda does not link libcudart"
    "$dir-cuda/with_cuda" || fail "the cuda component's program failed"
  fi
}

# pkg-config, from PREFIX, into folder DIR.
build_with_pkg_config() {
  local prefix=$1 dir=$2
  mkdir -p "$dir"
  export PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig
  # shellcheck disable=SC2046  # pkg-config's flags are meant to split
  "$cxx" -std=c++20 -O1 "$consumer/main.cpp" -o "$dir/host_only" \
    $(pkg-config --cflags --libs memweave-cpp) || fail "pkg-config memweave-cpp: link failed"
  check_host_only "$dir/host_only"
  # shellcheck disable=SC2046
  "$cc" "$consumer/main.c" -o "$dir/c_api" $(pkg-config --cflags --libs memweave) ||
    fail "pkg-config memweave: link failed"
  LD_LIBRARY_PATH="$prefix/$libdir" "$dir/c_api" || fail "the C API program failed"
  if [[ $have_cuda == ON ]]; then
    # shellcheck disable=SC2046
    "$cxx" -std=c++20 -O1 -DEXPECT_CUDA_BACKEND=1 "$consumer/main.cpp" -o "$dir/with_cuda" \
      $(pkg-config --cflags --libs memweave-cpp-cuda) ||
      fail "pkg-config memweave-cpp-cuda: link failed"
    "$dir/with_cuda" || fail "the memweave-cpp-cuda program failed"
  fi
}

step "find_package"
build_with_cmake "$work/prefix" "$work/cmake"
step "pkg-config"
build_with_pkg_config "$work/prefix" "$work/pc"

step "relocated prefix"
mv "$work/prefix" "$work/moved"
build_with_cmake "$work/moved" "$work/cmake-moved"
build_with_pkg_config "$work/moved" "$work/pc-moved"
echo "package test passed"
