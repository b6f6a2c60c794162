// The executor's host side of moving tensors (offload, utp, all): pinned host memory and the
// transfer engine. Shared by the executor's files (executor.cpp, executor_moves.cpp,
// executor_schedule.cpp); not part of the public header.
#pragma once

#include <memory>

#include "memweave/alloc/pinned_host_pool.hpp"
#include "memweave/device/device.hpp"
#include "memweave/engine/executor.hpp"
#include "memweave/swap/pinned_pool_host_memory.hpp"
#include "memweave/swap/transfer_engine.hpp"

namespace memweave {

// The host side of moving tensors (offload, utp): pinned host memory and the engine.
struct executor::transfers {
  pinned_host_pool pool;
  pinned_pool_host_memory host;
  transfer_engine engine;
  std::unique_ptr<event> ready;  // recorded on compute before each offload / prefetch
  transfers(device& dev, std::size_t bytes, transfer_options o)
      : pool(dev, bytes), host(pool), engine(dev, host, std::move(o)), ready(dev.create_event()) {}
};

}  // namespace memweave
