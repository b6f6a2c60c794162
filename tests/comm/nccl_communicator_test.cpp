// The nccl communicator on one rank (a single host communicator bootstraps it), on the cuda
// device: a reduction scales device memory in place, ordered after the compute stream and
// waited for by it. Label gpu: skips without a CUDA device. Several ranks need several GPUs
// (NCCL refuses two ranks on one): `mpirun -np N memweave train --device cuda` on a machine
// that has them.
#include <gtest/gtest.h>

#include <vector>

#include "memweave/comm/communicator.hpp"
#include "memweave/device/device.hpp"
#include "support/gpu_or_skip.hpp"

namespace memweave {
namespace {

TEST(nccl_communicator_test, one_rank_scales_device_memory_in_stream_order) {
  MEMWEAVE_GPU_OR_SKIP("the nccl communicator");
  device_options o;
  o.kind = "cuda";
  auto dev = make_device(o);
  const auto host = make_single_communicator();
  const auto comm = make_nccl_communicator(*host, *dev);
  EXPECT_EQ(comm->name(), "nccl");
  EXPECT_EQ(comm->size(), 1);
  const std::vector<float> values{1.0f, 2.0f, 4.0f, 8.0f};
  const std::size_t bytes = values.size() * sizeof(float);
  void* d = dev->allocate(bytes);
  stream& s = dev->get_stream(stream_role::compute);
  s.copy_async(d, values.data(), bytes, copy_kind::host_to_device);
  auto r =
      comm->start_allreduce({std::span<float>(static_cast<float*>(d), values.size())}, 0.25f, s);
  r->wait_on(s);
  std::vector<float> out(values.size());
  s.copy_async(out.data(), d, bytes, copy_kind::device_to_host);
  s.synchronize();
  EXPECT_EQ(out, (std::vector<float>{0.25f, 0.5f, 1.0f, 2.0f}));
  EXPECT_GE(r->reduce_seconds(), 0.0);
  dev->deallocate(d, bytes);
}

}  // namespace
}  // namespace memweave
