// Test support: run a program in a child process with a chosen environment, collect what it
// prints (stdout and stderr together) and kill it past a timeout, so that a probe that
// deadlocks fails its test instead of hanging the suite.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace memweave::test {

struct child_result {
  int exit_code = -1;  // 128 + the signal when it was killed by one
  bool timed_out = false;
  std::string output;  // stdout and stderr
};

/// This process's environment less the variables whose "NAME=" starts with one of `prefixes`.
inline std::vector<std::string> environment_without(std::initializer_list<const char*> prefixes) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    bool dropped = false;
    for (const char* p : prefixes) dropped = dropped || std::strncmp(*e, p, std::strlen(p)) == 0;
    if (!dropped) env.emplace_back(*e);
  }
  return env;
}

/// Runs `argv` (argv[0] the program's path) with exactly `env`, in a process group of its
/// own; SIGKILLs the group after `timeout_s` (children it forked too, which could otherwise
/// hold the output pipe open).
inline child_result run_child(std::vector<std::string> argv, std::vector<std::string> env,
                              int timeout_s) {
  child_result r;
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  std::vector<char*> envp;
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return r;  // the dup2 below clears it on the child's ends
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attributes, 0);
  pid_t pid = 0;
  const int spawned = ::posix_spawn(&pid, args[0], &actions, &attributes, args.data(), envp.data());
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (spawned != 0) {
    ::close(fds[0]);
    r.output = "posix_spawn " + argv[0] + " failed: " + std::strerror(spawned);
    return r;
  }
  // Reads the output on a thread: a child that fills the pipe would otherwise block forever.
  std::thread reader([&] {
    char buf[4096];
    for (;;) {
      const ssize_t n = ::read(fds[0], buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      r.output.append(buf, static_cast<std::size_t>(n));
    }
  });
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  for (;;) {
    if (::waitpid(pid, &status, WNOHANG) == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      r.timed_out = true;
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  reader.join();
  ::close(fds[0]);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

}  // namespace memweave::test
