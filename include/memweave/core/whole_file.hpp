// Reading a whole file for a parser (a checkpoint, a data set): with POSIX reads, so that a
// read error (a bad disk, a network or FUSE mount gone away) is an error naming the file,
// where an iostream's buffer throws its own failure with neither the file nor the option.
#pragma once

#include <string>

namespace memweave {

/// The bytes of the file at `path`. Throws invalid_argument "cannot read `what` 'path': ..."
/// (the reason from the system) when it cannot be opened or read to its end, and
/// "`what` 'path' is SIZE, more than this machine's memory holds" where it does not fit in
/// memory. The caller refuses directories and devices first, in its own words.
std::string read_whole_file(const std::string& path, const std::string& what);

}  // namespace memweave
