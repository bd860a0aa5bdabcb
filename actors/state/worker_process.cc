#include "actors/state/worker_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "actors/state/status_board.h"
#include "actors/state/worker_frames.h"
#include "io/format/record_scan.h"
#include "io/fs/uri.h"
#include "io/remote/remote_file_system.h"
#include "io/transport/shm_channel.h"
#include "io/transport/shm_frames.h"
#include "io/transport/shm_shard.h"
#include "io/transport/unix_socket.h"
#include "runtime/clock.h"
#include "runtime/codec.h"

extern char** environ;

namespace shardyard::actors {

namespace {

constexpr size_t kControlFrameBytes = 1 << 20;
constexpr int kWorkerFd = 3;  // where the control socket lies in a worker process
// The key page: u64 sequence (odd while the key is written) | u32 length | u32 0 | key.
constexpr size_t kPageBytes = 4096;
constexpr size_t kPageKeyOffset = 16;
constexpr size_t kPageKeyBytes = kPageBytes - kPageKeyOffset;

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

Result<io::UniqueFd> dup_fd(int fd) {
  const int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0)
    return io_error(std::string("cannot duplicate a descriptor: ") + std::strerror(errno));
  return io::UniqueFd(copy);
}

std::string self_binary() {
  char path[4096];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return "/proc/self/exe";
  return std::string(path, static_cast<size_t>(n));
}

// ---- the rank's side ---------------------------------------------------------------------

// Where a feed sends to: the current worker process's input channel (routed items) or its
// control socket (loaded shards, broadcast).
struct FeedSink {
  std::shared_ptr<io::ShmProducer> input;
  std::shared_ptr<io::UnixSocket> control;
};

// The route's deliveries for one worker, taken on a thread of its own and sent on to the
// worker process. What was sent and not handed back yet stays pending, so that the process
// that takes over from a dead one gets it again, in the same order.
class UnitFeed {
 public:
  UnitFeed(std::shared_ptr<io::Route> route, std::shared_ptr<WorkerLaunch> launch,
           const JobData& job, uint32_t rank, uint32_t worker)
      : route_(std::move(route)),
        launch_(std::move(launch)),
        rank_(rank),
        worker_(worker),
        workers_(job.topology.workers),
        contiguous_(job.plan.worker_strategy == "contiguous") {}
  ~UnitFeed() { join(); }

  // A new process takes the feed: what is pending goes to it first (on a thread, so that
  // the caller can go on taking the process's output meanwhile), then the rest.
  void attach(FeedSink sink) {
    if (resend_.joinable()) resend_.join();
    resend_ = std::thread([this, sink = std::move(sink)]() {
      std::lock_guard<std::mutex> sending(send_mu_);
      sink_ = sink;
      std::vector<Entry> again;
      {
        std::lock_guard<std::mutex> lock(pending_mu_);
        again.assign(pending_.begin(), pending_.end());
      }
      for (const auto& e : again) deliver(e);
      if (ended_) send_end();
    });
    if (!thread_.joinable()) thread_ = std::thread([this]() { loop(); });
  }
  // The item at `position` was handed to the rank's channel.
  void handed(uint64_t position) {
    std::lock_guard<std::mutex> lock(pending_mu_);
    next_position_ = position + 1;
    while (!pending_.empty()) {
      Entry& e = pending_.front();
      if (e.shard) {
        if (position < e.last_position) break;
      } else {
        while (e.begin < e.items.size() && e.items[e.begin].position <= position) ++e.begin;
        if (e.begin < e.items.size()) break;
      }
      pending_.pop_front();
    }
  }
  // Rank positions below this were handed over (a new process skips them in loaded shards).
  uint64_t skip_below() const {
    std::lock_guard<std::mutex> lock(pending_mu_);
    return next_position_;
  }
  const std::shared_ptr<io::Route>& route() const { return route_; }
  // The unit failed: the route is reset (the epoch fails anyway), so the feed ends.
  void abandon() { route_->cancel(); }
  void join() {
    if (thread_.joinable()) thread_.join();
    if (resend_.joinable()) resend_.join();
  }

 private:
  struct Entry {
    std::vector<Item> items;  // routed items from `begin` on
    size_t begin = 0;
    std::shared_ptr<const io::SharedShard> shard;  // or a loaded shard, as an image
    std::shared_ptr<io::ShmShardImage> image;
    uint64_t last_position = 0;  // the last position of this worker's part of the shard
  };

  void loop() {
    for (;;) {
      auto d = route_->receive(worker_, true);
      std::lock_guard<std::mutex> sending(send_mu_);
      if (!d.is_ok() || d->kind == io::Delivery::Kind::kEnd) {
        ended_ = true;
        end_ = d.is_ok() ? Status::ok() : d.status();
        send_end();
        return;
      }
      Entry e;
      if (d->kind == io::Delivery::Kind::kItems) {
        if (d->items.empty()) continue;
        e.items = std::move(d->items);
      } else {
        const auto& shard = *d->shard;
        const ShardPart part = shard_part(shard.size(), worker_, workers_, contiguous_);
        if (part.begin >= part.end) continue;  // nothing of this shard for this worker
        auto image = launch_->shard_image(rank_, d->shard);
        if (!image.is_ok()) {
          ended_ = true;
          end_ = image.status();
          send_end();
          route_->cancel();
          return;
        }
        e.image = std::move(*image);
        e.shard = std::move(d->shard);
        e.last_position =
            shard.first_position + part.begin + (part.end - 1 - part.begin) / part.step * part.step;
      }
      {
        std::lock_guard<std::mutex> lock(pending_mu_);
        pending_.push_back(e);
      }
      deliver(e);
    }
  }
  // Sends one entry to the current process; a dead one is not an error here (the entry
  // stays pending and goes to the next one).
  void deliver(const Entry& e) {
    if (e.shard) {
      if (!sink_.control) return;
      auto fd = e.image->share();
      if (!fd.is_ok()) return;
      io::Frame f{kShardFrame, {}, {}};
      f.fds.push_back(std::move(*fd));
      (void)sink_.control->send(f, 60000);
      return;
    }
    if (!sink_.input) return;
    io::Packet p;
    p.items.assign(e.items.begin() + static_cast<std::ptrdiff_t>(e.begin), e.items.end());
    for (const auto& item : p.items) p.bytes += item.payload_bytes();
    (void)sink_.input->push(std::move(p));
  }
  void send_end() {
    if (sink_.input)
      sink_.input->finish(end_);
    else if (sink_.control)
      (void)sink_.control->send(io::Frame{kRouteEndFrame, encode_status(end_), {}}, 10000);
  }

