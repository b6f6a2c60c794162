// Names of status codes. No state.
#include "memweave/core/error.hpp"

namespace memweave {

const char* to_string(status s) noexcept {
  switch (s) {
    case status::success:
      return "success";
    case status::invalid_value:
      return "invalid_value";
    case status::memory_allocation:
      return "memory_allocation";
    case status::initialization_error:
      return "initialization_error";
    case status::invalid_device_pointer:
      return "invalid_device_pointer";
    case status::no_device:
      return "no_device";
    case status::not_supported:
      return "not_supported";
    case status::unknown:
      return "unknown";
  }
  return "unknown";
}

}  // namespace memweave
