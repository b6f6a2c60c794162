// An outside C++ program of the installed memweave: a small zoo network planned and run for
// one iteration on the null device. Exits 0 when it worked; EXPECT_CUDA_BACKEND says whether
// the cuda backend must be linked in (memweave::cuda / memweave-cpp-cuda) or not.
#include <cstdio>

#include "memweave/device/device.hpp"
#include "memweave/engine/executor.hpp"
#include "memweave/engine/zoo.hpp"

#ifndef EXPECT_CUDA_BACKEND
#define EXPECT_CUDA_BACKEND 0
#endif

int main() {
  if (memweave::cuda_backend_built() != bool(EXPECT_CUDA_BACKEND)) {
    std::fprintf(stderr, "cuda_backend_built() is %d, expected %d\n",
                 int(memweave::cuda_backend_built()), EXPECT_CUDA_BACKEND);
    return 1;
  }
  const memweave::network net = memweave::make_network(
      "resnet50", {.batch = 2, .image_side = 32, .width_scale = 0.125, .classes = 10});
  memweave::device_options device;
  device.kind = "null";
  auto dev = memweave::make_device(device);
  memweave::executor ex(net, *dev, memweave::executor_options{});
  ex.run_iteration(nullptr, 0);
  const memweave::policy_report report = ex.report();
  std::printf("resnet50 on null: policy %s, peak %zu bytes\n", report.policy.c_str(),
              report.peak_bytes);
  return report.fits && report.peak_bytes > 0 ? 0 : 1;
}