  std::shared_ptr<io::Route> route_;
  std::shared_ptr<WorkerLaunch> launch_;
  const uint32_t rank_, worker_, workers_;
  const bool contiguous_;
  std::mutex send_mu_;  // one sender at a time: the loop or a resend
  FeedSink sink_;       // guarded by send_mu_
  bool ended_ = false;  // guarded by send_mu_
  Status end_;          // guarded by send_mu_
  mutable std::mutex pending_mu_;
  std::deque<Entry> pending_;   // guarded by pending_mu_
  uint64_t next_position_ = 0;  // guarded by pending_mu_
  std::thread thread_, resend_;
};

// What a worker process said at the end of a unit, read on a thread of its own during a
// routed unit (which also answers the process's requests for the loader's credit).
struct ControlOutcome {
  io::UnixSocket::Received got = io::UnixSocket::Received::kClosed;
  Result<UnitStats> done = internal_error("no done frame");
};

void read_control(std::shared_ptr<io::UnixSocket> control, std::shared_ptr<io::Route> route,
                  std::shared_ptr<std::promise<Result<ControlOutcome>>> out) {
  for (;;) {
    io::Frame f;
    auto got = control->receive(&f, 1000);
    if (!got.is_ok()) return out->set_value(got.status());
    if (*got == io::UnixSocket::Received::kTimeout) continue;
    if (*got == io::UnixSocket::Received::kClosed) return out->set_value(ControlOutcome{});
    if (f.type == kCreditWantFrame) {
      ByteReader r(f.body);
      const uint64_t position = r.u64();
      // Until the loader consumed up to there (or the route was reset: the answer then
      // changes nothing, the worker's next receive fails).
      (void)route->wait_consumed(position);
      ByteWriter w;
      w.u64(route->consumed_position());
      (void)control->send(io::Frame{kCreditFrame, w.out, {}}, 10000);
      continue;
    }
    if (f.type != kDoneFrame)
      return out->set_value(corrupt("a worker process sent a control frame of type " +
                                    std::to_string(f.type) + " in its unit"));
    ControlOutcome o;
    o.got = io::UnixSocket::Received::kFrame;
    o.done = decode_done(f.body);
    return out->set_value(std::move(o));
  }
}

class ProcessRunner : public UnitRunner {
 public:
  ProcessRunner(std::shared_ptr<WorkerLaunch> launch, std::shared_ptr<const JobData> job,
                uint32_t rank, uint32_t worker)
      : launch_(std::move(launch)), job_(std::move(job)), rank_(rank), worker_(worker) {
    if (job_->status) stats_ = job_->status->role("worker", rank, worker);
  }
  ~ProcessRunner() override { stop(); }

  // The process starts with its worker actor (whose thread it dies with): the first epoch
  // finds it ready. What goes wrong is said by the first unit.
  void prepare() override {
    if (pid_ < 0) prepared_ = start();
  }

  Result<UnitStats> run(const WorkUnit& unit, io::Channel& channel) override {
    UnitStats stats;
    Status st = run_unit(unit, channel, &stats);
    channel.finish(st);
    if (!st.is_ok()) return st;
    return stats;
  }

 private:
  enum class Outcome { kDone, kDied, kFailed };

  std::string who() const {
    return "worker " + std::to_string(worker_) + " of rank " + std::to_string(rank_) +
           (pid_ > 0 ? " (pid " + std::to_string(pid_) + ")" : std::string());
  }

  Status run_unit(const WorkUnit& unit, io::Channel& channel, UnitStats* stats);
  Outcome attempt(WorkUnit* rest, const std::map<uint32_t, size_t>& slot, UnitFeed* feed,
                  io::Channel& channel, UnitStats* stats,
                  std::shared_ptr<const std::string>* last_state, Status* error);
  Status start();
  // Waits for the done frame of the unit just run; kClosed when the process died first.
  Result<io::UnixSocket::Received> await_done(int timeout_ms, Result<UnitStats>* done);
  std::string reap();  // waits for the process (SIGKILL after 5 s) and says how it ended
  void stop();
  std::string current_key() const;

