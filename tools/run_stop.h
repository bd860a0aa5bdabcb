// How the ranks of `shardyard run` stop together: on SIGINT and SIGTERM, at a common step,
// and before a checkpoint.
//
// StopSignals takes SIGINT and SIGTERM on a thread of its own: nothing runs in a signal
// handler. It must be made before any other thread starts: it blocks both signals in the
// calling thread, every later thread inherits the mask, and a watcher thread waits for them
// with sigtimedwait(). The first signal goes to the handler set with on_signal() (until one
// is set, the process ends at once with a message: a run that has delivered nothing has
// nothing to finish). A second signal ends the process at once, status 128 + signal.
// It also makes the process ignore SIGPIPE, for good: a write to a pipe or connection whose
// other end is gone (a coordinator or peer that died, a TLS session that OpenSSL writes
// with write(2), a sanitizer's symbolizer subprocess that died) then fails at that write,
// where it is reported, instead of ending the process by a signal with no message.
//
// StopPoint makes a stop one cut across ranks: every rank claims each step before it asks
// for the batch, and a stop request fixes the stop at the highest step claimed so far. No
// rank has taken a batch past it, and a rank behind it goes on until it gets there; a
// checkpoint saved there is exactly what every rank delivered.
//
// RankBarrier is where the ranks meet before each save, as data-parallel trainers do at
// every step (their gradient all-reduce), so a save's time is its own and not the wait for
// a rank that runs behind. A stopped run releases everyone.
//
// All three are thread-safe. One StopSignals per process.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace shardyard::tools {

class StopSignals {
 public:
  // `startup_exit` runs on the watcher thread when a signal comes before on_signal() was
  // called: it prints what the process says on its way out (then _exit(128 + signal)).
  explicit StopSignals(std::function<void(int)> startup_exit);
  ~StopSignals();  // stops the watcher; the signals get their default action again
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // From now on the first signal calls `handler(signal)` on the watcher thread. When a
  // signal came already, the handler is called now (on the calling thread). Returns once a
  // handler that was running has finished.
  void on_signal(std::function<void(int)> handler);
  int received() const { return received_; }  // 0, SIGINT or SIGTERM

 private:
  void watch();

  std::mutex mu_;
  // Held while a handler runs: on_signal() waits for it, so what an old handler refers to
  // may go away once on_signal() returned.
  std::mutex call_mu_;
  std::function<void(int)> startup_exit_;
  std::function<void(int)> handler_;  // guarded by mu_
  std::atomic<int> received_{0};
  std::atomic<bool> quit_{false};
  std::thread watcher_;
};

class StopPoint {
 public:
  explicit StopPoint(uint32_t ranks) : claimed_(ranks, 0) {}
  // Before rank `rank` asks for a batch: true when it may (the step is claimed), false when
  // it stands at the stop.
  bool claim(uint32_t rank);
  // The claimed batch did not come (the end of an epoch): the step is free again.
  void unclaim(uint32_t rank);
  // Fixes the stop at the highest step claimed so far (the first call only).
  void request();
  bool requested() const;

 private:
  mutable std::mutex mu_;
  std::vector<uint64_t> claimed_;  // guarded by mu_: steps claimed per rank
  bool requested_ = false;         // guarded by mu_
  uint64_t stop_ = 0;              // guarded by mu_
};

class RankBarrier {
 public:
  explicit RankBarrier(uint32_t ranks) : ranks_(ranks) {}
  // True when every rank arrived; false when `stop` was set first.
  bool arrive_and_wait(const std::atomic<bool>& stop);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  const uint32_t ranks_;
  uint32_t waiting_ = 0;     // guarded by mu_
  uint64_t generation_ = 0;  // guarded by mu_
};

}  // namespace shardyard::tools
