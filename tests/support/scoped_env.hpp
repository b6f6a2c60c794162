// Test support: set an environment variable for the life of an object.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace memweave::test {

/// Sets `name` to `value` (setenv) and restores its old value, or unsets it, on destruction.
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
