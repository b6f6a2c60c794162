// Choosing and making a device: the MEMWEAVE_DEVICE* options and the backend factory.
//
// Stateless apart from the cached answer of cuda_device_present() (a GPU does not appear
// or vanish while a process runs); every function is thread-safe.
#include <cmath>
#include <limits>

#include "device/host/host_device.hpp"
#include "device/null/null_device.hpp"
#include "memweave/core/config.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/log.hpp"
#include "memweave/core/units.hpp"
#include "memweave/device/device.hpp"
#if MEMWEAVE_HAVE_CUDA
#include "device/cuda/cuda_device.hpp"
#endif

namespace memweave {

const char* to_string(device_kind kind) noexcept {
  switch (kind) {
    case device_kind::cuda:
      return "cuda";
    case device_kind::host:
      return "host";
    case device_kind::null:
      return "null";
  }
  return "unknown";
}

const char* to_string(stream_role role) noexcept {
  switch (role) {
    case stream_role::compute:
      return "compute";
    case stream_role::host_to_device:
      return "host_to_device";
    case stream_role::device_to_host:
      return "device_to_host";
  }
  return "unknown";
}

const char* to_string(copy_kind kind) noexcept {
  switch (kind) {
    case copy_kind::host_to_device:
      return "host_to_device";
    case copy_kind::device_to_host:
      return "device_to_host";
    case copy_kind::device_to_device:
      return "device_to_device";
    case copy_kind::host_to_host:
      return "host_to_host";
  }
  return "unknown";
}

device_options device_options::from_environment() {
  device_options o;
  o.kind = option_string("MEMWEAVE_DEVICE");  // the table checks auto|cuda|host|null

  // The table checks the ranges (an ordinal 0..1023, a capacity of at least 1 byte).
  if (auto ordinal = option_int("MEMWEAVE_CUDA_DEVICE"))
    o.cuda_ordinal = static_cast<int>(*ordinal);
  if (auto bytes = option_bytes("MEMWEAVE_DEVICE_BYTES")) o.capacity_bytes = *bytes;
  if (auto gbps = option_double("MEMWEAVE_HOST_LINK_GBPS")) o.host_link_gbps = *gbps;
  return o;
}

bool cuda_backend_built() noexcept {
#if MEMWEAVE_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

bool cuda_device_present() noexcept {
#if MEMWEAVE_HAVE_CUDA
  static const bool present = cuda_backend::device_count(nullptr) > 0;
  return present;
#else
  return false;
#endif
}

std::string cuda_unavailable_reason() {
#if MEMWEAVE_HAVE_CUDA
  std::string why;
  if (cuda_backend::device_count(&why) > 0) return "";
  return why;
#else
  return "this memweave was built without the cuda backend (no CUDA toolkit or cuDNN found)";
#endif
}

namespace {

std::unique_ptr<device> make_cuda(const device_options& options) {
#if MEMWEAVE_HAVE_CUDA
  return cuda_backend::make_cuda_device(options.cuda_ordinal);
#else
  (void)options;
  throw no_device_error(
      "the cuda device was asked for (MEMWEAVE_DEVICE=cuda) but this memweave was built "
      "without the cuda backend; rebuild with the CUDA toolkit and cuDNN "
      "(-DMEMWEAVE_WITH_CUDA=ON), or run on the simulated device (--device host, "
      "MEMWEAVE_DEVICE=host), or plan without a device (`memweave plan`, MEMWEAVE_DEVICE=null)");
#endif
}

void check_simulated(const device_options& options) {
  MEMWEAVE_EXPECTS(options.capacity_bytes > 0,
                   "device_options::capacity_bytes is 0; expected a positive capacity for the "
                   "host and null devices (" +
                       options.capacity_knob + ", e.g. 8GiB)");
  // The variable's range, so that code and environment accept the same speeds. Below its
  // 1e-4 GB/s a copy of up to 2^47 bytes would last longer than a steady_clock duration
  // holds: the wait overflowed, which turned the throttle off.
  const option_range& link = find_option("MEMWEAVE_HOST_LINK_GBPS")->range;
  const double gbps = options.host_link_gbps;
  MEMWEAVE_EXPECTS(gbps == 0.0 || (gbps >= link.min && gbps <= link.max),
                   "device_options::host_link_gbps is " + format_number(gbps) +
                       "; expected 0 (no throttle) or from " + format_number(link.min) + " to " +
                       format_number(link.max) + " GB/s (MEMWEAVE_HOST_LINK_GBPS)");
}

}  // namespace

std::unique_ptr<device> make_device(const device_options& options) {
  const std::string& k = options.kind;
  std::unique_ptr<device> d;
  if (k == "cuda" || (k == "auto" && cuda_device_present())) {
    d = make_cuda(options);
  } else if (k == "host" || k == "auto") {
    check_simulated(options);
    d = std::make_unique<host_backend::host_device>(options.capacity_bytes, options.host_link_gbps,
                                                    options.capacity_knob);
  } else if (k == "null") {
    check_simulated(options);
    d = std::make_unique<null_backend::null_device>(options.capacity_bytes, options.host_link_gbps,
                                                    options.capacity_knob);
  } else {
    throw invalid_argument("device kind '" + k +
                           "' is not one of auto|cuda|host|null; fix MEMWEAVE_DEVICE "
                           "(device_options::kind)");
  }
  if (log_enabled(log_level::info)) {
    log(log_level::info, std::string("device: ") + to_string(d->kind()) + ", " + d->name());
  }
  return d;
}

}  // namespace memweave
