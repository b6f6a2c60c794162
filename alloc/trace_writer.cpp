// The heap's trace writer: buffered under the heap's mutex, formatted and written under
// its own file mutex (see trace_writer.hpp for the hand-over that keeps events in order).
// Invariants: the header is the first line; records are written in the order the heap
// appended them; nothing here throws after construction.
#include "alloc/trace_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "memweave/alloc/trace.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/log.hpp"

namespace memweave::detail {

trace_writer::trace_writer(const std::string& path, std::size_t block_bytes,
                           const std::string& knob)
    : start_(std::chrono::steady_clock::now()), path_(path) {
  // Non-blocking for the open only: a FIFO with no reader fails it (ENXIO) instead of
  // blocking the caller, who holds the heap's or the C API's locks; the writes then block as
  // on any file.
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NONBLOCK, 0644);
  if (fd_ >= 0) {
    const int flags = ::fcntl(fd_, F_GETFL);
    if (flags == -1 || ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK) == -1) {
      const int err = errno;
      ::close(fd_);
      fd_ = -1;
      errno = err;
    }
  }
  owner_ = ::getpid();
  if (fd_ < 0) {
    const int err = errno;
    throw invalid_argument("cannot open the heap trace file '" + path +
                           "' for writing: " + std::strerror(err) +
                           (err == ENXIO ? " (a FIFO that no process reads: start its reader "
                                           "first)"
                                         : "") +
                           "; check that the directory exists and is writable, or change " +
                           (knob.empty() ? std::string("MEMWEAVE_TRACE") : knob));
  }
  const std::string header =
      std::string(trace_header) + " block_bytes=" + std::to_string(block_bytes) + "\n";
  // A header that cannot be written fails the trace as a later batch would: reported when
  // it ends, the run it traces going on.
  if (!write_all(header)) fail_writing();
  buffer_.reserve(batch_records);
}

trace_writer::~trace_writer() {
  close();
}

bool trace_writer::grow() noexcept {
  try {
    buffer_.reserve(buffer_.capacity() == 0 ? batch_records : buffer_.capacity() * 2);
    return true;
  } catch (...) {
    return false;
  }
}

std::vector<trace_writer::record> trace_writer::take() noexcept {
  std::vector<record> out;
  out.swap(buffer_);
  grow();  // a failure here only means the next append tries again
  return out;
}

namespace {

template <class T>
void append_number(std::string& out, T value) {
  char digits[24];
  const auto r = std::to_chars(digits, digits + sizeof digits, value);
  out.append(digits, r.ptr);
}

}  // namespace

void trace_writer::fail_writing() noexcept {
  failed_ = true;
  try {
    error_ = "heap trace '" + path_ + "': write failed (" + std::strerror(errno) +
             "); the rest of the trace is dropped";
    log(log_level::warn, error_);
  } catch (...) {  // no memory for the text: failed_ says it
  }
}

bool trace_writer::write_all(std::string_view text) noexcept {
  while (!text.empty()) {
    const ssize_t n = ::write(fd_, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    text.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

void trace_writer::write(const std::vector<record>& batch) noexcept {
  if (fd_ < 0 || failed_ || batch.empty() || ::getpid() != owner_) return;
  try {
    std::string text;
    text.reserve(batch.size() * 40);
    for (const record& r : batch) {
      append_number(text, r.t_ns);
      text += ' ';
      text += r.op;
      text += ' ';
      append_number(text, r.offset);
      text += ' ';
      append_number(text, r.bytes);
      text += ' ';
      append_number(text, r.stream);
      text += '\n';
    }
    if (!write_all(text)) fail_writing();
  } catch (...) {
    lost_.fetch_add(batch.size(), std::memory_order_relaxed);  // no memory to format it
  }
}

bool trace_writer::close() noexcept {
  if (fd_ < 0) return !failed_;
  const bool close_failed = ::close(fd_) != 0 && ::getpid() == owner_;
  const int err = errno;
  fd_ = -1;
  const std::uint64_t lost = lost_.load();
  try {
    if (close_failed && !failed_) {
      error_ = "heap trace '" + path_ + "': closing failed (" + std::strerror(err) +
               "); the trace may be incomplete";
      log(log_level::warn, error_);
    }
    if (lost != 0) {
      const std::string m = "heap trace '" + path_ + "': " + std::to_string(lost) +
                            " events were lost (out of host memory)";
      log(log_level::warn, m);
      if (error_.empty()) error_ = m;
    }
  } catch (...) {
  }
  failed_ = failed_ || close_failed || lost != 0;
  return !failed_;
}

}  // namespace memweave::detail
