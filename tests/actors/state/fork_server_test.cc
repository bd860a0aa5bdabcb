// The worker fork server (actors/state/fork_server.h) with real processes: it forks
// workers that serve a socket, reaps them and reports how they ended and what they used;
// its workers die with it; it refuses to start in a process with more than one thread.
#include "actors/state/fork_server.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "runtime/codec.h"

namespace shardyard::actors {
namespace {

using std::chrono::milliseconds;

size_t threads_now() {
  size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (const dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') ++n;
    ::closedir(d);
  }
  return n;
}

// Spins until this process has used `ms` milliseconds of CPU.
void burn_cpu(int ms) {
  const auto used = [] {
    timespec t{};
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1000.0 + t.tv_nsec / 1e6;
  };
  const double until = used() + ms;
  while (used() < until) {
  }
}

// A worker: says who its parent is, then does what the first frame says ("exit N": use
// 50 ms of CPU, then exit with N; anything else: wait until the socket closes).
int serve(io::UniqueFd fd) {
  auto control = io::UnixSocket::adopt(std::move(fd));
  if (!control.is_ok()) return 90;
  ByteWriter w;
  w.u64(static_cast<uint64_t>(::getppid()));
  if (!control->send(io::Frame{1, w.out, {}}, 5000).is_ok()) return 91;
  io::Frame f;
  auto got = control->receive(&f, 20000);
  if (!got.is_ok() || *got != io::UnixSocket::Received::kFrame) return 0;
  if (f.body.rfind("exit ", 0) == 0) {
    burn_cpu(50);
    return std::stoi(f.body.substr(5));
  }
  for (int i = 0; i < 30; ++i) {  // at most 30 s
    got = control->receive(&f, 1000);
    if (!got.is_ok() || *got == io::UnixSocket::Received::kClosed) break;
  }
  return 0;
}

struct Worker {
  pid_t pid = -1;
  io::UnixSocket socket;  // the test's end
};

Worker spawn(ForkServer& server) {
  auto ends = io::UnixSocket::pair();
  EXPECT_TRUE(ends.is_ok());
  Worker w;
  auto pid = server.spawn(ends->second, 10000);
  EXPECT_TRUE(pid.is_ok()) << pid.status().to_string();
  if (pid.is_ok()) w.pid = *pid;
  w.socket = std::move(ends->first);
  return w;
}

uint64_t parent_of(Worker& w) {
  io::Frame f;
  auto got = w.socket.receive(&f, 10000);
  EXPECT_TRUE(got.is_ok() && *got == io::UnixSocket::Received::kFrame);
  ByteReader r(f.body);
  return r.u64();
}

TEST(ForkServerTest, RefusesWhileAnotherThreadRuns) {
  std::promise<void> release;
  std::thread other([f = release.get_future()]() mutable { f.wait(); });
  Status s = ForkServer::start(&serve);
  release.set_value();
  other.join();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("one thread"), std::string::npos) << s.message();
}

TEST(ForkServerTest, ForksWorkersReapsThemAndTheyDieWithIt) {
  if (threads_now() != 1)
    GTEST_SKIP() << "this process has " << threads_now() << " threads (a sanitizer's?)";
  ASSERT_TRUE(ForkServer::start(&serve).is_ok());
  EXPECT_EQ(ForkServer::start(&serve).code(), StatusCode::kInvalidArgument);  // one per process
  auto server = ForkServer::get();
  ASSERT_NE(server, nullptr);
  const pid_t server_pid = server->server_pid();
  ASSERT_GT(server_pid, 0);

  Worker a = spawn(*server), b = spawn(*server), c = spawn(*server);
  ASSERT_GT(a.pid, 0);
  ASSERT_GT(b.pid, 0);
  ASSERT_GT(c.pid, 0);
  // Each is a child of the server, not of this process.
  EXPECT_EQ(parent_of(a), static_cast<uint64_t>(server_pid));
  EXPECT_EQ(parent_of(b), static_cast<uint64_t>(server_pid));
  EXPECT_EQ(parent_of(c), static_cast<uint64_t>(server_pid));

  // A worker that exits: its status comes from the server.
  ASSERT_TRUE(a.socket.send(io::Frame{2, "exit 7", {}}, 5000).is_ok());
  int status = 0;
  EXPECT_EQ(server->wait(a.pid, milliseconds(10000), &status), a.pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 7) << status;
  // One that runs on: the wait times out.
  EXPECT_EQ(server->wait(b.pid, milliseconds(100), &status), 0);
  // One killed: the signal.
  ASSERT_EQ(::kill(b.pid, SIGKILL), 0);
  EXPECT_EQ(server->wait(b.pid, milliseconds(10000), &status), b.pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  // What the reaped workers used: the 50 ms that `a` spent before it exited, at least.
  const ForkServer::Usage used = server->usage();
  EXPECT_GT(used.peak_rss_kb, 0);
  EXPECT_GE(used.cpu_seconds, 0.045);
  EXPECT_LT(used.cpu_seconds, 60.0);
  EXPECT_EQ(ForkServer::usage_of_ended_workers().peak_rss_kb, used.peak_rss_kb);
  EXPECT_EQ(ForkServer::usage_of_ended_workers().cpu_seconds, used.cpu_seconds);

  // The server killed: its last worker dies with it, and the server is gone for good.
  ASSERT_EQ(::kill(server_pid, SIGKILL), 0);
  io::Frame f;
  auto got = c.socket.receive(&f, 10000);
  ASSERT_TRUE(got.is_ok());
  EXPECT_EQ(*got, io::UnixSocket::Received::kClosed) << "the worker outlived its fork server";
  EXPECT_EQ(server->wait(c.pid, milliseconds(10000), &status), -1);
  EXPECT_EQ(ForkServer::get(), nullptr);
  auto ends = io::UnixSocket::pair();
  ASSERT_TRUE(ends.is_ok());
  EXPECT_EQ(server->spawn(ends->second, 1000).status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace shardyard::actors
