// The conv algorithm cache and its file. A file is trusted only if every line parses and
// the fingerprint matches; otherwise nothing of it is used (timings from another machine or
// a half-written file would make the selection silently wrong).
#include "memweave/conv_workspace/conv_algorithm_cache.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "memweave/core/atomic_file.hpp"
#include "memweave/core/checked.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/log.hpp"
#include "memweave/core/quoted.hpp"

namespace memweave {
namespace {

constexpr std::string_view k_header = "# memweave-conv-cache v1 ";

// The fingerprint a header line names, without trailing blanks (a file edited on Windows
// ends its lines in \r): "" when the line is not a header.
std::string header_fingerprint(const std::string& line) {
  if (!line.starts_with(k_header)) return {};
  std::string f = line.substr(k_header.size());
  while (!f.empty() && (f.back() == '\r' || f.back() == ' ' || f.back() == '\t')) f.pop_back();
  return f;
}

bool has_separator(const std::string& s) {
  return s.find_first_of("\t\n\r") != std::string::npos;
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const auto tab = line.find('\t', start);
    out.push_back(line.substr(start, tab - start));
    if (tab == std::string::npos) return out;
    start = tab + 1;
  }
}

// "algorithm workspace seconds" -> candidate; false when malformed.
bool parse_candidate(const std::string& field, conv_candidate& c) {
  std::istringstream in(field);
  std::string name, ws, secs;
  if (!(in >> name >> ws >> secs) || !(in >> std::ws).eof()) return false;
  auto [p1, e1] = std::from_chars(ws.data(), ws.data() + ws.size(), c.workspace_bytes);
  auto [p2, e2] = std::from_chars(secs.data(), secs.data() + secs.size(), c.seconds);
  if (e1 != std::errc() || p1 != ws.data() + ws.size() || e2 != std::errc() ||
      p2 != secs.data() + secs.size() || !(c.seconds >= 0.0) || !std::isfinite(c.seconds) ||
      c.workspace_bytes > k_max_tensor_bytes) {
    return false;
  }
  c.algorithm = name;
  return true;
}

}  // namespace

const std::vector<conv_candidate>* conv_algorithm_cache::find(const std::string& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second;
}

void conv_algorithm_cache::insert(const std::string& key, std::vector<conv_candidate> candidates) {
  MEMWEAVE_EXPECTS(!key.empty() && !has_separator(key),
                   "conv cache key '" + key + "' is empty or contains a tab or newline");
  for (const auto& c : candidates) {
    MEMWEAVE_EXPECTS(
        !c.algorithm.empty() && c.algorithm.find_first_of(" \t\n\r") == std::string::npos,
        "conv algorithm name '" + c.algorithm + "' is empty or contains spaces");
  }
  entries_[key] = std::move(candidates);
  dirty_ = true;
}

bool conv_algorithm_cache::load(const std::string& path, const std::string& fingerprint) {
  entries_.clear();
  dirty_ = false;
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec)) {
    log(log_level::warn, "conv algorithm cache '" + path +
                             "' is not a regular file; not used, every convolution is measured");
    return false;
  }
  std::ifstream in(path);
  if (!in) return !std::filesystem::exists(path);
  auto reject = [&](std::size_t line, const std::string& why) {
    entries_.clear();
    log(log_level::warn, "conv algorithm cache '" + path + "' line " + std::to_string(line) + ": " +
                             why + "; not trusted, every convolution is measured again");
    return false;
  };
  std::string line;
  if (!std::getline(in, line)) return true;  // empty: nothing to trust, nothing to lose
  if (!line.starts_with(k_header)) {
    return reject(1,
                  "not a memweave conv cache (expected a '# memweave-conv-cache v1' header), "
                  "and it will not be written over");
  }
  if (header_fingerprint(line) != fingerprint) {
    return reject(1, "made for " + quote_text(header_fingerprint(line)) + ", not for '" +
                         fingerprint + "' (another backend, device or thread count)");
  }
  std::size_t number = 1;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    const auto fields = split_tabs(line);
    if (fields.size() < 2 || fields[0].empty()) {
      return reject(number, "expected a key and at least one candidate separated by tabs");
    }
    std::vector<conv_candidate> candidates;
    for (std::size_t i = 1; i < fields.size(); ++i) {
      conv_candidate c;
      if (!parse_candidate(fields[i], c)) {
        return reject(number, "candidate " + quote_text(fields[i]) +
                                  " is not 'algorithm workspace_bytes seconds'");
      }
      candidates.push_back(std::move(c));
    }
    // The selector relies on it (it is its fallback when memory is short).
    if (std::none_of(candidates.begin(), candidates.end(),
                     [](const conv_candidate& c) { return c.workspace_bytes == 0; })) {
      return reject(number, "convolution " + quote_text(fields[0]) +
                                " has no algorithm without workspace, which every one has");
    }
    entries_[fields[0]] = std::move(candidates);
  }
  return true;
}

void conv_algorithm_cache::save(const std::string& path, const std::string& fingerprint) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec)) {
    // Renaming over it would replace a device (MEMWEAVE_CONV_CACHE=/dev/null) or a directory.
    throw invalid_argument("conv algorithm cache '" + path +
                           "' is not a regular file; not written (MEMWEAVE_CONV_CACHE must name "
                           "a file)");
  }
  if (std::ifstream existing(path); existing) {
    // A file that is not a conv cache (MEMWEAVE_CONV_CACHE naming a checkpoint by mistake) is
    // not ours to replace, nor one of another backend, device or thread count (timings that
    // may have taken long to measure): the timings go unsaved rather than destroy it.
    std::string first;
    const bool has_line = static_cast<bool>(std::getline(existing, first));
    if (has_line && !first.starts_with(k_header)) {
      log(log_level::warn, "conv algorithm cache '" + path +
                               "' is not a memweave conv cache (its first line is not '" +
                               std::string(k_header) +
                               "...'): left as it is, the convolution timings measured are "
                               "not saved; point MEMWEAVE_CONV_CACHE at a file of its own");
      dirty_ = false;
      return;
    }
    if (has_line && header_fingerprint(first) != fingerprint) {
      log(log_level::warn,
          "conv algorithm cache '" + path + "' holds the timings of '" + header_fingerprint(first) +
              "': left as it is, those measured for '" + fingerprint +
              "' are not saved; point MEMWEAVE_CONV_CACHE at a file of its own for each backend, "
              "device or thread count (or remove the file to replace it)");
      dirty_ = false;
      return;
    }
  }
  std::string text = std::string(k_header) + fingerprint + "\n";
  char buf[64];
  for (const auto& [key, candidates] : entries_) {
    text += key;
    for (const auto& c : candidates) {
      std::snprintf(buf, sizeof buf, "%.9g", c.seconds);
      text += '\t' + c.algorithm + ' ' + std::to_string(c.workspace_bytes) + ' ' + buf;
    }
    text += '\n';
  }
  // Through a temporary file of this process's own, removed when anything fails: with a
  // fixed "<path>.tmp" a user's file of that name was overwritten and renamed onto the cache,
  // two runs wrote one temporary file, and a full disk left an empty one behind (session
  // 42's hostile run).
  write_file_atomically(path, text, "the conv algorithm cache (MEMWEAVE_CONV_CACHE)");
  dirty_ = false;
}

}  // namespace memweave
