// Writing a file so that readers never see half of it and a failure loses nothing: the
// bytes go to a temporary file beside the target, are flushed to the disk, and the
// temporary file is renamed over the target (atomic on POSIX file systems).
#pragma once

#include <string>
#include <string_view>

namespace memweave {

/// Replaces `path` with `bytes`. Throws invalid_argument naming `what` (the option or
/// file kind, e.g. "--save") and `path` when it cannot; the previous file, if any, then
/// stays as it was and no temporary file is left behind.
void write_file_atomically(const std::string& path, std::string_view bytes,
                           const std::string& what);

}  // namespace memweave
