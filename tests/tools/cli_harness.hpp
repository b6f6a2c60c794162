// Runs the memweave subcommands in-process with argv arrays, for the tools' tests.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "memweave/core/error.hpp"
#include "tools/commands.hpp"

namespace memweave::test {

using command_fn = int (*)(int, const char* const*, std::ostream&);

struct run_result {
  int code = -1;
  std::string out;
};

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

inline std::string error_of(command_fn command, std::vector<std::string> args) {
  try {
    run(command, std::move(args));
  } catch (const error& e) {
    return e.what();
  }
  return "(no error)";
}

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::string temp(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("memweave_cli_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

inline const std::vector<std::string> k_small = {"--net",        "resnet50", "--batch", "2",
                                                 "--image-side", "32",       "--width", "0.0625",
                                                 "--classes",    "5"};

inline std::vector<std::string> with(std::vector<std::string> extra) {
  std::vector<std::string> a = k_small;
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

/// Sets a variable for the life of the object; restores the old value after.
class scoped_env {
 public:
  scoped_env(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~scoped_env() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace memweave::test
