// Helpers for the multi-process tests of io/transport: children started with fork() (and
// exec()), reaped with a timeout and killed by their guard on any early return; counts of
// open descriptors; a private tmpfs mount; the contents and usage of a folder.
//
// Not thread-safe: call from the test's main thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace shardyard::io::testing {

// A child process. Its destructor kills (SIGKILL) and reaps it if it still runs.
class Child {
 public:
  Child() = default;
  explicit Child(pid_t pid) : pid_(pid) {}
  Child(Child&& o) noexcept : pid_(o.pid_) { o.pid_ = -1; }
  Child& operator=(Child&& o) noexcept;
  ~Child();
  pid_t pid() const { return pid_; }
  // Waits at most timeout_ms: the exit code, 128 + signal for a killed child, or -1 when it
  // still runs.
  int wait(int timeout_ms);
  void kill(int signal);

 private:
  pid_t pid_ = -1;
};

// Runs `body` in a forked child (which dies with the parent) and exits with what it returns.
// Call it before the test starts threads.
Child fork_child(const std::function<int()>& body);
// fork() + exec() of `path` with `args`, and `env` added to the environment; the descriptors
// in `keep` survive the exec.
Child spawn(const std::string& path, const std::vector<std::string>& args,
            const std::map<std::string, std::string>& env, const std::vector<int>& keep);

int count_open_fds();
std::vector<std::string> list_dir(const std::string& dir);
uint64_t used_bytes(const std::string& dir);  // statvfs: size - free

// A tmpfs of `bytes` mounted on a fresh temporary folder (root only); unmounted and
// removed when destroyed. ok() is false where mounting is not permitted.
class TmpfsMount {
 public:
  explicit TmpfsMount(uint64_t bytes);
  ~TmpfsMount();
  bool ok() const { return mounted_; }
  const std::string& dir() const { return dir_; }
  const std::string& error() const { return error_; }

 private:
  std::string dir_, error_;
  bool mounted_ = false;
};

// The shm folder a test should use: a private tmpfs when one can be mounted (its usage is
// then the test's alone), else /dev/shm.
const std::string& test_shm_dir();

}  // namespace shardyard::io::testing
