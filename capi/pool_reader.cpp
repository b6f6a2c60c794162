// Grace periods for the pools memweaveReleaseDevicePool destroys (capi_context.hpp).
//
// A reader registers in the counter of the epoch's parity and checks that the epoch did not
// change meanwhile (else it registers again); a release, after unpublishing the pool, moves
// the epoch on and waits until the counter of the epoch it left is zero. A reader either
// registered before the move, so the release waits for it, or sees the new epoch and so
// the unpublished slot: every access is seq_cst, one total order. Readers after the move
// count in the other parity, so a stream of readers never holds a release back.
#include <thread>

#include "capi/capi_context.hpp"

namespace memweave::capi {

pool_reader::pool_reader(context& ctx) noexcept : ctx_(ctx) {
  for (;;) {
    const unsigned epoch = ctx.reader_epoch.load();
    ctx.readers[epoch & 1].fetch_add(1);
    if (ctx.reader_epoch.load() == epoch) {
      parity_ = epoch & 1;
      return;
    }
    ctx.readers[epoch & 1].fetch_sub(1);
  }
}

pool_reader::~pool_reader() {
  ctx_.readers[parity_].fetch_sub(1);
}

void wait_for_pool_readers(context& ctx) {
  std::lock_guard lock(ctx.grace_mutex);
  const unsigned left = ctx.reader_epoch.fetch_add(1);
  while (ctx.readers[left & 1].load() != 0) std::this_thread::yield();
}

}  // namespace memweave::capi