  std::shared_ptr<WorkerLaunch> launch_;
  std::shared_ptr<const JobData> job_;
  const uint32_t rank_, worker_;
  std::shared_ptr<RoleStats> stats_;
  pid_t pid_ = -1;
  // Shared with the thread that reads it during a routed unit (which may outlive a dead
  // process's unit by a little).
  std::shared_ptr<io::UnixSocket> control_;
  std::shared_ptr<io::ShmMapping> page_;
  uint64_t restarts_ = 0;
  // The last process reaped: its pid, and whether a signal ended it (a death, not a refusal).
  pid_t last_pid_ = -1;
  bool last_signaled_ = false;
  std::string last_how_;
  Status prepared_;  // how the start in prepare() went
};

Status ProcessRunner::run_unit(const WorkUnit& unit, io::Channel& channel, UnitStats* stats) {
  std::map<uint32_t, size_t> slot;  // logical shard -> its index in the unit
  for (size_t i = 0; i < unit.shards.size(); ++i) slot[unit.shards[i]] = i;
  std::unique_ptr<UnitFeed> feed;
  if (!unit.route.empty()) {
    auto route = job_->data_plane->attach_route(unit.route);
    if (!route)
      return internal_error("worker " + std::to_string(worker_) + ": no route '" + unit.route +
                            "'");
    feed = std::make_unique<UnitFeed>(std::move(route), launch_, *job_, rank_, worker_);
  }
  WorkUnit rest = unit;
  rest.consumed.resize(rest.shards.size(), 0);
  std::shared_ptr<const std::string> last_state;
  uint64_t handed_at_death = UINT64_MAX;
  uint32_t fruitless = 0;  // deaths in a row without an item handed over in between
  const uint32_t max_restarts = launch_->options().max_restarts;
  auto failed = [&](Status st) {
    if (feed) {
      feed->abandon();
      feed->join();
    }
    return st;
  };
  for (;;) {
    pid_t pid = -1;
    std::string key, how;
    if (pid_ < 0) {
      Status started = std::exchange(prepared_, Status::ok());
      if (started.is_ok()) started = start();
      // A process killed while it started (the OOM killer, a kill) dies like any other; one
      // that exits or does not answer is a refusal (a program without worker_main()).
      if (!started.is_ok() && !last_signaled_) return failed(started);
      if (!started.is_ok()) {
        pid = last_pid_;
        how = last_how_ + " while it started";
      }
    }
    if (pid_ > 0) {
      Status error;
      const Outcome outcome = attempt(&rest, slot, feed.get(), channel, stats, &last_state, &error);
      if (outcome == Outcome::kDone) {
        if (feed) feed->join();
        return Status::ok();
      }
      if (outcome == Outcome::kFailed) return failed(error);
      // The process died: what it handed over stays handed over; the rest goes to a new one.
      pid = pid_;
      key = current_key();
      how = reap();
    }
    fruitless = stats->items == handed_at_death ? fruitless + 1 : 1;
    handed_at_death = stats->items;
    const std::string what = "worker " + std::to_string(worker_) + " of rank " +
                             std::to_string(rank_) + " (pid " + std::to_string(pid) + ") " + how +
                             (key.empty() ? std::string() : " on item '" + key + "'") +
                             " in its unit of epoch " + std::to_string(unit.epoch) +
                             " after handing over " + std::to_string(stats->items) + " items";
    if (fruitless > max_restarts)
      return failed(internal_error(
          what + ": it died " + std::to_string(fruitless) +
          " times in a row without handing over another item (a poison sample?); the run stops "
          "after " +
          std::to_string(max_restarts) + " restarts (max_worker_restarts, --max-worker-restarts)"));
    ++restarts_;
    launch_->count_restart();
    launch_->log(what + "; starting a new one (restart " + std::to_string(restarts_) +
                 " of this worker)");
    if (stats_)
      stats_->set_detail("restarted " + std::to_string(restarts_) + " times; last: " + what);
    if (last_state) {
      rest.stage_states = {*last_state};
      rest.rescaled = false;
    }
  }
}

ProcessRunner::Outcome ProcessRunner::attempt(
    WorkUnit* rest, const std::map<uint32_t, size_t>& slot, UnitFeed* feed, io::Channel& channel,
    UnitStats* stats, std::shared_ptr<const std::string>* last_state, Status* error) {
  auto fail = [&](Status st) {
    *error = std::move(st);
    return Outcome::kFailed;
  };
  const bool routed = feed && job_->dispatch != Dispatch::kBroadcast;
  // The unit's channel (the worker's output) and, for routed items, its input.
  auto out_ends = io::UnixSocket::pair();
  if (!out_ends.is_ok()) return fail(out_ends.status());
  Result<std::pair<io::UnixSocket, io::UnixSocket>> in_ends = invalid_argument("unused");
  if (routed) {
    in_ends = io::UnixSocket::pair();
    if (!in_ends.is_ok()) return fail(in_ends.status());
  }
  io::Frame f{kUnitFrame,
              encode_unit(UnitOrder{*rest, feed ? feed->skip_below() : 0,
                                    feed ? feed->route()->window() : 0}),
              {}};
  if (f.body.size() > kControlFrameBytes - io::kFrameHeaderBytes)
    return fail(
        invalid_argument("the unit of " + who() + " takes " + std::to_string(f.body.size()) +
                         " bytes (its saved stage states), more than a control frame holds"));
  {
    auto theirs = dup_fd(out_ends->second.fd());
    if (!theirs.is_ok()) return fail(theirs.status());
    f.fds.push_back(std::move(*theirs));
    out_ends->second = io::UnixSocket();
  }
  if (routed) {
    auto theirs = dup_fd(in_ends->second.fd());
    if (!theirs.is_ok()) return fail(theirs.status());
    f.fds.push_back(std::move(*theirs));
    in_ends->second = io::UnixSocket();
  }
  const bool sent = control_->send(f, 30000).is_ok();
  // The worker's ends must be open in the worker alone, or its death is never seen.
  f.fds.clear();
  if (!sent) return Outcome::kDied;

  io::ShmChannelOptions o;
  o.name = rest->channel;
  o.arena_bytes = launch_->arena_bytes();
  o.segment.dir = launch_->options().shm_dir;
  o.segment.size_option = "LoaderOptions::shm_arena_bytes (shardyard run --shm-arena-mb)";
  o.files = launch_->file_ranges();
  std::vector<io::ShmPeer> peers;
  peers.push_back(io::ShmPeer{std::move(out_ends->first), who()});
  auto consumer = io::ShmConsumer::open(std::move(peers), o);
  Result<UnitStats> done = internal_error("no done frame");
  if (!consumer.is_ok()) {
    // The worker answers the unit it cannot connect to; take that answer off the socket.
    auto got = await_done(10000, &done);
    if (got.is_ok() && *got == io::UnixSocket::Received::kClosed) return Outcome::kDied;
    return fail(consumer.status());
  }
  std::future<Result<ControlOutcome>> control_outcome;
  if (feed) {
    FeedSink sink;
    if (routed) {
      auto input = io::ShmProducer::connect(std::move(in_ends->first), 30000);
      if (!input.is_ok()) {
        auto got = await_done(10000, &done);
        if (got.is_ok() && *got == io::UnixSocket::Received::kClosed) return Outcome::kDied;
        return fail(input.status());
      }
      sink.input = std::move(*input);
    }
    sink.control = control_;
    feed->attach(std::move(sink));
    auto promise = std::make_shared<std::promise<Result<ControlOutcome>>>();
    control_outcome = promise->get_future();
    std::thread(read_control, control_, feed->route(), promise).detach();
  }
  auto& in = **consumer;
  Status pop_error;
  for (;;) {
    io::Packet packet;
    Result<bool> more = in.pop(&packet);
    if (!more.is_ok()) {
      pop_error = more.status();
      break;
    }
    if (!*more) break;
    // Counted once the rank's channel took the packet: the next process starts after it.
    std::vector<std::pair<size_t, uint64_t>> taken;
    std::shared_ptr<const std::string> state;
    const uint64_t items = packet.items.size(), bytes = packet.bytes;
    uint64_t last_position = 0;
    for (const auto& item : packet.items) {
      last_position = item.position;
      if (item.stage_state) state = item.stage_state;
      if (feed) continue;
      auto it = slot.find(item.shard);
      if (it == slot.end())
        return fail(corrupt(who() + " handed over item '" + item.key + "' of logical shard " +
                            std::to_string(item.shard) + ", which is not in its unit"));
      if (taken.empty() || taken.back().first != it->second) taken.emplace_back(it->second, 0);
      ++taken.back().second;
    }
    Status pushed = channel.push(std::move(packet));
    if (!pushed.is_ok()) {
      // The loader gave up on the epoch: the worker's next push fails and it answers.
      in.cancel();
      if (!feed) (void)await_done(10000, &done);
      return fail(pushed);
    }
    for (const auto& [i, n] : taken) rest->consumed[i] += n;
    if (feed && items > 0) feed->handed(last_position);
    if (state) *last_state = std::move(state);
    stats->items += items;
    stats->bytes += bytes;
    if (stats_) stats_->add(items, bytes);
  }
  const int wait_ms = pop_error.is_ok() ? 60000 : 5000;
  Result<io::UnixSocket::Received> got = io::UnixSocket::Received::kTimeout;
  if (feed) {
    if (control_outcome.wait_for(std::chrono::milliseconds(wait_ms)) == std::future_status::ready) {
      auto o = control_outcome.get();
      if (!o.is_ok()) {
        got = o.status();
      } else {
        got = o->got;
        done = std::move(o->done);
      }
    }
  } else {
    got = await_done(wait_ms, &done);
  }
  if (!got.is_ok()) return fail(got.status());
  if (*got == io::UnixSocket::Received::kClosed) {
    // Dead after it finished the channel: the unit is whole.
    if (pop_error.is_ok()) {
      launch_->log(who() + " " + reap() + " after it finished its unit");
      return Outcome::kDone;
    }
    return Outcome::kDied;
  }
  if (*got == io::UnixSocket::Received::kTimeout) {
    std::string how = reap();  // it no longer answers: it goes
    return fail(pop_error.is_ok() ? unavailable(who() +
                                                " finished its channel but sent no done "
                                                "frame; it was stopped (" +
                                                how + ")")
                                  : pop_error);
  }
  if (!done.is_ok()) return fail(done.status());
  if (!pop_error.is_ok()) return fail(pop_error);
  return Outcome::kDone;
}

Result<io::UnixSocket::Received> ProcessRunner::await_done(int timeout_ms,
                                                           Result<UnitStats>* done) {
  io::Frame f;
  SY_ASSIGN_OR_RETURN(auto got, control_->receive(&f, timeout_ms));
  if (got != io::UnixSocket::Received::kFrame) return got;
  if (f.type != kDoneFrame)
    return corrupt(who() + " sent a control frame of type " + std::to_string(f.type) +
                   " where its done frame was due");
  *done = decode_done(f.body);
  return got;
}

Status ProcessRunner::start() {
  last_signaled_ = false;
  const auto& opt = launch_->options();
  SY_ASSIGN_OR_RETURN(auto ends, io::UnixSocket::pair(kControlFrameBytes));
  io::SegmentOptions seg;
  seg.dir = opt.shm_dir;
  seg.what = "key page of worker " + std::to_string(worker_) + " of rank " + std::to_string(rank_);
  SY_ASSIGN_OR_RETURN(auto page, io::ShmSegment::create(kPageBytes, seg));
  SY_ASSIGN_OR_RETURN(page_, page.map(io::ShmSegment::Access::kReadWrite));

  // Everything the child needs is made before it is spawned: between posix_spawn's clone
  // and exec nothing of this process may run.
  const std::string binary = opt.binary.empty() ? self_binary() : opt.binary;
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
  int child_end = ends.second.fd();
  if (child_end == kWorkerFd) {
    SY_ASSIGN_OR_RETURN(moved, dup_fd(child_end));
    child_end = moved.get();
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, child_end, kWorkerFd);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0)
    return io_error("cannot start worker " + std::to_string(worker_) + " of rank " +
                    std::to_string(rank_) + " as a process of " + binary + ": " +
                    std::strerror(rc));
  pid_ = pid;
  control_ = std::make_shared<io::UnixSocket>(std::move(ends.first));
  ends.second = io::UnixSocket();
  moved.reset();

