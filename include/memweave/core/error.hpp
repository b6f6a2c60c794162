// The few exception types of the C++ API, and the status codes of the C API.
//
// Hot paths (allocation, free) return nullptr or a status and never throw; everything else
// reports bad input with one of these exceptions. Every message says what was asked, what
// was found and what to do about it. Destructors never throw.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace memweave {

/// Status codes, numerically equal to the matching cudaError_t so that the C API and the
/// interposer can hand them straight back to a CUDA program.
enum class status : int {
  success = 0,                  // cudaSuccess
  invalid_value = 1,            // cudaErrorInvalidValue
  memory_allocation = 2,        // cudaErrorMemoryAllocation
  initialization_error = 3,     // cudaErrorInitializationError
  invalid_device_pointer = 17,  // cudaErrorInvalidDevicePointer
  no_device = 100,              // cudaErrorNoDevice
  not_supported = 801,          // cudaErrorNotSupported
  unknown = 999,                // cudaErrorUnknown
};

/// A short name of a status ("invalid_device_pointer").
const char* to_string(status s) noexcept;

/// Base of every memweave exception.
class error : public std::runtime_error {
 public:
  explicit error(const std::string& what) : std::runtime_error(what) {}
  /// The C API status this error maps to.
  virtual status code() const noexcept { return status::unknown; }
};

/// Bad input: a malformed option, network, file or argument, or a call out of order.
class invalid_argument : public error {
 public:
  using error::error;
  status code() const noexcept override { return status::invalid_value; }
};

/// A budget below the least a policy can run a network with (its floor, which the executor
/// checks before running): a result — the policy does not fit — rather than malformed input,
/// so that a comparison of policies reports it as a row instead of stopping.
class budget_too_small : public invalid_argument {
 public:
  using invalid_argument::invalid_argument;
};

/// A run asked to stop (executor_options::stop: Ctrl-C, SIGTERM) before its first iteration,
/// while it weighed its configurations on the null device: a result of no figures, not a
/// failure of its input.
class interrupted : public error {
 public:
  using error::error;
};

/// A pointer that memweave did not hand out, freed twice, or interior to an allocation.
class invalid_pointer : public error {
 public:
  using error::error;
  status code() const noexcept override { return status::invalid_device_pointer; }
};

/// An allocation that cannot be served. Carries the numbers of the failure.
class out_of_memory : public error {
 public:
  out_of_memory(const std::string& what, std::size_t requested, std::size_t free_bytes,
                std::size_t largest_free_run)
      : error(what), requested_(requested), free_(free_bytes), largest_(largest_free_run) {}
  status code() const noexcept override { return status::memory_allocation; }
  std::size_t requested() const noexcept { return requested_; }
  std::size_t free_bytes() const noexcept { return free_; }
  std::size_t largest_free_run() const noexcept { return largest_; }

 private:
  std::size_t requested_;
  std::size_t free_;
  std::size_t largest_;
};

/// Host memory for host copies (the transfers' pinned pool) ran out: a larger device budget
/// does not help, a larger host pool does. A run that hit it says "host memory ran out", not
/// "out of budget" (an offload's read "out of budget" at 300 of 64 TiB; session 48's hostile
/// run).
class host_out_of_memory : public out_of_memory {
 public:
  using out_of_memory::out_of_memory;
};

/// A failure reported by a device runtime (CUDA, cuDNN, a host-backend worker).
class device_error : public error {
 public:
  using error::error;
  /// With the runtime's own code of the failure (a cudaError_t), which the C API returns
  /// as it is (cudaFree after a kernel that failed: cudaErrorIllegalAddress, not unknown).
  device_error(const std::string& what, int runtime_code)
      : error(what), runtime_code_(runtime_code) {}
  status code() const noexcept override { return status::unknown; }
  /// The runtime's code, or 0 where the runtime gave none.
  int runtime_code() const noexcept { return runtime_code_; }

 private:
  int runtime_code_ = 0;
};

/// A wait for (or query of) device work that the runtime refused without saying whether the
/// work is done (a CUDA graph capture forbids it): the work may still be running, so what it
/// uses must not be handed out.
class wait_refused : public device_error {
 public:
  using device_error::device_error;
};

/// No device of the asked kind is present.
class no_device_error : public error {
 public:
  using error::error;
  status code() const noexcept override { return status::no_device; }
};

}  // namespace memweave

/// Throws memweave::invalid_argument with `message` (any expression convertible to
/// std::string) when `condition` is false.
#define MEMWEAVE_EXPECTS(condition, message)                       \
  do {                                                             \
    if (!(condition)) throw ::memweave::invalid_argument(message); \
  } while (0)
