#include "actors/state/role_stats.h"

namespace shardyard::actors {

namespace {
int64_t ns_since_epoch(RoleStats::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
}  // namespace

const char* role_state_name(RoleState state) {
  switch (state) {
    case RoleState::kIdle:
      return "idle";
    case RoleState::kRunning:
      return "running";
    case RoleState::kWaitingInput:
      return "waiting_input";
    case RoleState::kWaitingOutput:
      return "waiting_output";
    case RoleState::kSaving:
      return "saving";
    case RoleState::kRestoring:
      return "restoring";
    case RoleState::kFailed:
      return "failed";
    case RoleState::kStopped:
      return "stopped";
  }
  return "unknown";
}

RoleStats::RoleStats(std::string role, uint32_t rank, uint32_t worker)
    : role_(std::move(role)), rank_(rank), worker_(worker) {}

void RoleStats::set_detail(std::string detail) {
  MutexLock lock(&mu_);
  detail_ = std::move(detail);
}

double RoleStats::waited_s(bool input) const {
  int64_t ns = waited_ns_[input].load(std::memory_order_relaxed);
  const int64_t started = wait_started_ns_[input].load(std::memory_order_relaxed);
  if (started != 0) ns += std::max<int64_t>(0, ns_since_epoch(Clock::now()) - started);
  return static_cast<double>(ns) / 1e9;
}

void RoleStats::begin_wait(bool input) {
  set_state(input ? RoleState::kWaitingInput : RoleState::kWaitingOutput);
  wait_started_ns_[input].store(ns_since_epoch(Clock::now()), std::memory_order_relaxed);
}

RoleStats::Clock::duration RoleStats::end_wait(bool input, RoleState after) {
  const int64_t started = wait_started_ns_[input].exchange(0, std::memory_order_relaxed);
  set_state(after);
  if (started == 0) return Clock::duration::zero();
  const int64_t ns = std::max<int64_t>(0, ns_since_epoch(Clock::now()) - started);
  waited_ns_[input].fetch_add(ns, std::memory_order_relaxed);
  return std::chrono::nanoseconds(ns);
}

ActorSnapshot RoleStats::snapshot() const {
  ActorSnapshot s;
  s.role = role_;
  s.rank = rank_;
  s.worker = worker_;
  s.state = role_state_name(state());
  s.epoch = epoch_.load(std::memory_order_relaxed);
  s.items = items();
  s.bytes = bytes();
  s.steps = steps_.load(std::memory_order_relaxed);
  s.input_wait_s = waited_s(true);
  s.output_wait_s = waited_s(false);
  const auto now = Clock::now();
  s.uptime_s = std::chrono::duration<double>(now - created_).count();
  MutexLock lock(&mu_);
  s.detail = detail_;
  // The rate over the last ~10 s: keep a sample at most every 0.5 s (however many clients
  // ask), and measure from the oldest one left; with no sample yet, since the start.
  if (samples_.empty() || now - samples_.back().first >= std::chrono::milliseconds(500))
    samples_.emplace_back(now, s.items);
  while (samples_.size() > 1 && now - samples_[1].first >= std::chrono::seconds(10))
    samples_.pop_front();
  const auto& [t0, n0] = samples_.front();
  const double span = std::chrono::duration<double>(now - t0).count();
  if (span >= 0.2) {
    s.items_per_s = static_cast<double>(s.items - n0) / span;
  } else if (s.uptime_s > 0) {
    s.items_per_s = static_cast<double>(s.items) / s.uptime_s;
  }
  return s;
}

WaitScope::WaitScope(RoleStats* stats, bool input) : stats_(stats), input_(input) {
  if (!stats_) return;
  before_ = stats_->state();
  stats_->begin_wait(input);
}

WaitScope::~WaitScope() {
  if (stats_) stats_->end_wait(input_, before_);
}

}  // namespace shardyard::actors