  auto failed = [&](const std::string& why) {
    const std::string who_then = who();
    last_how_ = reap();
    return unavailable(who_then + " " + why + " (" + last_how_ + ")");
  };
  WorkerJob spec = launch_->job();
  spec.rank = rank_;
  spec.worker = worker_;
  io::Frame job{kJobFrame, encode_job(spec), {}};
  SY_ASSIGN_OR_RETURN(io::UniqueFd page_fd, page.duplicate());
  job.fds.push_back(std::move(page_fd));
  if (launch_->has_manifest_segment()) {
    SY_ASSIGN_OR_RETURN(io::UniqueFd manifest_fd, launch_->manifest_fd());
    job.fds.push_back(std::move(manifest_fd));
  }
  if (!control_->send(job, opt.start_timeout_ms).is_ok())
    return failed(
        "closed its control socket before it took the job: does the program call "
        "shardyard::worker_main() at the top of main? (docs/worker-processes.md)");
  io::Frame answer;
  auto got = control_->receive(&answer, opt.start_timeout_ms);
  if (!got.is_ok()) return failed("sent a damaged frame: " + got.status().message());
  if (*got == io::UnixSocket::Received::kClosed)
    return failed(
        "exited before it was ready: does the program call shardyard::worker_main() "
        "at the top of main? (docs/worker-processes.md)");
  if (*got == io::UnixSocket::Received::kTimeout)
    return failed("was not ready within " + std::to_string(opt.start_timeout_ms) +
                  " ms: does the program call shardyard::worker_main() at the top of main?");
  if (answer.type == kFailedFrame) return failed("could not build the job: " + answer.body);
  if (answer.type != kReadyFrame) return failed("answered its job with a frame of another type");
  if (stats_) stats_->set_detail("pid " + std::to_string(pid_));
  return Status::ok();
}

