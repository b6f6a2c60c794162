#include "memweave/core/whole_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <new>
#include <stdexcept>

#include "memweave/core/error.hpp"
#include "memweave/core/units.hpp"

namespace memweave {
namespace {

struct file_descriptor {
  int fd;
  explicit file_descriptor(const std::string& path)
      : fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {}
  ~file_descriptor() {
    if (fd >= 0) ::close(fd);
  }
  file_descriptor(const file_descriptor&) = delete;
  file_descriptor& operator=(const file_descriptor&) = delete;
};

}  // namespace

std::string read_whole_file(const std::string& path, const std::string& what) {
  const auto failed = [&] {
    return invalid_argument("cannot read " + what + " '" + path + "': " + std::strerror(errno));
  };
  const file_descriptor f(path);
  if (f.fd < 0) throw failed();
  std::string bytes;
  struct stat st {};
  const bool sized = ::fstat(f.fd, &st) == 0 && st.st_size > 0;
  // A file larger than memory (a sparse 1 TiB one given as a checkpoint) is named as such:
  // the bad_alloc reached the command line's handler, which blamed the options' sizes.
  const auto too_large = [&] {
    return invalid_argument(
        what + " '" + path + "' is " +
        format_bytes(sized ? static_cast<std::size_t>(st.st_size) : bytes.size()) +
        ", more than this machine's memory holds to read it; give another "
        "file");
  };
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  if (sized && pages > 0 && page > 0 &&
      static_cast<std::uintmax_t>(st.st_size) / static_cast<std::uintmax_t>(page) >
          static_cast<std::uintmax_t>(pages)) {
    throw too_large();
  }
  try {
    if (sized) bytes.reserve(static_cast<std::size_t>(st.st_size));
    char chunk[1 << 16];
    for (;;) {
      const ssize_t n = ::read(f.fd, chunk, sizeof chunk);
      if (n == 0) return bytes;
      if (n < 0) {
        if (errno == EINTR) continue;
        throw failed();
      }
      bytes.append(chunk, static_cast<std::size_t>(n));
    }
  } catch (const std::bad_alloc&) {
    throw too_large();
  } catch (const std::length_error&) {
    throw too_large();
  }
}

}  // namespace memweave
