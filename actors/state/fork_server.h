// The worker fork server (docs/worker-processes.md, "How a worker process starts"): a small
// process forked from the program at the top of main, while it has one thread, that forks
// the program's worker processes (placement local) on request. A worker forked from it
// skips what starting the program again costs (exec, the dynamic loader binding the
// symbols of CAF, OpenSSL and the C++ runtime, the program's start), and it has the stages
// the program registered before it, as a program started again would.
//
// The server is the parent of the worker processes, so it reaps them and reports how each
// ended on its socket; the rank's ForkServer client hands those reports to whoever waits.
// Lives: the server dies with the thread that started it (PR_SET_PDEATHSIG, SIGKILL), and
// each worker process with the server; the server exits when the rank closes its socket.
// A server that is gone (killed, say) is noticed by its socket: spawn() fails and the rank
// starts its workers as before, by starting the program again.
//
// Frames on the server's socket (io/transport/unix_socket.h):
//   kForkRequest   rank -> server, with the worker's end of its control socket
//   kForked        server -> rank: u64 pid of the worker process
//   kForkFailed    server -> rank: why (fork failed)
//   kExited        server -> rank, once the server reaped a worker: u64 pid, u32 wait
//                  status, u64 CPU microseconds (user + system), u64 peak RSS in KiB
//
// Thread-safety: ForkServer::start() once, from the only thread of the process; the rest from
// any threads.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "io/transport/unique_fd.h"
#include "io/transport/unix_socket.h"
#include "runtime/status.h"

namespace shardyard::actors {

class ForkServer {
 public:
  // Forks the server, whose workers run `serve` on their control socket and exit with its
  // code. kInvalidArgument when this process has more than one thread (a fork then copies
  // locks that other threads hold) or has a server already.
  static Status start(int (*serve)(io::UniqueFd control));
  // This process's server, or null when none was started or it is gone.
  static std::shared_ptr<ForkServer> get();

  // Forks a worker process that serves `control` (the worker's end of its control socket);
  // its pid. kUnavailable when the server is gone or did not answer within `timeout_ms`.
  Result<pid_t> spawn(const io::UnixSocket& control, int timeout_ms);
  // Waits up to `timeout` for the server's report that worker `pid` ended: its pid (its wait
  // status in *status), 0 when the time ran out, -1 when the server is gone (it took its
  // workers with it).
  pid_t wait(pid_t pid, std::chrono::milliseconds timeout, int* status);
  pid_t server_pid() const { return server_pid_; }

  // What the workers it reaped used: the rank's RUSAGE_CHILDREN does not see them until it
  // reaps the server itself.
  struct Usage {
    double cpu_seconds = 0;  // user + system, summed
    long peak_rss_kb = 0;    // the largest
  };
  Usage usage();
  // usage() of this process's server, whether it is gone or not; zeros without one.
  static Usage usage_of_ended_workers();

  ForkServer(io::UnixSocket socket, pid_t server_pid)
      : socket_(std::move(socket)), server_pid_(server_pid) {}
  ~ForkServer();

 private:
  // Waits until done() holds (under mu_), reading the socket meanwhile; false when the
  // time ran out or the server is gone first.
  template <typename Done>
  bool await(std::unique_lock<std::mutex>& lock, Done done,
             std::chrono::steady_clock::time_point deadline);
  void take(io::UnixSocket::Received got, io::Frame& f);  // under mu_

  io::UnixSocket socket_;
  const pid_t server_pid_;
  std::mutex spawn_mu_;  // one request at a time
  std::mutex mu_;
  std::condition_variable cv_;
  bool reading_ = false;                 // guarded by mu_: a thread reads the socket
  bool gone_ = false;                    // guarded by mu_
  std::map<pid_t, int> ended_;           // guarded by mu_: reports not yet waited for
  std::optional<Result<pid_t>> answer_;  // guarded by mu_: the answer to the request
  Usage usage_;                          // guarded by mu_
};

// A pidfd of process `pid` (readable once it has exited), or an invalid one on a kernel
// without pidfd_open (before 5.3).
io::UniqueFd open_pidfd(pid_t pid);

}  // namespace shardyard::actors
