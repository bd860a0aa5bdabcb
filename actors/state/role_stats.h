// RoleStats: what one actor (a worker, a rank's dispatcher, loader or checkpoint actor)
// shows the monitor while it runs: its state, epoch, items and bytes, its recent rate, and
// the time it spent waiting for input (reads, routed items, batches from the workers) and
// for output (a full channel, the loader's credit, the trainer).
//
// The actor's own threads write it as they go (relaxed atomics; a wait costs two clock
// reads); the monitor reads it at any time without asking the actor, which may be blocked
// in a unit for a whole epoch. A wait in progress counts up to the moment it is read.
//
// Thread-safe. Owned by the process's StatusBoard (status_board.h), shared with the actor.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <string>

#include "actors/state/messages.h"
#include "runtime/mutex.h"

namespace shardyard::actors {

enum class RoleState : uint8_t {
  kIdle,           // no unit (between epochs)
  kRunning,        // working
  kWaitingInput,   // blocked on what it consumes
  kWaitingOutput,  // blocked on who consumes its output
  kSaving,         // writing a checkpoint
  kRestoring,      // reading a checkpoint
  kFailed,         // its last unit failed
  kStopped,        // shut down
};
const char* role_state_name(RoleState state);  // "idle", "running", "waiting_input", ...

class RoleStats {
 public:
  using Clock = std::chrono::steady_clock;
  RoleStats(std::string role, uint32_t rank, uint32_t worker);

  const std::string& role() const { return role_; }
  uint32_t rank() const { return rank_; }
  uint32_t worker() const { return worker_; }

  void set_state(RoleState s) { state_.store(s, std::memory_order_relaxed); }
  RoleState state() const { return state_.load(std::memory_order_relaxed); }
  void set_epoch(uint32_t e) { epoch_.store(e, std::memory_order_relaxed); }
  void add(uint64_t items, uint64_t bytes) {
    items_.fetch_add(items, std::memory_order_relaxed);
    bytes_.fetch_add(bytes, std::memory_order_relaxed);
  }
  void add_steps(uint64_t n) { steps_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t items() const { return items_.load(std::memory_order_relaxed); }
  uint64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  void set_detail(std::string detail);

  // Time waited so far, in seconds, including a wait in progress.
  double waited_s(bool input) const;
  // A wait from begin_wait() to end_wait() (the state shows it meanwhile); end_wait() sets
  // the state to `after` and returns the wait's length (zero when none had begun).
  void begin_wait(bool input);
  Clock::duration end_wait(bool input, RoleState after);

  // The state for the monitor: everything above, items/s over the last seconds, and the
  // time since the stats were made. Node, pid and the queue are the collector's to fill.
  ActorSnapshot snapshot() const;

 private:
  friend class WaitScope;
  const std::string role_;
  const uint32_t rank_, worker_;
  const Clock::time_point created_ = Clock::now();
  std::atomic<RoleState> state_{RoleState::kIdle};
  std::atomic<uint32_t> epoch_{0};
  std::atomic<uint64_t> items_{0}, bytes_{0}, steps_{0};
  std::atomic<int64_t> waited_ns_[2] = {{0}, {0}};        // output, input
  std::atomic<int64_t> wait_started_ns_[2] = {{0}, {0}};  // 0: not waiting
  mutable Mutex mu_;
  std::string detail_ SY_GUARDED_BY(mu_);
  // (time, items) a little apart over the last seconds, for the rate.
  mutable std::deque<std::pair<Clock::time_point, uint64_t>> samples_ SY_GUARDED_BY(mu_);
};

// Marks a wait of `stats` (null: does nothing) from construction to destruction: the state
// shows waiting_input or waiting_output meanwhile, then what it was before.
class WaitScope {
 public:
  WaitScope(RoleStats* stats, bool input);
  ~WaitScope();
  WaitScope(const WaitScope&) = delete;
  WaitScope& operator=(const WaitScope&) = delete;

 private:
  RoleStats* stats_;
  bool input_;
  RoleState before_ = RoleState::kRunning;
};

}  // namespace shardyard::actors
