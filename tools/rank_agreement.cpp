// The ranks' options compared (rank_agreement.hpp): a hash of each rank's text gathered to
// all, and where one differs, rank 0's text broadcast so that a rank that differs can say
// which option.
#include "rank_agreement.hpp"

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>
#include <sstream>
#include <vector>

#include "memweave/comm/communicator.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/log.hpp"
#include "memweave/core/whole_file.hpp"
#include "memweave/swap/transfer_engine.hpp"
#include "network_run.hpp"

extern char** environ;

namespace memweave {
namespace {

// Outputs: written by rank 0 alone, so the other ranks' may differ (or be absent).
const std::set<std::string> k_outputs = {"json",           "csv",  "svg",
                                         "trace-timeline", "save", "export-onnx"};
// Variables a rank sets for itself: its GPU, its log level, files of its own.
const std::set<std::string> k_own_variables = {"MEMWEAVE_CUDA_DEVICE", "MEMWEAVE_LOG",
                                               "MEMWEAVE_TRACE", "MEMWEAVE_CONV_CACHE",
                                               "MEMWEAVE_SOURCE_DIR"};

// "name=value" lines back to a map (a value holds no newline: see agreement_text).
std::map<std::string, std::string> lines_of(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    out[line.substr(0, eq)] = eq == std::string::npos ? "" : line.substr(eq + 1);
  }
  return out;
}

std::string shown(const std::map<std::string, std::string>& m, const std::string& name) {
  const auto it = m.find(name);
  if (it == m.end()) return name + (name.starts_with("--") ? " not given" : " not set");
  if (!name.starts_with("--")) return name + "=" + it->second;
  // A flag without a value read "--tile  on rank 1".
  return it->second.empty() ? name + " given" : name + " " + it->second;
}

}  // namespace

std::string agreement_text(const std::map<std::string, std::string>& options) {
  std::map<std::string, std::string> all;
  for (const auto& [name, value] : options) {
    if (!k_outputs.contains(name)) all["--" + name] = value;
  }
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    if (!entry.starts_with("MEMWEAVE_")) continue;
    const auto eq = entry.find('=');
    const std::string name = entry.substr(0, eq);
    if (!k_own_variables.contains(name)) {
      all[name] = eq == std::string::npos ? "" : entry.substr(eq + 1);
    }
  }
  // The input files' contents too, not only their paths: each rank reads its own file (one
  // path, other files on other nodes: session 42's hostile run trained apart without a word
  // from another checkpoint, and MPI ended the job at a truncated message with another
  // model). A file that cannot be read is the command's to report.
  for (const char* input : {"net", "init-from"}) {
    const auto it = options.find(input);
    if (it == options.end()) continue;
    const std::string& path = it->second;
    if (std::string(input) == "net" && !is_onnx_net(path)) continue;  // a zoo name
    std::string digest = "unreadable";
    try {
      const std::string bytes = read_whole_file(path, "input");
      char hex[32];
      std::snprintf(hex, sizeof hex, "%016llx",
                    static_cast<unsigned long long>(transfer_checksum(bytes.data(), bytes.size())));
      digest = std::string("checksum ") + hex + ", " + std::to_string(bytes.size()) + " bytes";
    } catch (const error&) {
    }
    all["--" + std::string(input) + "'s file"] = digest;
  }
  std::string text;
  for (const auto& [name, value] : all) {
    std::string v = value;
    for (char& c : v) {
      if (c == '\n') c = ' ';  // one line an entry
    }
    text += name + "=" + v + "\n";
  }
  return text;
}

void warn_outputs_of_other_ranks(const communicator& comm,
                                 const std::map<std::string, std::string>& options) {
  if (comm.rank() == 0) return;
  for (const auto& [name, value] : options) {
    if (!k_outputs.contains(name)) continue;
    log(log_level::warn, "rank " + std::to_string(comm.rank()) + ": --" + name + " " + value +
                             " is not written: rank 0 writes the outputs (give them to rank 0)");
  }
}

void check_ranks_agree(communicator& comm, const std::string& text) {
  if (comm.size() <= 1) return;
  // The text's 64-bit checksum (the transfers' own; a collision between the ranks' command
  // lines is not a case to plan for) in two exact 32-bit halves, and its length (for rank 0's
  // broadcast).
  const std::uint64_t h = transfer_checksum(text.data(), text.size());
  const std::array<double, 3> mine = {static_cast<double>(h >> 32),
                                      static_cast<double>(h & 0xffffffffu),
                                      static_cast<double>(text.size())};
  const std::vector<double> all = comm.allgather(mine);
  std::vector<int> differ;
  for (int r = 1; r < comm.size(); ++r) {
    const auto at = static_cast<std::size_t>(3 * r);
    if (all[at] != all[0] || all[at + 1] != all[1] || all[at + 2] != all[2]) differ.push_back(r);
  }
  if (differ.empty()) return;
  // Rank 0's text to every rank: a rank that differs says where.
  std::string first(static_cast<std::size_t>(all[2]), '\0');
  if (comm.rank() == 0) first = text;
  comm.broadcast_host(std::as_writable_bytes(std::span<char>(first.data(), first.size())), 0);
  // Every rank has rank 0's text before any throws: a rank that agrees threw first, and its
  // failure notice ended the broadcast on the rank that differs, which then named no option
  // (1 run in 6 at 3 ranks; session 42's hostile run).
  (void)comm.allgather(std::array<double, 1>{0.0});
  const std::string advice =
      "; start every rank with the same command line and MEMWEAVE_* variables (the output "
      "options, and MEMWEAVE_CUDA_DEVICE, _LOG, _TRACE and _CONV_CACHE, may differ)";
  if (text != first) {
    const auto here = lines_of(text), there = lines_of(first);
    std::set<std::string> names;
    for (const auto& [n, v] : here) names.insert(n);
    for (const auto& [n, v] : there) names.insert(n);
    for (const std::string& n : names) {
      const auto a = here.find(n), b = there.find(n);
      if (a != here.end() && b != there.end() && a->second == b->second) continue;
      throw invalid_argument("the ranks were started with different options: " + shown(here, n) +
                             " on rank " + std::to_string(comm.rank()) + ", " + shown(there, n) +
                             " on rank 0" + advice);
    }
  }
  std::string list;
  for (int r : differ) list += (list.empty() ? "" : ", ") + std::to_string(r);
  throw invalid_argument("the ranks were started with different options: rank(s) " + list +
                         " differ from rank 0 (each names the option)" + advice);
}

}  // namespace memweave
