#!/usr/bin/env bash
# Packs the release build's gpu test programs and `memweave`, with the non-CUDA libraries
# they load, into .dev/mw.tar.xz (about 11 MB) for a GPU machine lent through the tool
# library's `device` (/work/.library/device): that machine starts bare, has the CUDA runtime
# and cuBLAS under /usr/local/cuda and PyTorch's cuDNN and NCCL wheels, and nothing of
# Debian's. On it (carry [".dev"]):
#   mkdir -p /tmp/mw && tar xJf .dev/mw.tar.xz -C /tmp/mw && bash /tmp/mw/gpu_tests.sh
# runs every gpu-labelled program with MEMWEAVE_REQUIRE_GPU=1 (a skip is a failure) and prints
# one line per program; `bash /tmp/mw/env.sh memweave train ...` runs the CLI there.
# Build first: scripts/setup.sh release (or ninja in build/release).
set -euo pipefail
cd "$(dirname "$0")/.."
build=build/release
stage=.dev/stage
rm -rf "$stage" && mkdir -p "$stage/bin" "$stage/lib"
mkdir -p .git/info && grep -qx '/.dev/' .git/info/exclude 2>/dev/null || echo '/.dev/' >>.git/info/exclude
programs=(tests/comm/memweave_nccl_communicator_test tests/device/memweave_cuda_device_test
  tests/engine/kernels_cuda/memweave_cuda_context_test
  tests/engine/kernels_cuda/memweave_cuda_kernels_test
  tests/engine/kernels_cuda/memweave_cuda_layer_steps_test
  tests/engine/kernels_cuda/memweave_cuda_split_step_test
  tests/engine/runtime/memweave_cuda_executor_test tools/memweave
  tests/capi/memweave_cuda_dropin_test tests/capi/memweave_cuda_dropin_probe
  capi/libmemweave_preload.so)
for p in "${programs[@]}"; do cp "$build/$p" "$stage/bin/"; done
# The page-locked host pool dlopens jemalloc (ldd below does not see it).
cp -L "$(ldconfig -p | awk '/libjemalloc\.so\.2 .*x86-64/ {print $NF; exit}')" "$stage/lib/"
# What the programs load from Debian (ldd here), not the CUDA libraries: the machine's own.
ldd "$stage"/bin/* | awk '/=> \// {print $3}' | sort -u |
  grep -vE '/(libcuda|libcudart|libcublas|libcublasLt|libcudnn[^/]*|libnccl|libnvrtc|libnvJitLink)\.so' |
  grep -vE '/(libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|ld-linux-x86-64)\.so' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
cat >"$stage/env.sh" <<'ENV'
#!/usr/bin/env bash
# Runs "$@" with the packed programs and libraries first, then the machine's CUDA ones.
here=$(cd "$(dirname "$0")" && pwd)
wheels=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
export LD_LIBRARY_PATH="$here/bin:$here/lib:/usr/local/cuda/lib64:$wheels/cudnn/lib:$wheels/nccl/lib"
export PATH="$here/bin:$PATH"
exec "$@"
ENV
cat >"$stage/gpu_tests.sh" <<'RUN'
#!/usr/bin/env bash
# Every packed gpu test program, a skip counted as a failure; one line each, then the total.
here=$(cd "$(dirname "$0")" && pwd)
export MEMWEAVE_REQUIRE_GPU=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
failed=0
for t in "$here"/bin/*_test; do
  if bash "$here/env.sh" "$t" --gtest_brief=1 >"/tmp/$(basename "$t").log" 2>&1; then
    echo "PASS $(basename "$t"): $(grep -E '^\[  PASSED  \]' "/tmp/$(basename "$t").log")"
  else
    failed=1
    echo "FAIL $(basename "$t")"
    tail -40 "/tmp/$(basename "$t").log"
  fi
done
[ -n "${OUT:-}" ] && cp /tmp/*_test.log "$OUT/" 2>/dev/null
exit $failed
RUN
tar cJf .dev/mw.tar.xz -C "$stage" .
rm -rf "$stage"
ls -l .dev/mw.tar.xz
