#include "actors/state/fork_server.h"

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "runtime/codec.h"

namespace shardyard::actors {

namespace {

using Clock = std::chrono::steady_clock;

enum : uint16_t { kForkRequest = 1, kForked = 2, kForkFailed = 3, kExited = 4 };
constexpr size_t kServerFrameBytes = 4096;
constexpr int kServerSendTimeoutMs = 10000;

std::mutex g_mu;
std::shared_ptr<ForkServer> g_server;  // guarded by g_mu

// The server this process started, gone or not; null without one.
std::shared_ptr<ForkServer> registered() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_server;
}

// Threads of this process (/proc/self/task), or 0 when it cannot be told.
size_t threads_now() {
  DIR* d = ::opendir("/proc/self/task");
  if (d == nullptr) return 0;
  size_t n = 0;
  while (const dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') ++n;
  ::closedir(d);
  return n;
}

// The worker process, just forked: nothing of the server stays open in it; it dies with
// the server and exits with what `serve` returns.
[[noreturn]] void become_worker(io::UniqueFd control, pid_t server, const char* name,
                                int (*serve)(io::UniqueFd)) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != server) ::_exit(1);  // the server is gone already
  ::prctl(PR_SET_NAME, name);
  std::exit(serve(std::move(control)));
}

// The server's body: forks a worker per request, reaps them and reports how each ended.
[[noreturn]] void serve_requests(io::UnixSocket socket, pid_t rank, int (*serve)(io::UniqueFd)) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != rank) ::_exit(0);
  char name[17] = {};
  ::prctl(PR_GET_NAME, name);  // the program's, given back to each worker
  ::prctl(PR_SET_NAME, "sy-fork-server");
  ::signal(SIGPIPE, SIG_IGN);
  const pid_t self = ::getpid();
  std::map<pid_t, io::UniqueFd> workers;  // a pidfd each (invalid where the kernel has none)
  std::vector<pollfd> fds;
  for (;;) {
    fds.assign(1, pollfd{socket.fd(), POLLIN, 0});
    bool every_pidfd = true;
    for (const auto& [pid, fd] : workers) {
      if (fd.valid())
        fds.push_back({fd.get(), POLLIN, 0});
      else
        every_pidfd = false;
    }
    // Without a pidfd for each worker, the reaping below runs every 50 ms.
    if (::poll(fds.data(), fds.size(), every_pidfd ? -1 : 50) < 0 && errno != EINTR) ::_exit(3);
    for (;;) {
      int status = 0;
      struct rusage ru {};
      const pid_t pid = ::wait4(-1, &status, WNOHANG, &ru);
      if (pid <= 0) break;
      workers.erase(pid);
      ByteWriter w;
      w.u64(static_cast<uint64_t>(pid));
      w.u32(static_cast<uint32_t>(status));
      w.u64(static_cast<uint64_t>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 +
            static_cast<uint64_t>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec));
      w.u64(static_cast<uint64_t>(std::max<long>(ru.ru_maxrss, 0)));
      if (!socket.send(io::Frame{kExited, std::move(w.out), {}}, kServerSendTimeoutMs).is_ok())
        ::_exit(0);  // the rank is gone: the workers go with this process
    }
    if (fds[0].revents == 0) continue;
    io::Frame f;
    auto got = socket.receive(&f, 0);
    if (!got.is_ok() || *got == io::UnixSocket::Received::kClosed) ::_exit(0);
    if (*got == io::UnixSocket::Received::kTimeout) continue;
    if (f.type != kForkRequest || f.fds.size() != 1) ::_exit(2);  // only the rank writes here
    const pid_t pid = ::fork();
    if (pid == 0) {
      io::UniqueFd control = std::move(f.fds[0]);
      workers.clear();
      socket = io::UnixSocket();
      become_worker(std::move(control), self, name, serve);
    }
    f.fds.clear();
    if (pid < 0) {
      const std::string why = std::strerror(errno);
      if (!socket.send(io::Frame{kForkFailed, why, {}}, kServerSendTimeoutMs).is_ok()) ::_exit(0);
      continue;
    }
    workers.emplace(pid, open_pidfd(pid));
    ByteWriter w;
    w.u64(static_cast<uint64_t>(pid));
    if (!socket.send(io::Frame{kForked, std::move(w.out), {}}, kServerSendTimeoutMs).is_ok())
      ::_exit(0);
  }
}

}  // namespace

io::UniqueFd open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return io::UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
#else
  (void)pid;
  return io::UniqueFd();
#endif
}

