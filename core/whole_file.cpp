#include "memweave/core/whole_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "memweave/core/error.hpp"

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
  if (::fstat(f.fd, &st) == 0 && st.st_size > 0)
    bytes.reserve(static_cast<std::size_t>(st.st_size));
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
}

}  // namespace memweave