std::string ProcessRunner::reap() {
  if (pid_ <= 0) return "gone";
  int status = 0;
  pid_t got = 0;
  for (int i = 0; i < 500; ++i) {  // 5 s for a process whose sockets closed to be gone
    got = ::waitpid(pid_, &status, WNOHANG);
    if (got != 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::string suffix;
  if (got == 0) {
    ::kill(pid_, SIGKILL);
    got = ::waitpid(pid_, &status, 0);
    suffix = " (it did not exit within 5 s and was killed)";
  }
  last_pid_ = pid_;
  pid_ = -1;
  control_.reset();
  last_signaled_ = got > 0 && WIFSIGNALED(status) && suffix.empty();
  if (got < 0) return "gone (" + std::string(std::strerror(errno)) + ")";
  return describe_exit(status) + suffix;
}

void ProcessRunner::stop() {
  if (pid_ <= 0) return;
  if (control_) control_->shutdown();  // the worker sees its control socket close and exits
  (void)reap();
}

std::string ProcessRunner::current_key() const {
  if (!page_) return {};
  const uint8_t* p = page_->data();
  uint32_t len = 0;
  std::memcpy(&len, p + 8, sizeof len);
  len = std::min<uint32_t>(len, kPageKeyBytes);
  return std::string(reinterpret_cast<const char*>(p + kPageKeyOffset), len);
}

// ---- the worker process ------------------------------------------------------------------

Result<std::shared_ptr<const JobData>> rebuild_job(const WorkerJob& j, const io::Frame& frame,
                                                   std::shared_ptr<DataPlane> plane) {
  JobOptions jo;
  jo.plan = j.plan;
  SY_ASSIGN_OR_RETURN(jo.pipeline, spec_from_string(j.pipeline));
  jo.topology = j.topology;
  jo.batch_size = j.batch_size;
  jo.exact_order = j.exact_order;
  SY_ASSIGN_OR_RETURN(jo.dispatch, parse_dispatch(j.dispatch));
  jo.prefetch_shards = j.prefetch_shards;
  jo.route_key_field = j.route_key_field;
  jo.max_sample_bytes = j.max_sample_bytes;
  const uint32_t packet_items = j.packet_items;
  const uint64_t packet_bytes = j.packet_bytes;
  const bool windows = j.windows.enabled();
  const WindowSpec& spec = j.windows;
  const std::vector<std::string>& sources = j.sources;
  const unsigned scan_threads = j.scan_threads;
  const uint64_t manifest_bytes = j.manifest_bytes;
  const uint64_t fingerprint = j.fingerprint;
  FileSystem& fs = io::default_file_system();
  Manifest manifest;
  if (windows) {
    SY_ASSIGN_OR_RETURN(manifest, io::build_record_manifest(fs, sources, spec, scan_threads));
  } else {
    if (frame.fds.size() < 2) return invalid_argument("a job frame without its manifest");
    SY_ASSIGN_OR_RETURN(auto seg, io::ShmSegment::adopt(io::UniqueFd(::dup(frame.fds[1].get())),
                                                        "the job's manifest"));
    if (manifest_bytes > seg.size()) return corrupt("the manifest segment is shorter than said");
    SY_ASSIGN_OR_RETURN(auto map, seg.map(io::ShmSegment::Access::kReadOnly));
    // Encoded by the rank for this job: the fingerprint told in the job frame is checked
    // below, and neither checksum nor fingerprint is computed again in every process.
    SY_ASSIGN_OR_RETURN(
        manifest, decode_manifest(
                      std::string_view(reinterpret_cast<const char*>(map->data()), manifest_bytes),
                      "the job's manifest", /*verify=*/false));
  }
  if (manifest.fingerprint != fingerprint)
    return invalid_argument("the dataset this worker sees differs from its rank's (fingerprint " +
                            manifest.fingerprint_hex() + ")");
  jo.manifest = std::make_shared<const Manifest>(std::move(manifest));
  jo.fs = &fs;
  jo.clock = &real_clock();
  jo.data_plane = std::move(plane);
  SY_ASSIGN_OR_RETURN(auto job, make_job(std::move(jo)));
  if (job->packet_items != packet_items || job->packet_bytes != packet_bytes)
    return invalid_argument(
        "this worker program packs items otherwise than its rank's: run "
        "workers of the same build as the trainer");
  return job;
}

// The route as a worker process sees it: routed items from its input channel, loaded
// shards and the route's end from the control socket, the loader's credit asked of the rank.
class RemoteRoute : public io::Route {
 public:
  RemoteRoute(io::UnixSocket& control, Dispatch mode, uint32_t window,
              std::shared_ptr<io::ShmConsumer> input)
      : control_(control), mode_(mode), window_(window), input_(std::move(input)) {}
  Status send(Item) override { return invalid_argument("send() on a worker's side"); }
  Status send_shard(std::shared_ptr<const io::SharedShard>) override {
    return invalid_argument("send_shard() on a worker's side");
  }
  void finish(Status) override {}
  void consumed(uint64_t) override {}
  void cancel() override {
    if (input_) input_->cancel();
  }
  Dispatch mode() const override { return mode_; }
  uint32_t window() const override { return window_; }
  size_t depth() const override { return queued_.size(); }
  uint64_t consumed_position() const override { return credit_; }

  Result<io::Delivery> receive(uint32_t, bool wait) override {
    if (!queued_.empty()) {
      io::Delivery d = std::move(queued_.front());
      queued_.pop_front();
      return d;
    }
    if (!wait) return io::Delivery{};
    if (input_) {
      io::Packet p;
      SY_ASSIGN_OR_RETURN(bool more, input_->pop(&p));
      io::Delivery d;
      if (!more) {
        d.kind = io::Delivery::Kind::kEnd;
      } else {
        d.items = std::move(p.items);
      }
      return d;
    }
    for (;;) {
      SY_RETURN_IF_ERROR(read_one());
      if (!queued_.empty()) return receive(0, false);
    }
  }

  Status wait_consumed(uint64_t position) override {
    if (credit_ >= position) return Status::ok();
    ByteWriter w;
    w.u64(position);
    SY_RETURN_IF_ERROR(control_.send(io::Frame{kCreditWantFrame, w.out, {}}, 30000));
    while (credit_ < position) SY_RETURN_IF_ERROR(read_one());
    return Status::ok();
  }

 private:
  // One frame of the rank's: a shard or the end (queued as deliveries) or credit.
  Status read_one() {
    io::Frame f;
    SY_ASSIGN_OR_RETURN(auto got, control_.receive(&f, 1000));
    if (got == io::UnixSocket::Received::kTimeout) return Status::ok();
    if (got == io::UnixSocket::Received::kClosed)
      return unavailable("the rank closed this worker's control socket");
    switch (f.type) {
      case kCreditFrame: {
        ByteReader r(f.body);
        const uint64_t credit = r.u64();
        if (!r.done()) return corrupt("a damaged credit frame");
        credit_ = std::max(credit_, credit);
        return Status::ok();
      }
      case kShardFrame: {
        if (f.fds.size() != 1) return corrupt("a shard frame without its image");
        SY_ASSIGN_OR_RETURN(auto view,
                            io::ShmShardView::open(std::move(f.fds[0]), "a loaded shard"));
        io::Delivery d;
        d.kind = io::Delivery::Kind::kShard;
        d.shard = view->lazy_shard();
        queued_.push_back(std::move(d));
        return Status::ok();
      }
      case kRouteEndFrame: {
        SY_RETURN_IF_ERROR(decode_status(f.body));
        io::Delivery d;
        d.kind = io::Delivery::Kind::kEnd;
        queued_.push_back(std::move(d));
        return Status::ok();
      }
      default:
        return corrupt("the rank sent a control frame of type " + std::to_string(f.type) +
                       " in a unit");
    }
  }

  io::UnixSocket& control_;
  const Dispatch mode_;
  const uint32_t window_;
  std::shared_ptr<io::ShmConsumer> input_;
  std::deque<io::Delivery> queued_;
  uint64_t credit_ = 0;
};

// Runs one unit frame of the rank's: connects to the unit's channel (and its input, routed
// items), runs it, and says what came of it.
Result<UnitStats> run_unit_frame(io::UnixSocket& control, const JobData& job, WorkerCore& core,
                                 io::Frame& f) {
  SY_ASSIGN_OR_RETURN(UnitOrder order, decode_unit(f.body));
  const WorkUnit& unit = order.unit;
  const uint64_t skip_below = order.skip_below;
  const uint32_t window = order.window;
  const bool routed = !unit.route.empty() && job.dispatch != Dispatch::kBroadcast;
  if (f.fds.size() != (routed ? 2u : 1u))
    return corrupt("a unit frame with " + std::to_string(f.fds.size()) + " descriptors");
  SY_ASSIGN_OR_RETURN(auto out_socket, io::UnixSocket::adopt(std::move(f.fds[0])));
  SY_ASSIGN_OR_RETURN(auto output, io::ShmProducer::connect(std::move(out_socket), 30000));
  if (unit.route.empty()) return core.run(unit, *output);
  std::shared_ptr<io::ShmConsumer> input;
  if (routed) {
    SY_ASSIGN_OR_RETURN(auto in_socket, io::UnixSocket::adopt(std::move(f.fds[1])));
    io::ShmChannelOptions o;
    o.name = unit.channel + "/in";
    o.arena_bytes = 16ull << 20;
    std::vector<io::ShmPeer> peers;
    peers.push_back(io::ShmPeer{std::move(in_socket), "the rank's dispatcher"});
    auto opened = io::ShmConsumer::open(std::move(peers), o);
    if (!opened.is_ok()) {
      output->finish(opened.status());
      return opened.status();
    }
    input = std::move(*opened);
  }
  RemoteRoute route(control, job.dispatch, window, input);
  core.set_skip_below(skip_below);
  return core.run(unit, *output, &route);
}

Status serve_rank(io::UnixSocket& control) {
  io::Frame frame;
  SY_ASSIGN_OR_RETURN(auto got, control.receive(&frame, 60000));
  if (got != io::UnixSocket::Received::kFrame) return unavailable("no job from the rank");
  if (frame.type != kJobFrame || frame.fds.empty())
    return corrupt("the rank's first frame is not the job");
  auto spec = decode_job(frame.body);
  auto job = spec.is_ok() ? rebuild_job(*spec, frame, io::inproc_data_plane())
                          : Result<std::shared_ptr<const JobData>>(spec.status());
  if (!job.is_ok()) {
    (void)control.send(io::Frame{kFailedFrame, job.status().to_string(), {}}, 10000);
    return job.status();
  }
  const uint32_t rank = spec->rank, worker = spec->worker;
  SY_ASSIGN_OR_RETURN(auto page_seg,
                      io::ShmSegment::adopt(std::move(frame.fds[0]), "the key page"));
  SY_ASSIGN_OR_RETURN(auto page, page_seg.map(io::ShmSegment::Access::kReadWrite));
  WorkerCore core(*job, rank, worker);
  uint8_t* p = page->writable_data();
  core.set_on_item([p](const Item& item) {
    // A sequence number odd while the key changes: the rank reads it only once this process
    // is dead, and then a torn key is still the item it was on.
    auto* seq = reinterpret_cast<uint64_t*>(p);
    __atomic_fetch_add(seq, 1, __ATOMIC_RELEASE);
    const uint32_t len = static_cast<uint32_t>(std::min(item.key.size(), kPageKeyBytes));
    std::memcpy(p + kPageKeyOffset, item.key.data(), len);
    std::memcpy(p + 8, &len, sizeof len);
    __atomic_fetch_add(seq, 1, __ATOMIC_RELEASE);
  });
  ByteWriter ready;
  ready.u64(static_cast<uint64_t>(::getpid()));
  SY_RETURN_IF_ERROR(control.send(io::Frame{kReadyFrame, ready.out, {}}, 10000));
  for (;;) {
    io::Frame f;
    SY_ASSIGN_OR_RETURN(auto next, control.receive(&f, 1000));
    if (next == io::UnixSocket::Received::kClosed) return Status::ok();  // the rank let go
    if (next == io::UnixSocket::Received::kTimeout) continue;
    // What the route of a unit that already ended still sent (its end after a reset, a late
    // credit, a shard of an abandoned epoch) concerns no unit any more.
    if (f.type == kRouteEndFrame || f.type == kCreditFrame || f.type == kShardFrame) continue;
    if (f.type != kUnitFrame || f.fds.empty())
      return corrupt("the rank sent a frame of type " + std::to_string(f.type) +
                     " where a unit was due");
    Result<UnitStats> result = run_unit_frame(control, **job, core, f);
    SY_RETURN_IF_ERROR(control.send(io::Frame{kDoneFrame, encode_done(result), {}}, 30000));
  }
}

}  // namespace

// ---- WorkerLaunch ------------------------------------------------------------------------

namespace {

// The source files of a job as the rank maps them for file ranges: the last few opened stay
// open (a worker's items come from one shard after another).
class SourceFiles {
 public:
  explicit SourceFiles(std::shared_ptr<const Manifest> manifest) : manifest_(std::move(manifest)) {}

  Result<io::FileView> map(uint32_t source, uint64_t offset, uint64_t size) {
    if (source >= manifest_->sources.size())
      return corrupt("a file range of source " + std::to_string(source) + ", of " +
                     std::to_string(manifest_->sources.size()));
    const SourceEntry& src = manifest_->sources[source];
    if (src.kind != SourceKind::kTar)
      return corrupt("a file range of " + src.uri + ", which is not a tar file");
    if (offset > src.size_bytes || size > src.size_bytes - offset)
      return corrupt("a file range of " + src.uri + " at " + std::to_string(offset) + " + " +
                     std::to_string(size) + ", past its " + std::to_string(src.size_bytes) +
                     " bytes");
    SY_ASSIGN_OR_RETURN(auto file, open(source));
    auto mapped = file->map(offset, static_cast<size_t>(size));
    if (!mapped.is_ok()) return mapped.status();
    if (*mapped) {
      const uint8_t* data = (*mapped)->data();
      return io::FileView{data, std::move(*mapped)};
    }
    auto bytes = std::make_shared<std::string>(static_cast<size_t>(size), '\0');
    SY_RETURN_IF_ERROR(io::read_exact(*file, offset, bytes->data(), bytes->size()));
    const auto* data = reinterpret_cast<const uint8_t*>(bytes->data());
    return io::FileView{data, std::move(bytes)};
  }

 private:
  static constexpr size_t kOpenFiles = 8;

  Result<std::shared_ptr<RandomAccessFile>> open(uint32_t source) {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < open_.size(); ++i)
      if (open_[i].first == source) {
        auto hit = open_[i];
        open_.erase(open_.begin() + static_cast<ptrdiff_t>(i));
        open_.push_front(hit);
        return hit.second;
      }
    SY_ASSIGN_OR_RETURN(auto file, io::default_file_system().open(manifest_->sources[source].uri));
    std::shared_ptr<RandomAccessFile> shared(std::move(file));
    open_.emplace_front(source, shared);
    if (open_.size() > kOpenFiles) open_.pop_back();
    return shared;
  }

  const std::shared_ptr<const Manifest> manifest_;
  std::mutex mu_;
  std::deque<std::pair<uint32_t, std::shared_ptr<RandomAccessFile>>> open_;  // guarded by mu_
};

}  // namespace