Status ForkServer::start(int (*serve)(io::UniqueFd)) {
  if (registered()) return invalid_argument("this process has a worker fork server already");
  // With one thread nothing else can start a server meanwhile, and g_mu is not held across
  // the fork: the server and its workers get it unlocked.
  const size_t threads = threads_now();
  if (threads != 1)
    return invalid_argument(
        "the worker fork server must be started while the process has one thread (it has " +
        (threads == 0 ? std::string("an unknown number") : std::to_string(threads)) +
        "): call it at the top of main, right after worker_main()");
  SY_ASSIGN_OR_RETURN(auto ends, io::UnixSocket::pair(kServerFrameBytes));
  std::fflush(nullptr);  // nothing buffered is written twice
  const pid_t rank = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0)
    return io_error(std::string("cannot fork the worker fork server: ") + std::strerror(errno));
  if (pid == 0) {
    ends.first = io::UnixSocket();
    serve_requests(std::move(ends.second), rank, serve);
  }
  ends.second = io::UnixSocket();
  std::lock_guard<std::mutex> lock(g_mu);
  g_server = std::make_shared<ForkServer>(std::move(ends.first), pid);
  return Status::ok();
}

std::shared_ptr<ForkServer> ForkServer::get() {
  std::shared_ptr<ForkServer> s = registered();
  if (!s) return nullptr;
  std::lock_guard<std::mutex> lock(s->mu_);
  return s->gone_ ? nullptr : s;
}

ForkServer::~ForkServer() {
  // The server exits when its socket closes, and takes any worker still running with it.
  socket_.shutdown();
  int status = 0;
  for (int i = 0; i < 1000 && ::waitpid(server_pid_, &status, WNOHANG) == 0; ++i) ::usleep(1000);
}

void ForkServer::take(io::UnixSocket::Received got, io::Frame& f) {
  if (got == io::UnixSocket::Received::kTimeout) return;
  if (got == io::UnixSocket::Received::kClosed) {
    gone_ = true;
    return;
  }
  ByteReader r(f.body);
  if (f.type == kExited) {
    const auto pid = static_cast<pid_t>(r.u64());
    const auto status = static_cast<int>(r.u32());
    const uint64_t cpu_us = r.u64(), rss_kb = r.u64();
    if (r.done()) {
      ended_[pid] = status;
      usage_.cpu_seconds += static_cast<double>(cpu_us) / 1e6;
      usage_.peak_rss_kb = std::max<long>(usage_.peak_rss_kb, static_cast<long>(rss_kb));
      return;
    }
  } else if (f.type == kForked) {
    const auto pid = static_cast<pid_t>(r.u64());
    if (r.done() && pid > 0) {
      answer_ = pid;
      return;
    }
  } else if (f.type == kForkFailed) {
    answer_ = Result<pid_t>(unavailable("the worker fork server could not fork: " + f.body));
    return;
  }
  gone_ = true;  // a frame that makes no sense: the server is not trusted any more
}

template <typename Done>
bool ForkServer::await(std::unique_lock<std::mutex>& lock, Done done, Clock::time_point deadline) {
  for (;;) {
    if (done()) return true;
    if (gone_) return false;
    const auto now = Clock::now();
    if (now >= deadline) return false;
    const auto until = std::min(deadline, now + std::chrono::milliseconds(100));
    if (reading_) {  // another thread reads; it wakes the others after each frame
      cv_.wait_until(lock, until);
      continue;
    }
    reading_ = true;
    lock.unlock();
    io::Frame f;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count() + 1;
    auto got = socket_.receive(&f, static_cast<int>(ms));
    lock.lock();
    reading_ = false;
    if (got.is_ok())
      take(*got, f);
    else
      gone_ = true;
    cv_.notify_all();
  }
}

Result<pid_t> ForkServer::spawn(const io::UnixSocket& control, int timeout_ms) {
  std::lock_guard<std::mutex> one(spawn_mu_);
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (gone_) return unavailable("the worker fork server is gone");
    answer_.reset();
  }
  io::Frame request{kForkRequest, {}, {}};
  SY_ASSIGN_OR_RETURN(auto theirs, control.duplicate());
  request.fds.push_back(std::move(theirs));
  Status sent = socket_.send(request, timeout_ms);
  std::unique_lock<std::mutex> lock(mu_);
  if (!sent.is_ok()) {
    gone_ = true;
    return unavailable("the worker fork server is gone: " + sent.message());
  }
  if (!await(
          lock, [&] { return answer_.has_value(); }, deadline)) {
    // A late answer must not be taken for the next request's: the server is done with.
    const bool timed_out = !gone_;
    gone_ = true;
    return unavailable(timed_out ? "the worker fork server did not answer within " +
                                       std::to_string(timeout_ms) + " ms"
                                 : std::string("the worker fork server is gone"));
  }
  Result<pid_t> answer = std::move(*answer_);
  answer_.reset();
  return answer;
}

ForkServer::Usage ForkServer::usage() {
  std::lock_guard<std::mutex> lock(mu_);
  return usage_;
}

ForkServer::Usage ForkServer::usage_of_ended_workers() {
  std::shared_ptr<ForkServer> s = registered();
  return s ? s->usage() : Usage{};
}

pid_t ForkServer::wait(pid_t pid, std::chrono::milliseconds timeout, int* status) {
  std::unique_lock<std::mutex> lock(mu_);
  if (await(
          lock, [&] { return ended_.count(pid) > 0; }, Clock::now() + timeout)) {
    *status = ended_[pid];
    ended_.erase(pid);
    return pid;
  }
  return gone_ ? -1 : 0;
}

}  // namespace shardyard::actors
