#include "actors/state/worker_spawn.h"

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "actors/state/worker_process.h"

extern char** environ;

namespace shardyard::actors {

namespace {

constexpr int kWorkerFd = 3;  // where the control socket lies in a program started again

// How a reaped process ended: "killed by signal 9 (SIGKILL)", "exited with status 1".
std::string describe_exit(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* abbrev = sigabbrev_np(sig);
    return "killed by signal " + std::to_string(sig) +
           (abbrev ? std::string(" (SIG") + abbrev + ")" : std::string());
  }
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  return "stopped (status " + std::to_string(status) + ")";
}

// Waits up to `timeout` for the child `pid` to end: its pid once reaped (how it ended in
// *status), 0 when the time ran out, -1 on an error of waitpid. The wait ends when the child
// does (poll on a pidfd, Linux 5.3), not at the next tick of a sleep: a loop of 10 ms sleeps
// kept every stop of a worker process about 10 ms longer than the process took to exit
// (docs/performance.md, "Worker processes"). Where pidfd_open is missing, the loop sleeps
// 1 ms between looks.
pid_t wait_child(pid_t pid, std::chrono::milliseconds timeout, int* status) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  const io::UniqueFd pidfd = open_pidfd(pid);
  bool exited = false;  // the pidfd said so
  for (;;) {
    const pid_t got = ::waitpid(pid, status, WNOHANG);
    if (got != 0) return got;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return 0;
    // The pidfd stays readable once the child has exited; a tracer can hold the exit status
    // back a while longer: then the loop sleeps instead of spinning.
    if (pidfd.valid() && !exited) {
      pollfd p{pidfd.get(), POLLIN, 0};
      exited = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count() + 1, 1000))) > 0;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
}

std::string self_binary() {
  char path[4096];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return "/proc/self/exe";
  return std::string(path, static_cast<size_t>(n));
}

// Starts `binary` (empty: this program) again in worker mode on `child`.
Result<pid_t> spawn_program(const io::UnixSocket& child, const std::string& program,
                            const std::string& name) {
  // Everything the child needs is made before it is spawned: between posix_spawn's clone
  // and exec nothing of this process may run.
  const std::string binary = program.empty() ? self_binary() : program;
  std::vector<std::string> env_strings;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view v(*e);
    if (v.rfind(std::string(kWorkerFdEnv) + "=", 0) == 0 ||
        v.rfind(std::string(kWorkerParentEnv) + "=", 0) == 0)
      continue;
    env_strings.emplace_back(v);
  }
  env_strings.push_back(std::string(kWorkerFdEnv) + "=" + std::to_string(kWorkerFd));
  env_strings.push_back(std::string(kWorkerParentEnv) + "=" + std::to_string(::getpid()));
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string arg0 = binary;
  char* argv[] = {arg0.data(), nullptr};
  // dup2 onto the same number would keep close-on-exec: move it off 3 first.
  io::UniqueFd moved;
  int child_end = child.fd();
  if (child_end == kWorkerFd) {
    SY_ASSIGN_OR_RETURN(moved, child.duplicate());
    child_end = moved.get();
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, child_end, kWorkerFd);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0)
    return io_error("cannot start " + name + " as a process of " + binary + ": " +
                    std::strerror(rc));
  return pid;
}

}  // namespace

Result<WorkerProcess> WorkerProcess::start(const io::UnixSocket& child, const std::string& binary,
                                           const std::string& name, int timeout_ms,
                                           const std::function<void(const std::string&)>& log) {
  WorkerProcess p;
  // A program that started a fork server forks its workers from it (no exec, no dynamic
  // loading); where it has none, or it is gone, the program is started again.
  if (binary.empty()) {
    if (auto server = ForkServer::get()) {
      auto forked = server->spawn(child, timeout_ms);
      if (forked.is_ok()) {
        p.pid_ = *forked;
        p.server_ = std::move(server);
        return p;
      }
      log(name + ": " + forked.status().message() + "; the program is started again instead");
    }
  }
  SY_ASSIGN_OR_RETURN(p.pid_, spawn_program(child, binary, name));
  return p;
}

std::string WorkerProcess::reap(bool* signaled) {
  *signaled = false;
  if (pid_ <= 0) return "gone";
  int status = 0;
  // 5 s for a process whose sockets closed to be gone; the fork server reaps its workers
  // and says how they ended.
  auto wait = [&](std::chrono::milliseconds timeout) {
    return server_ ? server_->wait(pid_, timeout, &status) : wait_child(pid_, timeout, &status);
  };
  pid_t got = wait(std::chrono::seconds(5));
  std::string suffix;
  if (got == 0) {
    ::kill(pid_, SIGKILL);
    got = server_ ? wait(std::chrono::seconds(5)) : ::waitpid(pid_, &status, 0);
    suffix = " (it did not exit within 5 s and was killed)";
  }
  const int error = errno;
  pid_ = -1;
  const bool forked = server_ != nullptr;
  server_.reset();
  if (got < 0 && forked) {
    // Its fork server is gone, and its workers went with it (PR_SET_PDEATHSIG).
    *signaled = true;
    return "killed by signal 9 (SIGKILL) with its fork server";
  }
  *signaled = got > 0 && WIFSIGNALED(status) && suffix.empty();
  if (got < 0) return "gone (" + std::string(std::strerror(error)) + ")";
  return describe_exit(status) + suffix;
}

}  // namespace shardyard::actors
