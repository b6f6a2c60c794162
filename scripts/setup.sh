#!/usr/bin/env bash
# Sets up everything memweave needs on a fresh Debian machine and builds one CMake preset.
#   scripts/setup.sh [preset...]      (default: release; presets: release debug asan tsan)
# Installs only the Debian packages that are missing; never downloads anything else.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ pkg-config libjemalloc-dev libtbb-dev libopenblas-dev
          googletest libgtest-dev libbenchmark-dev libopenmpi-dev openmpi-bin
          libonnx-dev libprotobuf-dev protobuf-compiler python3-onnx libonnx-testdata)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing missing Debian packages: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

presets=("$@")
((${#presets[@]})) || presets=(release)
for preset in "${presets[@]}"; do
  # Configure every time (cheap when nothing changed; repairs an interrupted configure).
  cmake --preset "$preset" >/dev/null
  echo "setup: building preset '$preset'"
  # tsan runs only the concurrent tests: it builds those and what they link (target
  # memweave_tests), not the engine, tools and ONNX import that none of them needs.
  target=()
  [ "$preset" = tsan ] && target=(--target memweave_tests)
  # Progress lines are dropped; pipefail makes a failed build fail this script.
  cmake --build --preset "$preset" "${target[@]}" -- -j"$(nproc)" | { grep -v '^\[' || true; }
done
