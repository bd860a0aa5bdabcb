#include "run_stop.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

namespace shardyard::tools {

namespace {

sigset_t stop_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

}  // namespace

StopSignals::StopSignals(std::function<void(int)> startup_exit)
    : startup_exit_(std::move(startup_exit)) {
  ::signal(SIGPIPE, SIG_IGN);
  sigset_t set = stop_set();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  watcher_ = std::thread([this] { watch(); });
}

StopSignals::~StopSignals() {
  quit_ = true;
  // Wake the watcher now rather than at its next tick: a signal sent to that thread alone
  // (it has them blocked, so only its sigtimedwait takes it), which it drops as it quits.
  pthread_kill(watcher_.native_handle(), SIGTERM);
  watcher_.join();
  sigset_t set = stop_set();
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

void StopSignals::on_signal(std::function<void(int)> handler) {
  std::lock_guard<std::mutex> call(call_mu_);  // a handler that runs finishes first
  std::lock_guard<std::mutex> lock(mu_);
  handler_ = std::move(handler);
}

void StopSignals::watch() {
  const sigset_t set = stop_set();
  // Woken by the destructor to notice quit_; the wait for a signal has a timeout too.
  const timespec tick{0, 100 * 1000 * 1000};
  while (!quit_) {
    const int sig = sigtimedwait(&set, nullptr, &tick);
    if (quit_) break;        // the destructor's wake-up (or a signal as the run ends)
    if (sig <= 0) continue;  // timeout or EINTR
    if (received_ != 0) {
      static const char msg[] = "shardyard: second signal: exiting at once\n";
      (void)!::write(STDERR_FILENO, msg, sizeof msg - 1);
      std::_Exit(128 + sig);
    }
    received_ = sig;
    std::lock_guard<std::mutex> call(call_mu_);
    std::function<void(int)> handler;
    {
      std::lock_guard<std::mutex> lock(mu_);
      handler = handler_;
    }
    if (!handler) {
      startup_exit_(sig);
      std::_Exit(128 + sig);
    }
    handler(sig);
  }
}

bool StopPoint::claim(uint32_t rank) {
  std::lock_guard<std::mutex> lock(mu_);
  if (requested_ && claimed_[rank] >= stop_) return false;
  ++claimed_[rank];
  return true;
}

void StopPoint::unclaim(uint32_t rank) {
  std::lock_guard<std::mutex> lock(mu_);
  if (claimed_[rank] > 0) --claimed_[rank];
}

void StopPoint::request() {
  std::lock_guard<std::mutex> lock(mu_);
  if (requested_) return;
  requested_ = true;
  stop_ = claimed_.empty() ? 0 : *std::max_element(claimed_.begin(), claimed_.end());
}

bool StopPoint::requested() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requested_;
}

bool RankBarrier::arrive_and_wait(const std::atomic<bool>& stop) {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t gen = generation_;
  if (++waiting_ == ranks_) {
    waiting_ = 0;
    ++generation_;
    cv_.notify_all();
    return true;
  }
  // Polls `stop` (set by another thread without this mutex) every 50 ms.
  while (gen == generation_ && !stop) cv_.wait_for(lock, std::chrono::milliseconds(50));
  return gen != generation_;
}

}  // namespace shardyard::tools
