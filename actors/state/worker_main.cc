// The worker process's side of placement local (docs/worker-processes.md): it rebuilds the
// job its rank sends, then runs the units the rank gives it, each on a shared-memory channel
// of its own. The rank's side is worker_process.cc.
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>

#include "actors/state/fork_server.h"
#include "actors/state/worker_frames.h"
#include "actors/state/worker_process.h"
#include "io/format/record_scan.h"
#include "io/remote/remote_file_system.h"
#include "io/transport/shm_channel.h"
#include "io/transport/shm_shard.h"
#include "io/transport/unix_socket.h"
#include "runtime/clock.h"
#include "runtime/codec.h"

namespace shardyard::actors {

namespace {

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
  jo.read_into_batch_bytes = j.read_into_batch_bytes;
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
    // below, and neither checksum nor fingerprint is computed again in every process. The
    // sample tables borrow the segment's pages, one copy for all of the rank's workers.
    SY_ASSIGN_OR_RETURN(
        manifest,
        decode_manifest(
            std::string_view(reinterpret_cast<const char*>(map->data()), manifest_bytes),
            "the job's manifest", ManifestCheck::kLayout, std::shared_ptr<const void>(map)));
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
              std::shared_ptr<io::ShmConsumer> input, io::MappedImages& images)
      : control_(control),
        mode_(mode),
        window_(window),
        input_(std::move(input)),
        images_(images) {}
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
        SY_ASSIGN_OR_RETURN(auto view, images_.open(std::move(f.fds[0]), "a loaded shard"));
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
  io::MappedImages& images_;
  std::deque<io::Delivery> queued_;
  uint64_t credit_ = 0;
};

// The arenas of this process's channels, kept from unit to unit: the rank sends the same
// output arena (and data arena) again (its ArenaPools), and the input arena of routed items
// is reused here. So are the mappings of the last 3 broadcast images: the rank writes later
// shards into the segments of earlier ones (it keeps 2 idle). A kept mapping also keeps its
// segment after the rank let go of it, so the count stays small: the rank's 2 and one more.
struct UnitArenas {
  UnitArenas() : images(3) {}
  io::AttachedArenas output{4};
  std::shared_ptr<io::ArenaPool> input = std::make_shared<io::ArenaPool>();
  io::MappedImages images;
};

// Runs one unit frame of the rank's: connects to the unit's channel (and its input, routed
// items), runs it, and says what came of it.
Result<UnitStats> run_unit_frame(io::UnixSocket& control, const JobData& job, WorkerCore& core,
                                 UnitArenas& arenas, io::Frame& f) {
  SY_ASSIGN_OR_RETURN(UnitOrder order, decode_unit(f.body));
  const WorkUnit& unit = order.unit;
  const uint64_t skip_below = order.skip_below;
  const uint32_t window = order.window;
  const bool routed = !unit.route.empty() && job.dispatch != Dispatch::kBroadcast;
  if (f.fds.size() != (routed ? 2u : 1u))
    return corrupt("a unit frame with " + std::to_string(f.fds.size()) + " descriptors");
  SY_ASSIGN_OR_RETURN(auto out_socket, io::UnixSocket::adopt(std::move(f.fds[0])));
  SY_ASSIGN_OR_RETURN(auto output, io::ShmProducer::connect(std::move(out_socket), 30000,
                                                            io::ShmChannelOptions{}.wait_timeout_ms,
                                                            &arenas.output));
  if (unit.route.empty()) return core.run(unit, *output);
  std::shared_ptr<io::ShmConsumer> input;
  if (routed) {
    SY_ASSIGN_OR_RETURN(auto in_socket, io::UnixSocket::adopt(std::move(f.fds[1])));
    io::ShmChannelOptions o;
    o.name = unit.channel + "/in";
    o.arena_bytes = 16ull << 20;
    o.arenas = arenas.input;
    std::vector<io::ShmPeer> peers;
    peers.push_back(io::ShmPeer{std::move(in_socket), "the rank's dispatcher"});
    auto opened = io::ShmConsumer::open(std::move(peers), o);
    if (!opened.is_ok()) {
      output->finish(opened.status());
      return opened.status();
    }
    input = std::move(*opened);
  }
  RemoteRoute route(control, job.dispatch, window, input, arenas.images);
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
  core.set_on_item([p, written = uint64_t{0}](const Item& item) mutable {
    // A sequence number odd while the key changes: the rank reads it only once this process
    // is dead, and then a torn key is still the item it was on. This process is the page's
    // only writer, so plain stores count it (a locked add, twice an item, cost more than
    // the key's copy).
    auto* seq = reinterpret_cast<uint64_t*>(p);
    __atomic_store_n(seq, ++written, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    const uint32_t len = static_cast<uint32_t>(std::min(item.key.size(), kPageKeyBytes));
    std::memcpy(p + kPageKeyOffset, item.key.data(), len);
    std::memcpy(p + 8, &len, sizeof len);
    __atomic_store_n(seq, ++written, __ATOMIC_RELEASE);
  });
  UnitArenas arenas;
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
    Result<UnitStats> result = run_unit_frame(control, **job, core, arenas, f);
    SY_RETURN_IF_ERROR(control.send(io::Frame{kDoneFrame, encode_done(result), {}}, 30000));
  }
}

// Serves the rank on `control` until it lets go; the process's exit code.
int serve_control(Result<io::UnixSocket> control) {
  // A write to a rank or socket that is gone is an error this process reports, not a
  // silent death by SIGPIPE (as in `shardyard run`, tools/run_stop.h).
  ::signal(SIGPIPE, SIG_IGN);
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

}  // namespace

int serve_worker_process(io::UniqueFd control) {
  return serve_control(io::UnixSocket::adopt(std::move(control), kControlFrameBytes));
}

Status start_worker_fork_server() { return ForkServer::start(&serve_worker_process); }

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
  return serve_control(std::move(control));
}

}  // namespace shardyard::actors
