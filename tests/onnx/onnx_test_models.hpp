// The ONNX models of the importer's tests, written by tests/onnx/make_onnx_models.py with
// Debian's /usr/bin/python3 (python3-onnx; a python3 earlier on PATH may lack the module)
// at test time, once per build folder and version of the script: the first test process to
// need them generates them under MEMWEAVE_ONNX_MODELS_DIR, the others reuse them.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "memweave/device/device.hpp"
#include "memweave/engine/executor.hpp"
#include "memweave/onnx/import_onnx.hpp"

namespace memweave::test {

inline constexpr const char* k_system_python = "/usr/bin/python3";

namespace detail {

// Removes a folder when the test program exits.
struct folder_remover {
  std::filesystem::path path;
  ~folder_remover() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// Runs the generator into a folder of this process, then renames it into place; a process
// that loses the race to it keeps the winner's, the same files. "" or the failure.
inline std::string generate_models(const std::filesystem::path& dir,
                                   const std::filesystem::path& script) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path tmp = dir.string() + ".tmp" + std::to_string(::getpid());
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp);  // and its parent
  const std::string cmd = std::string(k_system_python) + " " + script.string() + " " + tmp.string();
  if (std::system(cmd.c_str()) != 0) {
    fs::remove_all(tmp, ec);
    return "the generator failed: " + cmd;
  }
  fs::rename(tmp, dir, ec);
  if (ec) fs::remove_all(tmp, ec);
  return "";
}

}  // namespace detail

/// The folder holding the generated models, or "" when they cannot be made; `why` then
/// says why (for GTEST_SKIP: /usr/bin/python3 without the onnx module). A failing generator
/// with the module present is not a skip: `why` says so and the tests fail.
inline const std::string& onnx_models_dir(std::string* why = nullptr) {
  static std::string reason;
  static const std::string dir = [] {
    namespace fs = std::filesystem;
    const char* src = std::getenv("MEMWEAVE_SOURCE_DIR");
    const fs::path script = fs::path(src ? src : ".") / "tests" / "onnx" / "make_onnx_models.py";
    // One folder per version of the script (its modification time), never removed while
    // tests may read it: a new script gets a new folder.
    const fs::path out =
        fs::path(MEMWEAVE_ONNX_MODELS_DIR) /
        ("script_" + std::to_string(fs::last_write_time(script).time_since_epoch().count()));
    std::error_code ec;
    if (fs::exists(out / "all_ops.onnx", ec)) return out.string();
    const std::string probe = std::string(k_system_python) + " -c 'import onnx' 2>/dev/null";
    if (std::system(probe.c_str()) != 0) {
      reason = std::string(k_system_python) +
               " cannot import onnx: install python3-onnx (scripts/setup.sh does) to run the "
               "ONNX import tests";
      return std::string();
    }
    reason = detail::generate_models(out, script);
    return out.string();
  }();
  if (why) *why = reason;
  return dir;
}

/// A folder of this process for the files a test writes, removed when it exits.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    const std::filesystem::path p =
        std::filesystem::temp_directory_path() / ("memweave_onnx_" + std::to_string(::getpid()));
    std::filesystem::create_directories(p);
    static const detail::folder_remover cleanup{p};
    return p.string();
  }();
  return dir;
}

/// Skips the test when the models cannot be made; fails it when the generator broke.
#define MEMWEAVE_ONNX_MODELS_OR_SKIP()                                  \
  do {                                                                  \
    std::string why_;                                                   \
    const std::string& dir_ = ::memweave::test::onnx_models_dir(&why_); \
    if (dir_.empty()) GTEST_SKIP() << why_;                             \
    ASSERT_TRUE(why_.empty()) << why_;                                  \
  } while (0)

/// The path of the generated model `name` ("all_ops" -> DIR/all_ops.onnx).
inline std::string model_path(const std::string& name) {
  return onnx_models_dir() + "/" + name + ".onnx";
}

/// An imported model ready to run: a small host device and an executor under `policy`, one
/// kernel thread, the model's weights written. `ex` refers to `dev`: keep them together.
struct imported_run {
  std::unique_ptr<device> dev;
  std::unique_ptr<executor> ex;
};

inline imported_run start_imported(const imported_model& m, const std::string& policy,
                                   float learning_rate = 0.01f, std::size_t budget = 0) {
  device_options d;
  d.kind = "host";
  d.capacity_bytes = std::size_t{256} << 20;
  imported_run r;
  r.dev = make_device(d);
  executor_options o;
  o.policy = executor_policy::parse(policy);
  o.threads = 1;
  o.learning_rate = learning_rate;
  o.budget_bytes = budget;
  // One convolution algorithm: then every policy and budget computes the same bits.
  o.conv_ws = conv_ws_options::parse("fixed:im2col_image", "test");
  r.ex = std::make_unique<executor>(m.net, *r.dev, o);
  for (const auto& [name, v] : m.weights) r.ex->write(name, v);
  return r;
}

}  // namespace memweave::test
