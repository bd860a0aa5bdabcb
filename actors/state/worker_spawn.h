// Starting and ending one worker process (docs/worker-processes.md, "How a worker process
// starts"): forked by the program's fork server (actors/state/fork_server.h) where it has
// one, else the program, or LoaderOptions::worker_binary, started again in worker mode with
// its control socket as descriptor 3; then reaped, saying how it ended.
//
// Thread-compatible: one owner (a worker's runner, actors/state/worker_process.cc).
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>

#include "actors/state/fork_server.h"
#include "io/transport/unix_socket.h"
#include "runtime/status.h"

namespace shardyard::actors {

class WorkerProcess {
 public:
  WorkerProcess() = default;
  // Starts a worker process on `child`, its end of the control socket. `binary` empty: this
  // program, forked by its fork server when it has one that answers (`log` says so when it
  // does not; the program is then started again). `name` names the worker in messages.
  static Result<WorkerProcess> start(const io::UnixSocket& child, const std::string& binary,
                                     const std::string& name, int timeout_ms,
                                     const std::function<void(const std::string&)>& log);
  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }
  // Waits up to 5 s for the process to end (it is SIGKILLed then) and reaps it: how it ended
  // ("killed by signal 9 (SIGKILL)", "exited with status 1"); *signaled: a signal ended it,
  // other than the kill after the wait. running() is false afterwards.
  std::string reap(bool* signaled);

 private:
  pid_t pid_ = -1;
  std::shared_ptr<ForkServer> server_;  // the fork server that forked it; null: spawned
};

}  // namespace shardyard::actors
