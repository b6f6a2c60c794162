// The measured candidates of every convolution pass seen so far, keyed by a descriptor
// string that the caller builds from everything that decides speed and workspace (backend,
// pass, input shape, all convolution parameters). Reusable across layers of the same shape
// and, through a file (MEMWEAVE_CONV_CACHE), across runs.
//
// The file is text: a header line "# memweave-conv-cache v1 <fingerprint>", then one line
// per key: the key, then each candidate as "algorithm workspace_bytes seconds", fields
// separated by tabs. The fingerprint names what the timings are valid for (backend, device,
// threads); a file with another fingerprint is foreign.
//
// Not thread-safe: one executor owns one cache.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "memweave/conv_workspace/conv_candidate.hpp"

namespace memweave {

class conv_algorithm_cache {
 public:
  /// The candidates of `key`, or nullptr when not measured yet.
  const std::vector<conv_candidate>* find(const std::string& key) const;
  /// Records the candidates of `key` (replacing any). Keys and algorithm names must not
  /// contain tabs or newlines (invalid_argument otherwise).
  void insert(const std::string& key, std::vector<conv_candidate> candidates);
  std::size_t size() const noexcept { return entries_.size(); }
  /// Whether insert() was called since the last load()/save().
  bool dirty() const noexcept { return dirty_; }

  /// Replaces the contents with the file at `path`. A missing file leaves the cache empty
  /// and returns true. A corrupt file, or one whose fingerprint is not `fingerprint`, is
  /// never trusted: the cache is left empty (so everything is measured again), a warning
  /// naming the file, the line and the reason is logged, and the result is false.
  bool load(const std::string& path, const std::string& fingerprint);
  /// Writes the cache to `path` (through a temporary file renamed into place). Throws
  /// invalid_argument naming the path when it cannot be written. A non-empty file there whose
  /// first line is not a conv cache's header is left as it is (a warning is logged): the
  /// cache is not saved rather than destroy another file.
  void save(const std::string& path, const std::string& fingerprint);

 private:
  std::map<std::string, std::vector<conv_candidate>> entries_;
  bool dirty_ = false;
};

}  // namespace memweave
