// memweave's cuda device backend (the C++ library, not the C API) over the test stand-in
// for the CUDA runtime (fake_cudart.cpp, first in LD_LIBRARY_PATH): what a GPU's own figures
// for the cost model come to, from its attributes and a timed copy each way, off a GPU. Run
// as `fake_cuda_device_probe SCENARIO`; prints what it sees and exits 0 when the scenario's
// expectations hold, 1 (with "FAIL: ...") otherwise.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <string>

#include "memweave/device/device.hpp"
#include "memweave/device/device_throughput.hpp"
#include "probe_check.hpp"

extern "C" long fake_cudart_copies();

namespace {

bool near(double a, double b) {
  return std::fabs(a - b) <= 1e-9 * std::fabs(b);
}

std::unique_ptr<memweave::device> cuda_device() {
  memweave::device_options d;
  d.kind = "cuda";
  return memweave::make_device(d);
}

// The stand-in's attributes are an H100 SXM's (9.0, 132 multiprocessors, 1980 MHz, HBM3 at
// 2619 MHz on 5120 bits): 128 lanes x 2 x 1.98 GHz x 132 = 66.9 TFLOP/s, and 2 x 2.619 GHz x
// 640 bytes = 3352 GB/s, NVIDIA's datasheet figures.
void check_attributes_figures(const memweave::device_throughput& t) {
  CHECK(near(t.fp32_flops, 2.0 * 128 * 132 * 1980000e3), "fp32 %.6g", t.fp32_flops);
  CHECK(near(t.memory_bytes_per_s, 2.0 * 2619000e3 * 640), "memory %.6g", t.memory_bytes_per_s);
}

// Host-to-device at 25 GB/s, device-to-host at 12.34 (FAKE_CUDART_*_GBPS): the link is the
// slower way, to two significant digits.
void timed_link() {
  auto dev = cuda_device();
  const long before = fake_cudart_copies();
  const std::optional<memweave::device_throughput> t = dev->throughput();
  const long copies = fake_cudart_copies() - before;
  CHECK(t.has_value(), "no throughput on a device with every attribute");
  if (!t) return;
  std::printf("fp32 %.4g flop/s, memory %.4g B/s, link %.4g B/s, %ld copies\n", t->fp32_flops,
              t->memory_bytes_per_s, t->link_bytes_per_s, copies);
  check_attributes_figures(*t);
  CHECK(t->link_bytes_per_s == 1.2e10, "link %.17g, expected 1.2e10", t->link_bytes_per_s);
  CHECK(copies == 8, "%ld copies, expected 4 each way (one untimed first)", copies);
  // Measured once per device: a second ask copies nothing and answers the same.
  const std::optional<memweave::device_throughput> again = dev->throughput();
  CHECK(fake_cudart_copies() - before == copies, "the second ask copied again");
  CHECK(
      again && again->link_bytes_per_s == t->link_bytes_per_s && again->fp32_flops == t->fp32_flops,
      "the second ask answered otherwise");
  CHECK(cudaGetLastError() == cudaSuccess, "the probe left an error behind");
}

// Without page-locked memory (or device memory for the probe) nothing is timed: the link is
// 0 (the cost model keeps its preset's), the attributes' figures stay, and the runtime's
// last error is cleared so the program's next call does not see it.
void untimed_link() {
  auto dev = cuda_device();
  const std::optional<memweave::device_throughput> t = dev->throughput();
  CHECK(t.has_value(), "no throughput on a device with every attribute");
  if (!t) return;
  std::printf("link %.4g B/s\n", t->link_bytes_per_s);
  check_attributes_figures(*t);
  CHECK(t->link_bytes_per_s == 0, "link %.17g, expected 0 (untimed)", t->link_bytes_per_s);
  CHECK(cudaGetLastError() == cudaSuccess, "the failed allocation's error was left behind");
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  const std::string scenario = argc > 1 ? argv[1] : "";
  try {
    if (scenario == "timed_link") {
      timed_link();
    } else if (scenario == "untimed_link") {
      untimed_link();
    } else {
      std::printf("FAIL: unknown scenario '%s'\n", scenario.c_str());
      return 1;
    }
  } catch (const std::exception& e) {
    std::printf("FAIL: exception: %s\n", e.what());
    return 1;
  }
  return probe_failures() == 0 ? 0 : 1;
}
