#include "actors/state/worker_process.h"

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
#include "actors/state/worker_spawn.h"
#include "io/transport/pulled_channel.h"
#include "io/transport/shm_channel.h"
#include "io/transport/shm_frames.h"
#include "io/transport/shm_shard.h"
#include "io/transport/unix_socket.h"
#include "runtime/clock.h"
#include "runtime/codec.h"

namespace shardyard::actors {

namespace {

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
        e.image->handed.fetch_add(1);  // its worker read the last of its part
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
    std::shared_ptr<SharedImage> image;
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
        e.image->parts.fetch_add(1);
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
      auto fd = e.image->image.share();
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
    if (!process_.running()) prepared_ = start();
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
    return name() +
           (process_.running() ? " (pid " + std::to_string(process_.pid()) + ")" : std::string());
  }
  // Without the pid: the name of the channel's producer, to which the channel adds the pid
  // the process answers with.
  std::string name() const {
    return "worker " + std::to_string(worker_) + " of rank " + std::to_string(rank_);
  }

  Status run_unit(const WorkUnit& unit, io::Channel& channel, UnitStats* stats);
  Outcome attempt(WorkUnit* rest, const std::map<uint32_t, size_t>& slot, UnitFeed* feed,
                  io::Channel& channel, UnitStats* stats,
                  std::shared_ptr<const std::string>* last_state, Status* error);
  Status start();
  // The options of this worker's channels (the name aside).
  io::ShmChannelOptions channel_options() const;
  // Puts the arenas of the next channel in the pools when they are empty (a first start):
  // made while the process starts, they are not made while the unit waits. A failure is
  // left for the channel to say (it makes them again).
  void stock_arenas();
  // Waits for the done frame of the unit just run; kClosed when the process died first.
  Result<io::UnixSocket::Received> await_done(int timeout_ms, Result<UnitStats>* done);
  std::string reap();  // waits for the process (SIGKILL after 5 s) and says how it ended
  void stop();
  std::string current_key() const;

