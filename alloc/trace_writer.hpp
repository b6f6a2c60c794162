// The writer behind device_heap::start_trace. Private to alloc/.
//
// The heap appends fixed-size records to an in-memory buffer while it holds its own mutex
// (a push_back and a clock read); when the buffer is full it takes the batch, locks this
// writer's file mutex, releases the heap mutex and only then formats and writes the batch.
// Taking the file mutex before letting go of the heap mutex keeps batches in event order;
// the lock order is always heap mutex -> file mutex.
//
// Each batch is one write(2) to a file descriptor, with no stdio buffer: a child forked
// from the process (which may call exit(), flushing every stdio buffer it inherited) writes
// nothing into the parent's trace, and the writer writes only in the process that opened it.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace memweave::detail {

class trace_writer {
 public:
  struct record {
    std::uint64_t t_ns;
    std::uint64_t offset;
    std::uint64_t bytes;
    std::int32_t stream;
    char op;  // 'a' or 'f'
  };

  /// Records per batch (about 2 MiB of buffer).
  static constexpr std::size_t batch_records = 1 << 16;

  /// Opens `path` and writes the header. Throws invalid_argument naming the path, the
  /// system's reason and `knob`, what set the path (empty: MEMWEAVE_TRACE).
  trace_writer(const std::string& path, std::size_t block_bytes, const std::string& knob);
  /// Closes the file if close() was not called. Never throws.
  ~trace_writer();
  trace_writer(const trace_writer&) = delete;
  trace_writer& operator=(const trace_writer&) = delete;

  // --- under the owner's (heap's) mutex ---
  /// Buffers one event; true when the batch is full and should be written. Never throws:
  /// a record that cannot be buffered is counted as lost and reported at close().
  bool append(char op, std::uint64_t offset, std::uint64_t bytes, int stream) noexcept {
    if (buffer_.size() == buffer_.capacity() && !grow()) {
      lost_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    const auto now = std::chrono::steady_clock::now();
    const auto t = std::chrono::duration_cast<std::chrono::nanoseconds>(now - start_).count();
    buffer_.push_back(
        {static_cast<std::uint64_t>(t), offset, bytes, static_cast<std::int32_t>(stream), op});
    return buffer_.size() >= batch_records;
  }
  /// Hands over the buffered records (a fresh buffer takes their place).
  std::vector<record> take() noexcept;

  // --- under file_mutex() only ---
  std::mutex& file_mutex() noexcept { return file_mu_; }
  /// Formats and writes a batch. A write error is logged once; later batches are dropped.
  void write(const std::vector<record>& batch) noexcept;
  /// Closes the file, logging any error and lost records. Returns whether the
  /// trace on disk is complete; error() then says what went wrong.
  bool close() noexcept;
  /// The first failure over the trace's life ("" when none, or no memory was left to say).
  const std::string& error() const noexcept { return error_; }

 private:
  bool grow() noexcept;
  // Writes all of `text` to fd_ (under file_mu_, or in the constructor); false with errno set
  // when it cannot.
  bool write_all(std::string_view text) noexcept;
  // Marks the trace failed (errno says why), logged once; later batches are dropped.
  void fail_writing() noexcept;

  // Guarded by the owner's mutex.
  std::vector<record> buffer_;
  // Events dropped for want of host memory (appended under either mutex).
  std::atomic<std::uint64_t> lost_{0};
  const std::chrono::steady_clock::time_point start_;

  // Guarded by file_mu_.
  std::mutex file_mu_;
  int fd_ = -1;
  pid_t owner_ = 0;  // the process that opened it: the only one that writes
  std::string path_;
  bool failed_ = false;
  std::string error_;  // the first failure, for close() to return
};

}  // namespace memweave::detail
