// Runs the memweave subcommands in-process with argv arrays, for the tools' tests.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "memweave/core/error.hpp"
#include "support/scoped_env.hpp"
#include "tools/commands.hpp"

namespace memweave::test {

using command_fn = int (*)(int, const char* const*, std::ostream&);

/// What a command returned and printed.
struct run_result {
  int code = -1;
  std::string out;
};

/// Runs `command` with argv {"memweave", "cmd", args...}.
inline run_result run(command_fn command, std::vector<std::string> args) {
  args.insert(args.begin(), {"memweave", "cmd"});
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out;
  run_result r;
  r.code = command(static_cast<int>(argv.size()), argv.data(), out);
  r.out = out.str();
  return r;
}

/// The message of the memweave::error `command` throws, or "(no error)".
inline std::string error_of(command_fn command, std::vector<std::string> args) {
  try {
    run(command, std::move(args));
  } catch (const error& e) {
    return e.what();
  }
  return "(no error)";
}

/// The contents of a file ("" when unreadable).
inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// A path in the temporary directory, unique to this process.
inline std::string temp(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("memweave_cli_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

/// A small ResNet-50 at CIFAR size: every layer, little memory.
inline const std::vector<std::string> k_small = {"--net",        "resnet50", "--batch", "2",
                                                 "--image-side", "32",       "--width", "0.0625",
                                                 "--classes",    "5"};

/// k_small followed by `extra`.
inline std::vector<std::string> with(std::vector<std::string> extra) {
  std::vector<std::string> a = k_small;
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

/// k_small without its --batch (a --max-batch search chooses the batch), then `extra`.
inline std::vector<std::string> search_with(std::vector<std::string> extra) {
  std::vector<std::string> a;
  for (std::size_t i = 0; i < k_small.size(); ++i) {
    if (k_small[i] == "--batch") {
      ++i;
      continue;
    }
    a.push_back(k_small[i]);
  }
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

}  // namespace memweave::test