  std::shared_ptr<WorkerLaunch> launch_;
  std::shared_ptr<const JobData> job_;
  const uint32_t rank_, worker_;
  std::shared_ptr<RoleStats> stats_;
  WorkerProcess process_;
  // Shared with the thread that reads it during a routed unit (which may outlive a dead
  // process's unit by a little).
  std::shared_ptr<io::UnixSocket> control_;
  std::shared_ptr<io::ShmMapping> page_;
  // The arenas of this worker's channels, one per unit, reused from unit to unit: its
  // output's (made here), and its routed input's (made by the worker process).
  const std::shared_ptr<io::ArenaPool> arenas_ = std::make_shared<io::ArenaPool>();
  const std::shared_ptr<io::ArenaPool> data_arenas_ = std::make_shared<io::ArenaPool>();
  io::AttachedArenas input_arenas_;
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
    if (!process_.running()) {
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
    if (process_.running()) {
      Status error;
      const Outcome outcome = attempt(&rest, slot, feed.get(), channel, stats, &last_state, &error);
      if (outcome == Outcome::kDone) {
        if (feed) feed->join();
        return Status::ok();
      }
      if (outcome == Outcome::kFailed) return failed(error);
      // The process died: what it handed over stays handed over; the rest goes to a new one.
      pid = process_.pid();
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
    auto theirs = out_ends->second.duplicate();
    if (!theirs.is_ok()) return fail(theirs.status());
    f.fds.push_back(std::move(*theirs));
    out_ends->second = io::UnixSocket();
  }
  if (routed) {
    auto theirs = in_ends->second.duplicate();
    if (!theirs.is_ok()) return fail(theirs.status());
    f.fds.push_back(std::move(*theirs));
    in_ends->second = io::UnixSocket();
  }
  const bool sent = control_->send(f, 30000).is_ok();
  // The worker's ends must be open in the worker alone, or its death is never seen.
  f.fds.clear();
  if (!sent) return Outcome::kDied;

  io::ShmChannelOptions o = channel_options();
  o.name = rest->channel;
  std::vector<io::ShmPeer> peers;
  peers.push_back(io::ShmPeer{std::move(out_ends->first), name()});
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
      auto input =
          io::ShmProducer::connect(std::move(in_ends->first), 30000,
                                   io::ShmChannelOptions{}.wait_timeout_ms, &input_arenas_);
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
  // Checks a packet popped from the worker process and counts it as handed over (the next
  // process starts after it). Called on the thread that hands it to the rank's channel.
  auto hand_over = [&](const io::Packet& packet) -> Status {
    std::vector<std::pair<size_t, uint64_t>> taken;
    std::shared_ptr<const std::string> state;
    uint64_t last_position = 0;
    for (const auto& item : packet.items) {
      last_position = item.position;
      if (item.stage_state) state = item.stage_state;
      if (feed) continue;
      auto it = slot.find(item.shard);
      if (it == slot.end())
        return corrupt(who() + " handed over item '" + item.key + "' of logical shard " +
                       std::to_string(item.shard) + ", which is not in its unit");
      if (taken.empty() || taken.back().first != it->second) taken.emplace_back(it->second, 0);
      ++taken.back().second;
    }
    const uint64_t items = packet.items.size(), bytes = packet.bytes;
    for (const auto& [i, n] : taken) rest->consumed[i] += n;
    if (feed && items > 0) feed->handed(last_position);
    if (state) *last_state = std::move(state);
    stats->items += items;
    stats->bytes += bytes;
    if (stats_) stats_->add(items, bytes);
    return Status::ok();
  };
  Status pop_error;
  bool drain = true;
  if (!feed) {
    // The rank's consumer pops the channel itself while the unit runs (no hop through this
    // thread per packet); this thread takes it back once the process answered or died,
    // and hands over what is left of it. Not where the workers share the rank's channel
    // (as-completed order: set_source() refuses), nor with a feed, whose thread reads the
    // control socket.
    auto source = std::make_shared<io::PulledChannel>(in, hand_over);
    if (source->usable() && channel.set_source(source)) {
      source->wait(control_->fd());
      channel.set_source(nullptr);
      Status failed;
      drain = !source->take_back(&pop_error, &failed);
      if (!failed.is_ok()) return fail(std::move(failed));
    }
  }
  while (drain) {
    io::Packet packet;
    Result<bool> more = in.pop(&packet);
    if (!more.is_ok()) {
      pop_error = more.status();
      break;
    }
    if (!*more) break;
    // Counted before the push: a push that fails fails the unit, counts and all.
    Status handed = hand_over(packet);
    if (!handed.is_ok()) return fail(std::move(handed));
    Status pushed = channel.push(std::move(packet));
    if (!pushed.is_ok()) {
      // The loader gave up on the epoch: the worker's next push fails and it answers.
      in.cancel();
      if (!feed) (void)await_done(10000, &done);
      return fail(pushed);
    }
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

  SY_ASSIGN_OR_RETURN(
      process_, WorkerProcess::start(ends.second, opt.binary, name(), opt.start_timeout_ms,
                                     [this](const std::string& line) { launch_->log(line); }));
  control_ = std::make_shared<io::UnixSocket>(std::move(ends.first));
  ends.second = io::UnixSocket();

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
  // While the process loads and builds its job, make the arenas of its first channel.
  stock_arenas();
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
  if (stats_) stats_->set_detail("pid " + std::to_string(process_.pid()));
  return Status::ok();
}

io::ShmChannelOptions ProcessRunner::channel_options() const {
  io::ShmChannelOptions o;
  o.arena_bytes = launch_->arena_bytes();
  o.segment.dir = launch_->options().shm_dir;
  o.segment.size_option = "LoaderOptions::shm_arena_bytes (shardyard run --shm-arena-mb)";
  o.files = launch_->file_ranges();
  o.arenas = arenas_;
  o.data_bytes = launch_->data_bytes();
  o.data_arenas = data_arenas_;
  return o;
}

void ProcessRunner::stock_arenas() {
  const io::ShmChannelOptions o = channel_options();
  io::SegmentOptions seg = o.segment;
  seg.what = "arena of " + who();
  auto stock = [&](io::ArenaPool& pool, uint64_t bytes) {
    if (pool.idle() > 0) return true;
    auto arena = io::ShmArena::create(bytes, seg);
    if (arena.is_ok()) pool.give_back(*arena);
    return arena.is_ok();
  };
  // The optional data arena only after the channel's own arena, as the channel makes them:
  // it must not take the room the other one needs.
  if (stock(*arenas_, o.arena_bytes) && o.data_bytes > 0) stock(*data_arenas_, o.data_bytes);
}

std::string ProcessRunner::reap() {
  if (!process_.running()) return "gone";
  last_pid_ = process_.pid();
  control_.reset();
  return process_.reap(&last_signaled_);
}

void ProcessRunner::stop() {
  if (!process_.running()) return;
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

}  // namespace

std::shared_ptr<UnitRunner> make_process_runner(std::shared_ptr<WorkerLaunch> launch,
                                                std::shared_ptr<const JobData> job, uint32_t rank,
                                                uint32_t worker) {
  return std::make_shared<ProcessRunner>(std::move(launch), std::move(job), rank, worker);
}

}  // namespace shardyard::actors
