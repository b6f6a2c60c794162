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
# ResNet-50's topology at CIFAR size under a 15 MiB budget: the baseline (every tensor alive
# for the whole iteration) and liveness alone do not fit; utp (tensor cache + offload to host
# memory, prefetch) and all (utp + recomputation) train, with bit-identical losses. One
# convolution algorithm everywhere (--conv-ws fixed:...): algorithms round differently, and
# the dynamic choice depends on the memory free at each step (try --conv-ws dynamic).
net=(--net resnet50 --batch 16 --image-side 32 --width 0.25 --classes 10
     --conv-ws fixed:im2col_image)
policies=baseline,liveness,utp,all
echo "== planning on the null device (no memory touched)"
"$bin" plan "${net[@]}" --policy "$policies" --budget 15MiB
echo
echo "== training on the host backend under the same budget (link throttled to 8 GB/s)"
MEMWEAVE_HOST_LINK_GBPS=${MEMWEAVE_HOST_LINK_GBPS:-8} exec "$bin" train "${net[@]}" \
  --policy "$policies" --budget 15MiB --iterations 20 --lr 0.002 --device host \
  --svg build/release/memory.svg --json build/release/memory.json
