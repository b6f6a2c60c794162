// Temporary file, fsync, rename: POSIX calls, so that the data is on the disk before the
// rename makes it the target's.
#include "memweave/core/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "memweave/core/error.hpp"

namespace memweave {

namespace {

// The temporary file: closed, and removed unless kept.
class temp_file {
 public:
  explicit temp_file(std::string path)
      : path_(std::move(path)), fd_(::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644)) {}
  ~temp_file() {
    if (fd_ >= 0) ::close(fd_);
    if (!kept_) std::remove(path_.c_str());
  }
  temp_file(const temp_file&) = delete;
  temp_file& operator=(const temp_file&) = delete;
  int fd() const noexcept { return fd_; }
  const std::string& path() const noexcept { return path_; }
  // Closes it; false with errno set when the close (the last write-back) failed.
  bool close() noexcept {
    const int fd = fd_;
    fd_ = -1;
    return ::close(fd) == 0;
  }
  void keep() noexcept { kept_ = true; }

 private:
  std::string path_;
  int fd_;
  bool kept_ = false;
};

}  // namespace

std::string link_target(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p(path);
  for (int hops = 0; hops < 40 && fs::is_symlink(p, ec); ++hops) {
    const fs::path target = fs::read_symlink(p, ec);
    if (ec) break;
    p = target.is_absolute() ? target : p.parent_path() / target;
  }
  return p.string();
}

void write_file_atomically(const std::string& path, std::string_view bytes,
                           const std::string& what) {
  auto fail = [&](const std::string& doing) {
    throw invalid_argument(what + " '" + path + "': " + doing + " failed (" + std::strerror(errno) +
                           "); give a path in a writable directory with space left");
  };
  const std::string target = link_target(path);
  temp_file tmp(target + ".tmp-" + std::to_string(::getpid()));
  if (tmp.fd() < 0) fail("creating '" + tmp.path() + "'");
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ::ssize_t n = ::write(tmp.fd(), bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("writing '" + tmp.path() + "'");
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(tmp.fd()) != 0) fail("flushing '" + tmp.path() + "'");
  if (!tmp.close()) fail("closing '" + tmp.path() + "'");
  if (std::rename(tmp.path().c_str(), target.c_str()) != 0) {
    fail(target == path ? "renaming over it" : "renaming over '" + target + "', where it leads");
  }
  tmp.keep();
}

}  // namespace memweave