Result<std::shared_ptr<WorkerLaunch>> WorkerLaunch::create(const JobData& job,
                                                           WorkerProcessOptions options) {
  auto launch = std::shared_ptr<WorkerLaunch>(new WorkerLaunch());
  WorkerJob& j = launch->job_;
  j.fingerprint = job.manifest->fingerprint;
  j.plan = job.plan;
  j.pipeline = spec_to_string(job.pipeline);
  j.topology = job.topology;
  j.batch_size = job.batch_size;
  j.exact_order = job.exact_order;
  j.dispatch = dispatch_name(job.dispatch);
  j.prefetch_shards = job.prefetch_shards;
  j.route_key_field = job.route_key_field;
  j.max_sample_bytes = job.reader.max_sample_bytes;
  j.packet_items = job.packet_items;
  j.packet_bytes = job.packet_bytes;
  const WindowSpec& spec = job.manifest->windows;
  if (spec.enabled()) {
    j.windows = spec;
    j.scan_threads = options.scan_threads;
    j.sources = options.sources;
  } else {
    // The manifest once, in a segment every worker process maps read-only to decode it
    // (without a checksum: they decode it without verifying, rebuild_job()).
    const std::string encoded = encode_manifest(*job.manifest, /*checksum=*/false);
    io::SegmentOptions seg;
    seg.dir = options.shm_dir;
    seg.what = "the job's manifest for its worker processes";
    SY_ASSIGN_OR_RETURN(auto segment, io::ShmSegment::create(encoded.size(), seg));
    {
      SY_ASSIGN_OR_RETURN(auto map, segment.map(io::ShmSegment::Access::kReadWrite));
      std::memcpy(map->writable_data(), encoded.data(), encoded.size());
    }
    launch->manifest_.emplace(std::move(segment));
    j.manifest_bytes = encoded.size();
    auto files = std::make_shared<SourceFiles>(job.manifest);
    launch->file_ranges_ = [files](uint32_t source, uint64_t offset, uint64_t size) {
      return files->map(source, offset, size);
    };
  }
  const size_t frame_bytes = encode_job(j).size();
  if (frame_bytes + 64 > kControlFrameBytes)
    return invalid_argument("the job's description for worker processes takes " +
                            std::to_string(frame_bytes) + " bytes, more than a control frame");
  // The arena holds what is in flight from one worker: its packets (4 sent and one being
  // written, each at most 128 items or 4 MiB plus the item that crossed) and the items of
  // it the loader keeps until they are collated (the batches prefetched, the one being
  // built and the one being merged). Where the rank order takes the workers' items in turn
  // (strided, without routing by key) a batch holds about 1/W of a worker's items; twice
  // that leaves room for unevenness. Elsewhere a batch may come from one worker alone.
  // Fields that cross as file ranges take no room: without a dispatcher (whose items reach
  // a worker through its input channel, not from a mapping of its own), a sample of a local
  // tar shard that is always read by mapping (as long as the reader's mapping threshold)
  // counts one field's threshold (its small fields, a large one's neighbours); a smaller
  // one may be read into a buffer and copied whole.
  const uint64_t payload =
      spec.enabled() ? job.manifest->window_payload_bytes()
                     : job.manifest->payload_bytes() / std::max<uint64_t>(1, job.index.num_items());
  uint64_t copied = payload;
  if (!spec.enabled() && job.dispatch == Dispatch::kNone) {
    const uint64_t field = io::ShmChannelOptions{}.file_field_bytes;
    const uint64_t mapped = job.reader.map_threshold_bytes;
    uint64_t total = 0, items = 0;
    for (const auto& src : job.manifest->sources) {
      const bool ranges = src.kind == SourceKind::kTar && !io::is_remote_uri(src.uri);
      for (const auto& sample : src.samples)
        total += ranges && sample.end - sample.begin >= mapped
                     ? std::min(sample.payload_bytes, field)
                     : sample.payload_bytes;
      items += src.samples.size();
    }
    copied = total / std::max<uint64_t>(1, items);
  }
  const uint64_t mean = copied + 256;
  const uint64_t packet_items =
      std::min<uint64_t>(job.packet_items, job.packet_bytes / std::max<uint64_t>(1, payload) + 1);
  const uint64_t packet = packet_items * mean + mean;
  uint64_t held = uint64_t{job.batch_size} * mean * (options.prefetch_batches + 3);
  const uint32_t workers = job.topology.workers;
  const bool even = job.plan.worker_strategy == "strided" &&
                    (job.dispatch == Dispatch::kNone || job.dispatch == Dispatch::kRoundRobin ||
                     job.dispatch == Dispatch::kBroadcast);
  if (even && workers > 2) held = held * 2 / workers;
  const uint64_t wanted = 5 * packet + held;
  launch->arena_bytes_ = options.arena_bytes ? options.arena_bytes
                                             : std::clamp<uint64_t>(wanted, 8ull << 20, 1ull << 30);
  launch->options_ = std::move(options);
  return launch;
}

