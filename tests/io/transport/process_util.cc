#include "process_util.h"

#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "io/transport/unique_fd.h"

namespace shardyard::io::testing {

Child& Child::operator=(Child&& o) noexcept {
  if (this != &o) {
    this->~Child();
    pid_ = o.pid_;
    o.pid_ = -1;
  }
  return *this;
}

Child::~Child() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status;
  ::waitpid(pid_, &status, 0);  // SIGKILL cannot be ignored: this returns
  pid_ = -1;
}

int Child::wait(int timeout_ms) {
  if (pid_ <= 0) return -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
      return -1;
    }
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void Child::kill(int signal) {
  if (pid_ > 0) ::kill(pid_, signal);
}

namespace {

// fork(): the child's pid in the parent; 0 in the child, which dies with its parent (also
// when the parent died before the child could ask for that); -1 when fork failed.
pid_t fork_bound() {
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid != 0) return pid < 0 ? -1 : pid;
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(99);
  return 0;
}

}  // namespace

Child fork_child(const std::function<int()>& body) {
  const pid_t pid = fork_bound();
  if (pid != 0) return pid < 0 ? Child() : Child(pid);
  ::_exit(body());
}

Child spawn(const std::string& path, const std::vector<std::string>& args,
            const std::map<std::string, std::string>& env, const std::vector<int>& keep) {
  // Everything exec needs is built before fork: the child only calls async-signal-safe
  // functions.
  std::vector<std::string> envs;
  for (char** e = environ; *e != nullptr; ++e) envs.emplace_back(*e);
  for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
  std::vector<char*> argv{const_cast<char*>(path.c_str())}, envp;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t pid = fork_bound();
  if (pid != 0) return pid < 0 ? Child() : Child(pid);
  for (int fd : keep)
    if (!clear_cloexec(fd)) ::_exit(97);
  ::execve(path.c_str(), argv.data(), envp.data());
  ::_exit(96);
}

int count_open_fds() {
  int n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  while (dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') ++n;
  ::closedir(d);
  return n - 1;  // the folder's own descriptor
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = ::readdir(d))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
      names.emplace_back(e->d_name);
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

uint64_t used_bytes(const std::string& dir) {
  struct statvfs st;
  if (::statvfs(dir.c_str(), &st) != 0) return 0;
  return (static_cast<uint64_t>(st.f_blocks) - st.f_bfree) * st.f_frsize;
}

namespace {

// Mounts made by the tests live in a mount namespace of their own (the test process and
// its children), so a test that crashes leaves no mount behind: the namespace ends with
// the process. Once per process, from the main thread.
bool private_mounts(std::string* error) {
  static int done = -1;
  static std::string why;
  if (done < 0) {
    done = ::unshare(CLONE_NEWNS) == 0 &&
           ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
    if (!done) why = std::string("unshare(CLONE_NEWNS): ") + std::strerror(errno);
  }
  *error = why;
  return done == 1;
}

}  // namespace

TmpfsMount::TmpfsMount(uint64_t bytes) {
  if (!private_mounts(&error_)) {
    error_ += " (the tests need root, or CAP_SYS_ADMIN, to mount a small tmpfs)";
    return;
  }
  char tmpl[] = "/tmp/shardyard-shm-test.XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    error_ = std::string("mkdtemp: ") + std::strerror(errno);
    return;
  }
  dir_ = tmpl;
  const std::string opts = "size=" + std::to_string(bytes) + ",mode=0700";
  if (::mount("tmpfs", dir_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, opts.c_str()) != 0) {
    error_ = std::string("mount -t tmpfs: ") + std::strerror(errno) +
             " (the tests need root, or CAP_SYS_ADMIN, to mount a small tmpfs)";
    return;
  }
  mounted_ = true;
}

TmpfsMount::~TmpfsMount() {
  if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  if (!dir_.empty()) ::rmdir(dir_.c_str());
}

const std::string& test_shm_dir() {
  static TmpfsMount mount(256ull << 20);  // for the whole test binary
  static const std::string dir = mount.ok() ? mount.dir() : "/dev/shm";
  return dir;
}

}  // namespace shardyard::io::testing
