// Writing a file so that readers never see half of it and a failure loses nothing: the
// bytes go to a temporary file beside the target, are flushed to the disk, and the
// temporary file is renamed over the target (atomic on POSIX file systems).
#pragma once

#include <string>
#include <string_view>

namespace memweave {

/// Replaces `path` with `bytes`; where `path` is a symbolic link, the file it leads to
/// (link_target): the link stays. Throws invalid_argument naming `what` (the option or file
/// kind, e.g. "--save") and `path` when it cannot; the previous file, if any, then stays as
/// it was and no temporary file is left behind.
void write_file_atomically(const std::string& path, std::string_view bytes,
                           const std::string& what);

/// Where the symbolic links at the end of `path` lead (`path` itself when it is none): each
/// link's target, relative ones to the link's directory, up to 40 links; the last need not
/// exist. A file written beside and renamed over this replaces the link's target, as one
/// written in place does (renamed over `path`, it replaced the link and left the target
/// stale: `--save latest.ckpt` with latest.ckpt a link; session 45's hostile run).
std::string link_target(const std::string& path);

}  // namespace memweave
