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
#include <map>
#include <thread>

#include "actors/state/status_board.h"
#include "io/format/record_scan.h"
#include "io/remote/remote_file_system.h"
#include "io/transport/shm_channel.h"
#include "io/transport/unix_socket.h"
#include "runtime/clock.h"
#include "runtime/codec.h"

extern char** environ;

namespace shardyard::actors {

namespace {

// Frames of the control socket between a rank and one of its worker processes. Every unit
// frame is answered by exactly one done frame.
enum ControlFrame : uint16_t {
  kJobFrame = 101,     // rank -> worker: the job, rank, worker; fds: key page, manifest
  kReadyFrame = 102,   // worker -> rank: its pid
  kUnitFrame = 103,    // rank -> worker: a work unit; fd: the unit's channel socket
  kDoneFrame = 104,    // worker -> rank: the unit's items, bytes and status
  kFailedFrame = 105,  // worker -> rank: it cannot build the job (the message)
};
constexpr uint32_t kControlVersion = 1;
constexpr size_t kControlFrameBytes = 1 << 20;
constexpr int kWorkerFd = 3;  // where the control socket lies in a worker process
// The key page: u64 sequence (odd while the key is written) | u32 length | u32 0 | key.
constexpr size_t kPageBytes = 4096;
constexpr size_t kPageKeyOffset = 16;
constexpr size_t kPageKeyBytes = kPageBytes - kPageKeyOffset;

std::string encode_unit(const WorkUnit& u) {
  ByteWriter w;
  w.u32(u.rank);
  w.u32(u.worker);
  w.u32(u.epoch);
  w.u64(u.epoch_key);
  w.u32(static_cast<uint32_t>(u.shards.size()));
  for (size_t i = 0; i < u.shards.size(); ++i) {
    w.u32(u.shards[i]);
    w.u64(i < u.take.size() ? u.take[i] : 0);
    w.u64(i < u.consumed.size() ? u.consumed[i] : 0);
  }
  w.str(u.channel);
  w.u32(static_cast<uint32_t>(u.stage_states.size()));
  for (const auto& s : u.stage_states) w.str(s);
  w.u8(u.rescaled ? 1 : 0);
  w.str(u.route);
  return std::move(w.out);
}

Result<WorkUnit> decode_unit(std::string_view body) {
  ByteReader r(body);
  WorkUnit u;
  u.rank = r.u32();
  u.worker = r.u32();
  u.epoch = r.u32();
  u.epoch_key = r.u64();
  const uint32_t n = r.u32();
  if (n > r.left() / 20) return corrupt("a unit frame claims " + std::to_string(n) + " shards");
  for (uint32_t i = 0; i < n; ++i) {
    u.shards.push_back(r.u32());
    u.take.push_back(r.u64());
    u.consumed.push_back(r.u64());
  }
  u.channel = r.str();
  const uint32_t states = r.u32();
  if (states > r.left() / 4)
    return corrupt("a unit frame claims " + std::to_string(states) + " states");
  for (uint32_t i = 0; i < states; ++i) u.stage_states.push_back(r.str());
  u.rescaled = r.flag();
  u.route = r.str();
  if (!r.done()) return corrupt("a damaged unit frame");
  return u;
}

std::string encode_done(const Result<UnitStats>& r) {
  ByteWriter w;
  w.u64(r.is_ok() ? r->items : 0);
  w.u64(r.is_ok() ? r->bytes : 0);
  w.u32(static_cast<uint32_t>(r.status().code()));
  w.str(r.status().message());
  return std::move(w.out);
}

Result<UnitStats> decode_done(std::string_view body) {
  ByteReader r(body);
  UnitStats s;
  s.items = r.u64();
  s.bytes = r.u64();
  const uint32_t code = r.u32();
  std::string message = r.str();
  if (!r.done() || code > static_cast<uint32_t>(StatusCode::kUnavailable))
    return corrupt("a damaged done frame from a worker process");
  if (code != 0) return Status(static_cast<StatusCode>(code), std::move(message));
  return s;
}

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

class ProcessRunner : public UnitRunner {
 public:
  ProcessRunner(std::shared_ptr<WorkerLaunch> launch, std::shared_ptr<const JobData> job,
                uint32_t rank, uint32_t worker)
      : launch_(std::move(launch)), job_(std::move(job)), rank_(rank), worker_(worker) {
    if (job_->status) stats_ = job_->status->role("worker", rank, worker);
  }
  ~ProcessRunner() override { stop(); }

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
  Outcome attempt(WorkUnit* rest, const std::map<uint32_t, size_t>& slot, io::Channel& channel,
                  UnitStats* stats, std::shared_ptr<const std::string>* last_state, Status* error);
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
  io::UnixSocket control_;
  std::shared_ptr<io::ShmMapping> page_;
  uint64_t restarts_ = 0;
};

Status ProcessRunner::run_unit(const WorkUnit& unit, io::Channel& channel, UnitStats* stats) {
  if (!unit.route.empty())
    return invalid_argument(
        "placement local runs workers that read their own shards (dispatch "
        "none); routed and broadcast dispatch need placement inproc");
  std::map<uint32_t, size_t> slot;  // logical shard -> its index in the unit
  for (size_t i = 0; i < unit.shards.size(); ++i) slot[unit.shards[i]] = i;
  WorkUnit rest = unit;
  rest.consumed.resize(rest.shards.size(), 0);
  std::shared_ptr<const std::string> last_state;
  uint64_t handed_at_death = UINT64_MAX;
  uint32_t fruitless = 0;  // deaths in a row without an item handed over in between
  const uint32_t max_restarts = launch_->options().max_restarts;
  for (;;) {
    if (pid_ < 0) SY_RETURN_IF_ERROR(start());
    Status error;
    const Outcome outcome = attempt(&rest, slot, channel, stats, &last_state, &error);
    if (outcome == Outcome::kDone) return Status::ok();
    if (outcome == Outcome::kFailed) return error;
    // The process died: what it handed over stays handed over; the rest goes to a new one.
    const pid_t pid = pid_;
    const std::string key = current_key();
    const std::string how = reap();
    fruitless = stats->items == handed_at_death ? fruitless + 1 : 1;
    handed_at_death = stats->items;
    const std::string what = "worker " + std::to_string(worker_) + " of rank " +
                             std::to_string(rank_) + " (pid " + std::to_string(pid) + ") " + how +
                             (key.empty() ? std::string() : " on item '" + key + "'") +
                             " in its unit of epoch " + std::to_string(unit.epoch) + " after " +
                             std::to_string(stats->items) + " items";
    if (fruitless > max_restarts)
      return internal_error(
          what + ": it died " + std::to_string(fruitless) +
          " times in a row without handing over another item (a poison sample?); the run stops "
          "after " +
          std::to_string(max_restarts) + " restarts (max_worker_restarts, --max-worker-restarts)");
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

ProcessRunner::Outcome ProcessRunner::attempt(WorkUnit* rest,
                                              const std::map<uint32_t, size_t>& slot,
                                              io::Channel& channel, UnitStats* stats,
                                              std::shared_ptr<const std::string>* last_state,
                                              Status* error) {
  auto fail = [&](Status st) {
    *error = std::move(st);
    return Outcome::kFailed;
  };
  auto ends = io::UnixSocket::pair();
  if (!ends.is_ok()) return fail(ends.status());
  auto theirs = dup_fd(ends->second.fd());
  if (!theirs.is_ok()) return fail(theirs.status());
  ends->second = io::UnixSocket();
  io::Frame f{kUnitFrame, encode_unit(*rest), {}};
  if (f.body.size() > kControlFrameBytes - io::kFrameHeaderBytes)
    return fail(
        invalid_argument("the unit of " + who() + " takes " + std::to_string(f.body.size()) +
                         " bytes (its saved stage states), more than a control frame holds"));
  f.fds.push_back(std::move(*theirs));
  const bool sent = control_.send(f, 30000).is_ok();
  // The worker's end must be open in the worker alone, or its death is never seen.
  f.fds.clear();
  if (!sent) return Outcome::kDied;

  io::ShmChannelOptions o;
  o.name = rest->channel;
  o.arena_bytes = launch_->arena_bytes();
  o.segment.dir = launch_->options().shm_dir;
  o.segment.size_option = "LoaderOptions::shm_arena_bytes (shardyard run --shm-arena-mb)";
  std::vector<io::ShmPeer> peers;
  peers.push_back(io::ShmPeer{std::move(ends->first), who()});
  auto consumer = io::ShmConsumer::open(std::move(peers), o);
  Result<UnitStats> done = internal_error("no done frame");
  if (!consumer.is_ok()) {
    // The worker answers the unit it cannot connect to; take that answer off the socket.
    auto got = await_done(10000, &done);
    if (got.is_ok() && *got == io::UnixSocket::Received::kClosed) return Outcome::kDied;
    return fail(consumer.status());
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
    for (const auto& item : packet.items) {
      auto it = slot.find(item.shard);
      if (it == slot.end())
        return fail(corrupt(who() + " handed over item '" + item.key + "' of logical shard " +
                            std::to_string(item.shard) + ", which is not in its unit"));
      if (taken.empty() || taken.back().first != it->second) taken.emplace_back(it->second, 0);
      ++taken.back().second;
      if (item.stage_state) state = item.stage_state;
    }
    Status pushed = channel.push(std::move(packet));
    if (!pushed.is_ok()) {
      // The loader gave up on the epoch: the worker's next push fails and it answers.
      in.cancel();
      (void)await_done(10000, &done);
      return fail(pushed);
    }
    for (const auto& [i, n] : taken) rest->consumed[i] += n;
    if (state) *last_state = std::move(state);
    stats->items += items;
    stats->bytes += bytes;
    if (stats_) stats_->add(items, bytes);
  }
  auto got = await_done(pop_error.is_ok() ? 60000 : 5000, &done);
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
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    io::Frame f;
    SY_ASSIGN_OR_RETURN(auto got,
                        control_.receive(&f, static_cast<int>(std::max<int64_t>(0, left.count()))));
    if (got != io::UnixSocket::Received::kFrame) return got;
    if (f.type != kDoneFrame)
      return corrupt(who() + " sent a control frame of type " + std::to_string(f.type) +
                     " where its done frame was due");
    *done = decode_done(f.body);
    return got;
  }
}

Status ProcessRunner::start() {
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
  control_ = std::move(ends.first);
  ends.second = io::UnixSocket();
  moved.reset();

  auto failed = [&](const std::string& why) {
    const std::string who_then = who();
    const std::string how = reap();
    return unavailable(who_then + " " + why + " (" + how + ")");
  };
  io::Frame job{kJobFrame, launch_->job_frame(), {}};
  ByteWriter tail;
  tail.u32(rank_);
  tail.u32(worker_);
  job.body += tail.out;
  SY_ASSIGN_OR_RETURN(io::UniqueFd page_fd, page.duplicate());
  job.fds.push_back(std::move(page_fd));
  if (launch_->has_manifest_segment()) {
    SY_ASSIGN_OR_RETURN(io::UniqueFd manifest_fd, launch_->manifest_fd());
    job.fds.push_back(std::move(manifest_fd));
  }
  if (!control_.send(job, opt.start_timeout_ms).is_ok())
    return failed(
        "closed its control socket before it took the job: does the program call "
        "shardyard::worker_main() at the top of main? (docs/worker-processes.md)");
  io::Frame answer;
  auto got = control_.receive(&answer, opt.start_timeout_ms);
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
  pid_ = -1;
  control_ = io::UnixSocket();
  if (got < 0) return "gone (" + std::string(std::strerror(errno)) + ")";
  return describe_exit(status) + suffix;
}

void ProcessRunner::stop() {
  if (pid_ <= 0) return;
  control_.shutdown();  // the worker sees its control socket close and exits
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

Result<std::shared_ptr<const JobData>> rebuild_job(ByteReader& r, const io::Frame& frame,
                                                   std::shared_ptr<DataPlane> plane) {
  if (r.u32() != kControlVersion) return invalid_argument("a job frame of another version");
  const uint64_t fingerprint = r.u64();
  JobOptions jo;
  jo.plan.logical_shards = r.u32();
  jo.plan.chunk_items = r.u32();
  jo.plan.seed = r.u64();
  jo.plan.shuffle = r.flag();
  jo.plan.drop_last = r.flag();
  jo.plan.distributed_strategy = r.str();
  jo.plan.worker_strategy = r.str();
  SY_ASSIGN_OR_RETURN(jo.pipeline, spec_from_string(r.str()));
  jo.topology.ranks = r.u32();
  jo.topology.workers = r.u32();
  jo.batch_size = r.u32();
  jo.exact_order = r.flag();
  SY_ASSIGN_OR_RETURN(jo.dispatch, parse_dispatch(r.str()));
  jo.prefetch_shards = r.u32();
  jo.route_key_field = r.str();
  jo.max_sample_bytes = r.u64();
  const uint32_t packet_items = r.u32();
  const uint64_t packet_bytes = r.u64();
  const bool windows = r.flag();
  WindowSpec spec;
  std::vector<std::string> sources;
  unsigned scan_threads = 2;
  if (windows) {
    spec.record_bytes = r.u64();
    spec.length = r.u64();
    spec.stride = r.u64();
    spec.target = r.u64();
    spec.stitch = r.flag();
    scan_threads = r.u32();
    const uint32_t n = r.u32();
    if (n > r.left() / 4) return corrupt("a job frame claims " + std::to_string(n) + " sources");
    for (uint32_t i = 0; i < n; ++i) sources.push_back(r.str());
  }
  const uint64_t manifest_bytes = r.u64();
  if (r.failed()) return corrupt("a damaged job frame");
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
    SY_ASSIGN_OR_RETURN(
        manifest, decode_manifest(
                      std::string_view(reinterpret_cast<const char*>(map->data()), manifest_bytes),
                      "the job's manifest"));
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

Status serve_rank(io::UnixSocket& control) {
  io::Frame frame;
  SY_ASSIGN_OR_RETURN(auto got, control.receive(&frame, 60000));
  if (got != io::UnixSocket::Received::kFrame) return unavailable("no job from the rank");
  if (frame.type != kJobFrame || frame.fds.empty())
    return corrupt("the rank's first frame is not the job");
  ByteReader r(frame.body);
  auto job = rebuild_job(r, frame, io::inproc_data_plane());
  const uint32_t rank = r.u32(), worker = r.u32();
  if (job.is_ok() && !r.done()) job = corrupt("a damaged job frame");
  if (!job.is_ok()) {
    (void)control.send(io::Frame{kFailedFrame, job.status().to_string(), {}}, 10000);
    return job.status();
  }
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
    if (f.type != kUnitFrame || f.fds.size() != 1)
      return corrupt("the rank sent a frame of type " + std::to_string(f.type) +
                     " where a unit was due");
    Result<UnitStats> result = internal_error("not run");
    auto unit = decode_unit(f.body);
    if (!unit.is_ok()) {
      result = unit.status();
    } else {
      auto socket = io::UnixSocket::adopt(std::move(f.fds[0]));
      if (!socket.is_ok()) {
        result = socket.status();
      } else {
        auto producer = io::ShmProducer::connect(std::move(*socket), 30000);
        if (!producer.is_ok())
          result = producer.status();
        else
          result = core.run(*unit, **producer);
      }
    }
    SY_RETURN_IF_ERROR(control.send(io::Frame{kDoneFrame, encode_done(result), {}}, 30000));
  }
}

}  // namespace

// ---- WorkerLaunch ------------------------------------------------------------------------

Result<std::shared_ptr<WorkerLaunch>> WorkerLaunch::create(const JobData& job,
                                                           WorkerProcessOptions options) {
  auto launch = std::shared_ptr<WorkerLaunch>(new WorkerLaunch());
  const auto& plan = job.plan;
  ByteWriter w;
  w.u32(kControlVersion);
  w.u64(job.manifest->fingerprint);
  w.u32(plan.logical_shards);
  w.u32(plan.chunk_items);
  w.u64(plan.seed);
  w.u8(plan.shuffle ? 1 : 0);
  w.u8(plan.drop_last ? 1 : 0);
  w.str(plan.distributed_strategy);
  w.str(plan.worker_strategy);
  w.str(spec_to_string(job.pipeline));
  w.u32(job.topology.ranks);
  w.u32(job.topology.workers);
  w.u32(job.batch_size);
  w.u8(job.exact_order ? 1 : 0);
  w.str(dispatch_name(job.dispatch));
  w.u32(job.prefetch_shards);
  w.str(job.route_key_field);
  w.u64(job.reader.max_sample_bytes);
  w.u32(job.packet_items);
  w.u64(job.packet_bytes);
  const WindowSpec& spec = job.manifest->windows;
  w.u8(spec.enabled() ? 1 : 0);
  if (spec.enabled()) {
    w.u64(spec.record_bytes);
    w.u64(spec.length);
    w.u64(spec.stride);
    w.u64(spec.target);
    w.u8(spec.stitch ? 1 : 0);
    w.u32(options.scan_threads);
    w.u32(static_cast<uint32_t>(options.sources.size()));
    for (const auto& s : options.sources) w.str(s);
    w.u64(0);
  } else {
    // The manifest once, in a segment every worker process maps read-only to decode it.
    const std::string encoded = encode_manifest(*job.manifest);
    io::SegmentOptions seg;
    seg.dir = options.shm_dir;
    seg.what = "the job's manifest for its worker processes";
    SY_ASSIGN_OR_RETURN(auto segment, io::ShmSegment::create(encoded.size(), seg));
    {
      SY_ASSIGN_OR_RETURN(auto map, segment.map(io::ShmSegment::Access::kReadWrite));
      std::memcpy(map->writable_data(), encoded.data(), encoded.size());
    }
    launch->manifest_.emplace(std::move(segment));
    w.u64(encoded.size());
  }
  if (w.out.size() + 64 > kControlFrameBytes)
    return invalid_argument("the job's description for worker processes takes " +
                            std::to_string(w.out.size()) + " bytes, more than a control frame");
  launch->job_frame_ = std::move(w.out);
  // The arena holds what is in flight from one worker: its packets (4 of at most 4 MiB plus
  // one item) and the items the loader keeps of it until batches are built.
  const uint64_t mean =
      job.manifest->payload_bytes() / std::max<uint64_t>(1, job.index.num_items());
  const uint64_t wanted = 5 * (job.packet_bytes + mean) + 4 * job.batch_size * (mean + 256);
  launch->arena_bytes_ = options.arena_bytes
                             ? options.arena_bytes
                             : std::clamp<uint64_t>(wanted, 32ull << 20, 1ull << 30);
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