Result<io::UniqueFd> WorkerLaunch::manifest_fd() const {
  if (!manifest_) return invalid_argument("this job has no manifest segment");
  return manifest_->read_only_fd();
}

void WorkerLaunch::log(const std::string& line) const {
  if (options_.log)
    options_.log(line);
  else
    std::fprintf(stderr, "shardyard: %s\n", line.c_str());
}

Result<std::shared_ptr<io::ShmShardImage>> WorkerLaunch::shard_image(
    uint32_t rank, const std::shared_ptr<const io::SharedShard>& shard) {
  std::lock_guard<std::mutex> lock(images_mu_);
  for (auto it = images_.begin(); it != images_.end();)
    it = it->second.image.expired() ? images_.erase(it) : std::next(it);
  Image& slot = images_[{rank, shard.get()}];
  if (auto image = slot.image.lock(); image && slot.shard.lock() == shard) return image;
  io::SegmentOptions seg;
  seg.dir = options_.shm_dir;
  seg.what = "the image of logical shard " + std::to_string(shard->shard) + " for rank " +
             std::to_string(rank) + "'s worker processes";
  SY_ASSIGN_OR_RETURN(auto made, io::ShmShardImage::create(*shard, seg));
  auto image = std::make_shared<io::ShmShardImage>(std::move(made));
  slot.shard = shard;
  slot.image = image;
  return image;
}

