"""Train a small PyTorch model with memweave's pool as PyTorch's CUDA allocator.

PyTorch can hand its CUDA allocations to a shared library through
``torch.cuda.memory.CUDAPluggableAllocator``: memweave exports the two entry points it
loads from ``libmemweave.so`` (see ``include/memweave/memweave_torch.h``)::

    void* memweave_torch_malloc(ssize_t size, int device, cudaStream_t stream);
    void  memweave_torch_free(void* ptr, ssize_t size, int device, cudaStream_t stream);

Every tensor PyTorch allocates on the GPU then comes from memweave's device heap: one
arena taken once (``MEMWEAVE_POOL_BYTES``, or ``MEMWEAVE_POOL_FRACTION`` of free device
memory), best-fit placement with coalescing, statistics and optional allocation traces
(``MEMWEAVE_TRACE``) that ``memweave replay`` can replay.

This example cannot run in memweave's own CI or development machines: they have no GPU
and no PyTorch. It needs a CUDA GPU, a CUDA build of PyTorch, and a ``libmemweave.so``
built against the same CUDA major version as that PyTorch (its CUDA runtime must be the
one PyTorch loads). It is kept valid Python (``python3 -m py_compile`` checks it).

Usage::

    MEMWEAVE_POOL_BYTES=8GiB python3 examples/pytorch_pluggable.py --lib build/release/capi/libmemweave.so

``--cuda-graph`` then captures the model's forward in a CUDA graph over the pool, replays it
on new input and checks it against the eager forward (exit 1 if they differ).

Notes:

* ``change_current_allocator`` must run before the first CUDA allocation of the process;
  afterwards PyTorch refuses to switch.
* Streams: PyTorch passes the stream of each allocation, and the same stream when it
  frees it. memweave reuses a freed block at once for that stream and for any other
  stream only once the freeing stream has reached the free (an event), as PyTorch's own
  caching allocator. PyTorch does not forward ``Tensor.record_stream`` to a pluggable
  allocator, so it does nothing here: keep a tensor used on a second stream alive until
  that stream's work is done (or synchronize with it) before dropping it.
* Each GPU gets its own pool (made on the first allocation there), sized by the same
  settings; ``memweaveGetStats`` reports the current device's.
* Out of memory: memweave first waits for frees still pending on other streams and
  retries; then the allocation raises ``RuntimeError: memweave: CUDA out of memory.
  Tried to allocate N bytes on device D: ...`` naming the free bytes, the largest free run
  and the fragmentation (also logged). The CUDA context stays usable: free tensors and
  retry. (It is a RuntimeError, not ``torch.cuda.OutOfMemoryError``: a library outside
  PyTorch can only raise a plain C++ exception.)
* CUDA graphs (``torch.cuda.graph``): the graph's tensors come from memweave's pool; a
  tensor freed during the capture keeps its memory for the rest of the process, each
  capture its own (its replays still write it, and memweave is not told when the graph is
  destroyed; memweave warns once). Keep the graph's outputs alive as long as the graph: a
  tensor made in the capture and freed after it goes back to the pool.
* Without a usable GPU memweave refuses (``MEMWEAVE_DEVICE=auto`` means cuda here); it
  never hands PyTorch simulated host memory unless ``MEMWEAVE_DEVICE=host`` says so.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys


class MemweaveStats(ctypes.Structure):
    """Mirror of ``memweave_stats`` in include/memweave/memweave.h (same field order)."""

    _fields_ = [
        ("bytes_in_use", ctypes.c_size_t),
        ("peak_bytes_in_use", ctypes.c_size_t),
        ("bytes_reserved", ctypes.c_size_t),
        ("free_bytes", ctypes.c_size_t),
        ("largest_free_run", ctypes.c_size_t),
        ("fragmentation", ctypes.c_double),
        ("allocations", ctypes.c_uint64),
        ("frees", ctypes.c_uint64),
        ("failures", ctypes.c_uint64),
        ("invalid_frees", ctypes.c_uint64),
        ("live_allocations", ctypes.c_size_t),
        ("arenas", ctypes.c_size_t),
        ("host_capacity", ctypes.c_size_t),
        ("host_bytes_in_use", ctypes.c_size_t),
        ("host_peak_bytes_in_use", ctypes.c_size_t),
        ("host_live_allocations", ctypes.c_size_t),
    ]


def memweave_stats(lib: ctypes.CDLL) -> MemweaveStats:
    """The pool's numbers, read through the C API of the same library PyTorch loaded."""
    stats = MemweaveStats()
    rc = lib.memweaveGetStats(ctypes.byref(stats))
    if rc != 0:
        lib.memweaveGetLastErrorMessage.restype = ctypes.c_char_p
        raise RuntimeError(lib.memweaveGetLastErrorMessage().decode())
    return stats


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", default=os.environ.get("MEMWEAVE_LIB", "libmemweave.so"),
                        help="path of libmemweave.so (default: $MEMWEAVE_LIB)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--cuda-graph", action="store_true",
                        help="after training, capture the model's forward in a CUDA graph "
                             "(torch.cuda.graph), replay it on new input and check it against "
                             "the eager forward")
    args = parser.parse_args()

    import torch  # imported here so that --help works without PyTorch

    if not torch.cuda.is_available():
        print("this example needs a CUDA GPU and a CUDA build of PyTorch", file=sys.stderr)
        return 1

    # 1. Route PyTorch's CUDA allocations to memweave (before any CUDA tensor exists).
    allocator = torch.cuda.memory.CUDAPluggableAllocator(
        args.lib, "memweave_torch_malloc", "memweave_torch_free")
    torch.cuda.memory.change_current_allocator(allocator)

    # The same library, for memweave's statistics (dlopen returns the loaded instance).
    lib = ctypes.CDLL(args.lib)

    # 2. An ordinary training loop.
    device = torch.device("cuda")
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10),
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    for step in range(args.steps):
        x = torch.randn(args.batch, 3, 32, 32, device=device)
        y = torch.randint(0, 10, (args.batch,), device=device)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        if step % 5 == 0:
            s = memweave_stats(lib)
            print(f"step {step:3d}  loss {loss.item():.4f}  "
                  f"pool in use {s.bytes_in_use / 2**20:.1f} MiB "
                  f"(peak {s.peak_bytes_in_use / 2**20:.1f} MiB of "
                  f"{s.bytes_reserved / 2**20:.1f} MiB), "
                  f"{s.live_allocations} live, fragmentation {s.fragmentation:.1%}")
    torch.cuda.synchronize()
    if args.cuda_graph:
        return check_cuda_graph(torch, model, args.batch, lib)
    return 0


def check_cuda_graph(torch, model, batch: int, lib: ctypes.CDLL) -> int:
    """Captures the forward in a CUDA graph over memweave's pool, replays it on new input and
    compares it with the eager forward; 0 when they agree."""
    device = torch.device("cuda")
    static_x = torch.randn(batch, 3, 32, 32, device=device)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(side):
        for _ in range(3):  # warm-up on a side stream, as PyTorch's documentation asks
            model(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        static_y = model(static_x)
    static_x.copy_(torch.randn(batch, 3, 32, 32, device=device))
    graph.replay()
    with torch.no_grad():
        eager = model(static_x)
    torch.cuda.synchronize()
    same = torch.allclose(static_y, eager, rtol=1e-4, atol=1e-5)
    s = memweave_stats(lib)
    print(f"cuda graph: replay {'matches' if same else 'DIFFERS FROM'} the eager forward; "
          f"pool in use {s.bytes_in_use / 2**20:.1f} MiB, {s.live_allocations} live "
          f"(tensors freed during the capture keep their blocks)")
    # The graph's outputs stay alive as long as the graph (see the notes above).
    del graph, static_y
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
