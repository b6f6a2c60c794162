#!/usr/bin/env bash
# The main job: sets up (Debian packages, configure, build) and trains a network on the
# host backend under a memory budget, once per policy, printing per iteration the loss,
# speed and device memory, then a summary of what memory did.
#   scripts/run.sh                 the default run below
#   scripts/run.sh ARGS...         `memweave train ARGS...` instead
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh release >/dev/null
bin=build/release/tools/memweave
if (($#)); then
  exec "$bin" train "$@"
fi
# ResNet-50's topology at CIFAR size: with this budget the baseline (every tensor alive for
# the whole iteration) does not fit, liveness does, and both compute the same losses.
net=(--net resnet50 --batch 16 --image-side 32 --width 0.25 --classes 10)
echo "== planning on the null device (no memory touched)"
"$bin" plan "${net[@]}" --policy baseline,liveness --budget 32MiB
echo
echo "== training on the host backend under the same 32 MiB budget"
exec "$bin" train "${net[@]}" --policy baseline,liveness --budget 32MiB --iterations 20 \
  --lr 0.002 --device host --svg build/release/memory.svg --json build/release/memory.json