std::shared_ptr<UnitRunner> make_process_runner(std::shared_ptr<WorkerLaunch> launch,
                                                std::shared_ptr<const JobData> job, uint32_t rank,
                                                uint32_t worker) {
  return std::make_shared<ProcessRunner>(std::move(launch), std::move(job), rank, worker);
}

std::optional<int> run_worker_process_if_requested() {
  const char* number = std::getenv(kWorkerFdEnv);
  if (number == nullptr || *number == '\0') return std::nullopt;
  // Dies with the rank's thread that started it; a rank already gone is not waited for.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (const char* parent = std::getenv(kWorkerParentEnv))
    if (std::strtoll(parent, nullptr, 10) != static_cast<long long>(::getppid())) return 1;
  auto control =
      io::UnixSocket::adopt_number(number, "the worker's control socket", kControlFrameBytes);
  ::unsetenv(kWorkerFdEnv);
  ::unsetenv(kWorkerParentEnv);
  if (!control.is_ok()) {
    std::fprintf(stderr, "shardyard worker: %s\n", control.status().to_string().c_str());
    return 1;
  }
  Status st = serve_rank(*control);
  if (!st.is_ok()) {
    std::fprintf(stderr, "shardyard worker (pid %d): %s\n", static_cast<int>(::getpid()),
                 st.to_string().c_str());
    return 1;
  }
  return 0;
}

}  // namespace shardyard::actors
