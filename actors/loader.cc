#include "actors/loader.h"

#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

#include "actors/device_feed.h"
#include "actors/monitor.h"
#include "actors/net/host.h"
#include "actors/net/network.h"
#include "actors/protocol.h"
#include "actors/roles.h"
#include "actors/state/job.h"
#include "actors/state/merger.h"
#include "actors/state/placement.h"
#include "actors/state/status_board.h"
#include "io/format/manifest_scan.h"
#include "io/format/record_scan.h"
#include "io/format/sample_reader.h"
#include "io/fs/mapping_guard.h"
#include "runtime/metrics_text.h"
#include "runtime/mutex.h"

namespace shardyard {

using namespace actors;  // NOLINT: this file is the glue of the actors layer

// ---- options -----------------------------------------------------------------------------

Status LoaderOptions::topology_from_env() {
  const EnvLookup env = process_env();
  SY_ASSIGN_OR_RETURN(JobPlacement p, resolve_placement(env, default_rendezvous_dir(env)));
  if (p.launcher.empty()) return Status::ok();
  rank = p.rank;
  world_size = p.world_size;
  restart_count = p.restart_count;
  if (p.world_size == 1) return Status::ok();
  host_coordinator = p.host_coordinator;
  rendezvous_file = p.rendezvous_file;
  coordinator = p.rendezvous_file.empty() && !p.coordinator.host.empty() ? p.coordinator.to_string()
                                                                         : std::string();
  if (!p.token_file.empty()) token_file = p.token_file;
  if (!p.token.empty()) token = p.token;
  // No token given: the job's id stands in (loopback only, placement.h says why).
  if (token.empty() && token_file.empty()) token = p.derived_token;
  if (auto tls = env("SHARDYARD_TLS")) force_tls = *tls != "0";
  return Status::ok();
}

Status LoaderOptions::monitor_from_env() {
  if (const char* v = std::getenv("SHARDYARD_METRICS_PORT"); v && *v) {
    char* end = nullptr;
    long port = std::strtol(v, &end, 10);
    if (*end || port < 0 || port > 65535)
      return invalid_argument(std::string("SHARDYARD_METRICS_PORT='") + v +
                              "' is not a port (0..65535; 0 picks a free one)");
    metrics_port = static_cast<int32_t>(port);
  }
  if (const char* v = std::getenv("SHARDYARD_METRICS_ADDRESS"); v && *v) metrics_address = v;
  return Status::ok();
}

Status LoaderOptions::validate() const {
  if (sources.empty()) return invalid_argument("no sources: give at least one path or pattern");
  if (world_size == 0) return invalid_argument("world_size must be at least 1");
  if (rank >= world_size)
    return invalid_argument("rank " + std::to_string(rank) + " is outside a world of " +
                            std::to_string(world_size));
  if (workers == 0 || workers > 1024) return invalid_argument("workers must be 1..1024");
  if (batch_size == 0) return invalid_argument("batch_size must be at least 1");
  if (prefetch_packets == 0) return invalid_argument("prefetch_packets must be at least 1");
  if ((!device.empty() || custom_device) && (device_prefetch == 0 || device_prefetch > 64))
    return invalid_argument("device_prefetch must be 1..64");
  if (max_sample_bytes == 0) return invalid_argument("max_sample_bytes must be at least 1");
  if (windows.enabled()) SY_RETURN_IF_ERROR(validate_window_spec(windows));
  if (metrics_port < -1 || metrics_port > 65535)
    return invalid_argument("metrics_port must be -1 (off), 0 (a free port) or a port");
  return Status::ok();
}

// ---- cluster -----------------------------------------------------------------------------

struct RankRoles {
  loader_actor loader;
  dispatcher_actor dispatcher;
  checkpoint_actor checkpoint;
  std::vector<worker_actor> workers;
  bool loader_open = false;
  std::vector<std::weak_ptr<io::Channel>> channels;  // of the open epoch
  std::weak_ptr<io::Route> route;                    // of the open epoch
};

// The actor system and the configuration it refers to. Shared by the calls that use it, so
// that shutdown() on one thread never destroys it under another thread's request: the last
// one to let go of it waits for the actors to finish.
struct ActorSystem {
  explicit ActorSystem(std::unique_ptr<caf::actor_system_config> c)
      : cfg(std::move(c)), sys(*cfg) {}
  std::unique_ptr<caf::actor_system_config> cfg;
  caf::actor_system sys;
};

struct Cluster::Impl {
  // Set by start(), then read-only.
  LoaderOptions options;
  ScanReport report;
  std::shared_ptr<const JobData> job;
  std::unique_ptr<DeviceFeed> device;     // null: batches stay in host memory
  std::unique_ptr<net::TlsIdentity> tls;  // ranks in other processes, off loopback
  bool networked = false;                 // the world has ranks in other processes
  // The monitor of this process's ranks (made by start(), never reset: its endpoints stop
  // with shutdown(), and it answers nothing after that).
  std::unique_ptr<JobMonitor> monitor;

  Mutex mu;
  std::shared_ptr<ActorSystem> system SY_GUARDED_BY(mu);  // null once shut down
  coordinator_actor coordinator SY_GUARDED_BY(mu);        // hosted here (in process, or rank 0)
  net::gate_actor gate SY_GUARDED_BY(mu);                 // hosted here for other processes' ranks
  // What this process's ranks talk to: the coordinator, or its gate in another process.
  coordinator_actor job_coordinator SY_GUARDED_BY(mu);
  std::map<uint32_t, RankRoles> ranks SY_GUARDED_BY(mu);
  bool stopped SY_GUARDED_BY(mu) = false;
  Status failure SY_GUARDED_BY(mu);  // why the job stopped under this process
  // The first error each hosted rank's Loader met (its leave reports it).
  std::map<uint32_t, Status> rank_errors SY_GUARDED_BY(mu);

  // The job stopped (the coordinator said so, or went away): every open epoch is
  // cancelled, so that a trainer waiting in next() hears of it at once.
  void stop_job(Status why) SY_EXCLUDES(mu) {
    {
      MutexLock lock(&mu);
      if (!failure.is_ok()) return;
      failure = std::move(why);
    }
    cancel_epochs();
  }
  Status job_failure() SY_EXCLUDES(mu) {
    MutexLock lock(&mu);
    return failure;
  }
  void cancel_epochs() SY_EXCLUDES(mu) {
    MutexLock lock(&mu);
    for (auto& [r, roles] : ranks) {
      for (auto& weak : roles.channels)
        if (auto ch = weak.lock()) ch->cancel();
      if (auto route = roles.route.lock()) route->cancel();
    }
  }

  // The actor system, or kCancelled after shutdown().
  Result<std::shared_ptr<ActorSystem>> running() SY_EXCLUDES(mu) {
    MutexLock lock(&mu);
    if (stopped || !system) return cancelled("the cluster was shut down");
    return system;
  }
  // A copy of a hosted rank's handles.
  RankRoles roles_of(uint32_t rank) SY_EXCLUDES(mu) {
    MutexLock lock(&mu);
    return ranks.at(rank);
  }
};

Cluster::Cluster() : impl_(std::make_unique<Impl>()) {}

Cluster::~Cluster() { (void)shutdown(); }

const Manifest& Cluster::manifest() const { return *impl_->job->manifest; }
const ScanReport& Cluster::scan_report() const { return impl_->report; }
const LoaderOptions& Cluster::options() const { return impl_->options; }
uint32_t Cluster::logical_shards() const { return impl_->job->shards.count(); }

Result<std::shared_ptr<Cluster>> Cluster::start(const LoaderOptions& options,
                                                std::vector<uint32_t> ranks) {
  SY_RETURN_IF_ERROR(options.validate());
  for (auto r : ranks)
    if (r >= options.world_size)
      return invalid_argument("rank " + std::to_string(r) + " is outside a world of " +
                              std::to_string(options.world_size));
  auto cluster = std::shared_ptr<Cluster>(new Cluster());
  auto& d = *cluster->impl_;
  d.options = options;
  SY_ASSIGN_OR_RETURN(d.device, DeviceFeed::open(options));  // before a long manifest scan

  io::ScanOptions scan;
  scan.on_corrupt = options.on_corrupt;
  scan.strict_members = options.strict_members;
  scan.threads = options.scan_threads;
  scan.cache_dir = options.cache_dir.empty() ? io::default_cache_dir() : options.cache_dir;
  scan.cache_mode = options.use_manifest_cache ? io::CacheMode::kUse : io::CacheMode::kBypass;
  Env* env = options.env ? options.env : Env::Default();
  auto& fs = *env->file_system();
  Manifest manifest;
  if (options.windows.enabled()) {
    // Stat calls only, never cached: cheaper than reading a cache (io/format/record_scan.h).
    SY_ASSIGN_OR_RETURN(manifest, io::build_record_manifest(fs, options.sources, options.windows,
                                                            options.scan_threads));
  } else {
    SY_ASSIGN_OR_RETURN(manifest, io::build_manifest(fs, options.sources, scan, &d.report));
  }
  JobOptions jo;
  jo.manifest = std::make_shared<const Manifest>(std::move(manifest));
  jo.plan = options.plan;
  jo.pipeline = options.pipeline;
  jo.topology = Topology{options.world_size, options.workers};
  jo.batch_size = options.batch_size;
  jo.exact_order = options.order == Order::kExact;
  jo.dispatch = options.dispatch;
  jo.prefetch_shards = options.prefetch_shards;
  jo.route_key_field = options.route_key_field;
  jo.status = std::make_shared<StatusBoard>();
  jo.checkpoint_timeout_ms = options.checkpoint_timeout_ms;
  jo.max_sample_bytes = options.max_sample_bytes;
  jo.fs = &fs;
  jo.clock = env->clock();
  jo.data_plane = env->new_data_plane();
  SY_ASSIGN_OR_RETURN(d.job, make_job(std::move(jo)));
  const auto& job = d.job;
  SY_RETURN_IF_ERROR(io::check_sample_bytes(*job->manifest, options.max_sample_bytes));
  if (d.device)
    d.device->size_pools(
        (job->manifest->payload_bytes() / job->index.num_items() + 1024) * options.batch_size,
        ranks.size(), options);

  // Ranks in other processes: this process hosts the job's coordinator or reaches it.
  d.networked = ranks.size() < options.world_size;
  std::string token;
  HostPort where;
  std::string where_source;
  net::NetOptions net;
  if (d.networked) {
    if (options.coordinator.empty() && options.rendezvous_file.empty())
      return invalid_argument(
          "rank " + std::to_string(options.rank) + " of a world of " +
          std::to_string(options.world_size) +
          " has no coordinator to join: run it under a launcher (tools/shardyard-launch, "
          "torchrun, mpirun), or set SHARDYARD_COORDINATOR=HOST:PORT (docs/multi-process.md)");
    SY_ASSIGN_OR_RETURN(token, net::job_token(options.token, options.token_file));
    if (!options.coordinator.empty()) {
      SY_ASSIGN_OR_RETURN(where, parse_host_port(options.coordinator, options.host_coordinator));
      where_source = options.coordinator;
    } else {
      where = HostPort{"127.0.0.1", 0};
      where_source = "the rendezvous file " + options.rendezvous_file;
    }
    net.heartbeat_interval_ms = options.heartbeat_interval_ms;
    net.connection_timeout_ms = options.connection_timeout_ms;
    net.tls = net::use_tls(where.host, options.force_tls);
    if (net.tls) {
      SY_ASSIGN_OR_RETURN(d.tls, net::TlsIdentity::create(token));
      net.tls_dir = d.tls->dir();
    }
  }

  // The Env's configuration (actors/system_config.h by default); the messages are registered
  // whatever it is (registering twice changes nothing), and a job of several processes
  // turns on the network (heartbeats, and TLS off loopback).
  auto cfg = env->new_actor_system_config();
  if (!cfg) return invalid_argument("the Env made no actor system configuration");
  register_protocol(*cfg);
  if (d.networked) net::enable_network(*cfg, net);
  auto system = std::make_shared<ActorSystem>(std::move(cfg));
  caf::actor_system& sys = system->sys;

  CoordinatorOptions copts;
  copts.join_timeout_ms = options.join_timeout_ms;
  copts.fs = job->fs;
  copts.clock = job->clock;
  coordinator_actor coordinator, job_coordinator;
  net::gate_actor gate;
  if (!d.networked) {
    coordinator = spawn_coordinator(sys, CoordinatorState(job->info()), copts);
    job_coordinator = coordinator;
  } else if (options.host_coordinator) {
    copts.log = [](const std::string& line) {
      std::fprintf(stderr, "shardyard coordinator: %s\n", line.c_str());
    };
    net::HostOptions host;
    host.listen = where;
    host.source = where_source;
    host.tls = net.tls;
    host.token = token;
    host.rendezvous_file = options.rendezvous_file;
    host.coordinator = copts;
    SY_ASSIGN_OR_RETURN(auto hosted,
                        net::host_coordinator(sys, CoordinatorState(job->info()), host));
    coordinator = hosted.coordinator;
    gate = hosted.gate;
    job_coordinator = coordinator;
  } else {
    net::ConnectOptions c;
    c.where = where;
    c.rendezvous_file = options.rendezvous_file;
    c.source = where_source;
    c.tls = net.tls;
    c.token = token;
    c.rank = ranks.empty() ? 0 : ranks.front();
    c.timeout_ms = options.join_timeout_ms;
    SY_ASSIGN_OR_RETURN(job_coordinator, net::connect_coordinator(sys, c));
  }

  // Every hosted rank joins through its loader actor (so the coordinator monitors it), all
  // at once: a join is answered when the whole world has joined.
  Impl* impl = &d;
  LoaderActorOptions lopts;
  lopts.on_abort = [impl](Status why) { impl->stop_job(std::move(why)); };
  lopts.join_timeout_ms = options.join_timeout_ms + 10000;
  lopts.status = job->status;
  {
    MutexLock lock(&d.mu);
    d.system = system;
    d.coordinator = coordinator;
    d.gate = gate;
    d.job_coordinator = job_coordinator;
    for (auto r : ranks) d.ranks[r].loader = spawn_loader_actor(sys, r, job_coordinator, lopts);
  }
  std::vector<Status> joined(ranks.size());
  {
    // (Scoped: shutdown() below waits for every actor, this one too.)
    caf::scoped_actor self{sys};
    const std::chrono::milliseconds timeout(lopts.join_timeout_ms + 5000);
    using JoinHandle =
        decltype(self->request(std::declval<loader_actor>(), timeout, JoinRequest{}));
    std::vector<JoinHandle> joins;
    for (auto r : ranks) {
      JoinRequest req;
      req.rank = r;
      req.workers = options.workers;
      req.fingerprint = job->manifest->fingerprint;
      req.job = job->info();
      req.restart_count = options.restart_count;
      joins.push_back(self->request(d.roles_of(r).loader, timeout, req));
    }
    for (size_t i = 0; i < joins.size(); ++i)
      joins[i].receive([&](const JobInfo& msg) { received(msg); },
                       [&](const caf::error& err) {
                         joined[i] = request_failed(
                             err, "the loader actor of rank " + std::to_string(ranks[i]),
                             "JoinRequest", timeout);
                       });
  }
  for (const auto& st : joined)
    if (!st.is_ok()) {
      (void)cluster->shutdown();
      return st;
    }
  for (auto r : ranks) {
    // Every actor of the rank is on the monitor's board from the start.
    job->status->rank(r);
    job->status->role("dispatcher", r);
    for (uint32_t w = 0; w < options.workers; ++w) job->status->role("worker", r, w);
    job->status->role("loader", r);
    job->status->role("checkpoint", r);
    RankRoles roles = d.roles_of(r);
    for (uint32_t w = 0; w < options.workers; ++w)
      roles.workers.push_back(spawn_worker(sys, job, r, w));
    roles.dispatcher = spawn_dispatcher(sys, job, r, job_coordinator, roles.workers, roles.loader);
    roles.checkpoint = spawn_checkpoint_actor(sys, job, r, job_coordinator, roles.dispatcher);
    MutexLock lock(&d.mu);
    d.ranks[r] = std::move(roles);
  }
  // A job of several processes: the monitor of any of them shows the whole job.
  d.monitor = std::make_unique<JobMonitor>(sys, job_coordinator, job, d.networked);
  if (options.metrics_port >= 0)
    SY_RETURN_IF_ERROR(
        d.monitor->serve(options.metrics_address, static_cast<uint16_t>(options.metrics_port)));
  return cluster;
}

Result<std::unique_ptr<Loader>> Cluster::loader(uint32_t rank) {
  MutexLock lock(&impl_->mu);
  auto it = impl_->ranks.find(rank);
  if (impl_->stopped) return cancelled("the cluster was shut down");
  if (it == impl_->ranks.end())
    return invalid_argument("rank " + std::to_string(rank) + " is not hosted by this cluster");
  if (it->second.loader_open)
    return invalid_argument("rank " + std::to_string(rank) + " already has an open loader");
  it->second.loader_open = true;
  return std::unique_ptr<Loader>(new Loader(shared_from_this(), rank));
}

std::vector<RoleSnapshot> Cluster::snapshot() {
  std::vector<RoleSnapshot> out;
  auto& d = *impl_;
  auto system = d.running();  // held: the actors stay while the status is read
  if (!system.is_ok() || !d.monitor) return out;
  for (const auto& s : d.monitor->status().actors)
    out.push_back(RoleSnapshot{s.role, s.rank, s.worker, s.state, s.epoch, s.items, s.bytes,
                               s.steps, s.detail, s.node, s.pid, s.items_per_s, s.queue_depth,
                               s.queue_capacity, s.input_wait_s, s.output_wait_s, s.uptime_s});
  return out;
}

uint16_t Cluster::monitor_port() const { return impl_->monitor ? impl_->monitor->port() : 0; }

std::string Cluster::status_json() {
  auto& d = *impl_;
  auto system = d.running();  // held: the actors stay while the status is read
  if (!system.is_ok() || !d.monitor) return "{}";
  return actors::status_json(d.monitor->status());
}

std::string Cluster::metrics_text() {
  auto& d = *impl_;
  auto system = d.running();
  if (!system.is_ok() || !d.monitor) return "";
  return render_prometheus(d.monitor->metrics());
}

void Cluster::interrupt() { impl_->cancel_epochs(); }

Status Cluster::shutdown() {
  auto& d = *impl_;
  // The endpoints go first: they ask the actors, which are about to stop.
  if (d.monitor) d.monitor->stop();
  std::shared_ptr<ActorSystem> system;
  coordinator_actor coordinator, job_coordinator;
  net::gate_actor gate;
  std::map<uint32_t, RankRoles> ranks;
  Status failure;
  std::map<uint32_t, Status> rank_errors;
  {
    // From here on every trainer call fails with kCancelled; the handles move out of the
    // cluster, so that the actors can go once they acknowledged.
    MutexLock lock(&d.mu);
    if (d.stopped || !d.system) return Status::ok();
    d.stopped = true;
    system = std::move(d.system);
    coordinator = std::move(d.coordinator);
    job_coordinator = std::move(d.job_coordinator);
    gate = std::move(d.gate);
    failure = d.failure;
    rank_errors = d.rank_errors;
    // Workers may be blocked on full channels of an epoch nobody reads any more: cancel every
    // open channel first, so each worker finishes its unit and can acknowledge.
    for (auto& [r, roles] : d.ranks) {
      for (auto& weak : roles.channels)
        if (auto ch = weak.lock()) ch->cancel();
      if (auto route = roles.route.lock()) route->cancel();
      RankRoles& moved = ranks[r];
      moved.loader = std::move(roles.loader);
      moved.dispatcher = std::move(roles.dispatcher);
      moved.checkpoint = std::move(roles.checkpoint);
      moved.workers = std::move(roles.workers);
      roles.channels.clear();
    }
  }
  Status result;
  {
    caf::scoped_actor self{system->sys};
    if (job_coordinator && failure.is_ok()) {
      // Each hosted rank leaves the job: done, or with the error its trainer met, which stops
      // the other ranks. A rank that goes without leaving is lost, and stops them too (so in
      // one process too the ranks leave before their actors stop: the coordinator monitors
      // them and would take the first loader actor to stop for a lost rank).
      for (const auto& entry : ranks) {
        const uint32_t r = entry.first;
        auto it = rank_errors.find(r);
        const Status error = it == rank_errors.end() ? Status::ok() : it->second;
        self->request(job_coordinator, kReplyTimeout,
                      RankLeave{r, error.is_ok(), error.is_ok() ? "" : error.to_string()})
            .receive([](const LeaveAck& msg) { received(msg); },
                     [r](const caf::error& err) {
                       // The coordinator then hears of this rank as lost.
                       std::fprintf(stderr,
                                    "shardyard: warning: rank %u could not tell the coordinator "
                                    "that it left: %s\n",
                                    r, caf::to_string(err).c_str());
                     });
      }
      // The process hosting the coordinator keeps it until the other ranks have left too:
      // they lose it with this process.
      if (gate) {
        const std::chrono::milliseconds leave(d.options.leave_timeout_ms);
        self->request(coordinator, leave, AwaitLeaves{})
            .receive([](const LeaveAck& msg) { received(msg); },
                     [&](const caf::error& err) {
                       if (err == caf::sec::request_timeout)
                         std::fprintf(stderr,
                                      "shardyard: warning: not every rank left within %u s; "
                                      "stopping the coordinator\n",
                                      d.options.leave_timeout_ms / 1000);
                     });
      }
    }
    auto stop = [&](auto& handle, const std::string& what) {
      if (!handle) return;
      self->request(handle, kShutdownTimeout, ShutdownRequest{"cluster shutdown"})
          .receive([&](const ShutdownAck& msg) { received(msg); },
                   [&](const caf::error& err) {
                     if (result.is_ok())
                       result = request_failed(err, what, "ShutdownRequest", kShutdownTimeout);
                   });
      handle = nullptr;
    };
    for (auto& [r, roles] : ranks) {
      stop(roles.checkpoint, "checkpoint actor of rank " + std::to_string(r));
      stop(roles.dispatcher, "dispatcher of rank " + std::to_string(r));
      for (auto& w : roles.workers) stop(w, "worker of rank " + std::to_string(r));
      stop(roles.loader, "loader of rank " + std::to_string(r));
    }
    if (gate) stop(gate, "the coordinator's gate");
    stop(coordinator, "coordinator");
  }
  if (gate) net::remove_rendezvous(d.options.rendezvous_file);
  system.reset();  // waits for every actor to finish, unless a trainer call still holds it
  d.tls.reset();
  return result;
}

// ---- loader ------------------------------------------------------------------------------

// One epoch in progress: the merger, and the threads that collate batches ahead. Taking a
// step's items from the workers is sequential (under take_mu); copying them into the batch
// columns runs on up to two collator threads at once; batches are handed out in step order.
// With a device, the collators build columns in pinned memory and a DevicePrefetcher takes
// the batches in order, queues their copies, and hands them to next().
struct Loader::Epoch {
  uint32_t epoch = 0;
  uint32_t rank = 0;
  uint64_t steps = 0;
  std::unique_ptr<RankMerger> merger;
  std::vector<std::thread> collators;
  Mutex take_mu;  // serialises merger->take_step()
  Mutex mu;
  CondVar room;     // collators wait here for room to build another batch
  CondVar arrived;  // the trainer waits here for the next step's batch
  struct Ready {
    Result<std::optional<Batch>> batch;
    StepProgress progress;  // applied to `cursor` when the trainer takes the batch
  };
  std::map<uint64_t, Ready> ready SY_GUARDED_BY(mu);  // by step
  size_t building SY_GUARDED_BY(mu) = 0;
  bool taken_all SY_GUARDED_BY(mu) = false;
  bool stop SY_GUARDED_BY(mu) = false;
  size_t depth = 2;        // set before the collators start; then read-only
  uint64_t next_step = 0;  // the number of the next batch next() returns
  // The number of the next batch take() returns: the trainer's, or the prefetcher's copy
  // thread's (only one of them takes).
  uint64_t taken_step SY_GUARDED_BY(mu) = 0;
  BufferPool* columns = nullptr;  // pinned pool of the device; null: the job's pool
  std::unique_ptr<gpu::DevicePrefetcher> prefetcher;
  // Progress of batches taken by the prefetcher, until next() hands them out.
  std::map<uint64_t, StepProgress> prefetched SY_GUARDED_BY(mu);
  uint64_t delivered_items = 0;
  RankCursor cursor;  // what the trainer consumed: the checkpoint state of this rank
  bool finished = false;
  Status error;
  int64_t last_report_ns = INT64_MIN / 2;  // Clock::steady_ns() of the last StepReport
  loader_actor cursor_actor;               // this rank's loader actor: keeps the cursor
  RankBoard* board = nullptr;              // what the monitor sees of the rank (the cluster's)
  RoleStats* stats = nullptr;              // ... and of its loader

  void collate() {
    std::vector<Item> items;
    for (;;) {
      {
        MutexLock lock(&mu);
        while (!stop && !taken_all && ready.size() + building >= depth) room.wait(&mu);
        if (stop || taken_all) return;
        ++building;
      }
      uint64_t step = 0;
      Result<bool> got = false;
      StepProgress progress;
      {
        MutexLock take(&take_mu);
        got = merger->take_step(&items, &step, &progress);
      }
      Result<std::optional<Batch>> out = std::optional<Batch>();
      if (!got.is_ok()) {
        out = got.status();
      } else if (*got) {
        out = std::optional<Batch>(build(items, step));
        items.clear();
      }
      bool last = !got.is_ok() || !*got;
      {
        MutexLock lock(&mu);
        --building;
        if (last) taken_all = true;
        ready.emplace(step, Ready{std::move(out), std::move(progress)});
        board->set_ready_batches(ready.size());
      }
      // Wake only who can act: the trainer, and, at the end, the other collator so it exits.
      arrived.notify_one();
      if (last) room.notify_all();
    }
  }

  Batch build(std::vector<Item>& items, uint64_t step) const {
    return columns ? build_batch(items, epoch, step, rank, *columns) : merger->build(items, step);
  }

  // The next batch in step order (from the collators, or collated here when depth is 0),
  // and what it consumed. Called by the trainer, or by the prefetcher's copy thread.
  Result<std::optional<Batch>> take(StepProgress* progress) SY_EXCLUDES(mu) {
    if (depth == 0) {
      std::vector<Item> items;
      uint64_t step = 0;
      SY_ASSIGN_OR_RETURN(bool got, merger->take_step(&items, &step, progress));
      if (!got) return std::optional<Batch>();
      {
        MutexLock lock(&mu);
        ++taken_step;
      }
      return std::optional<Batch>(build(items, step));
    }
    Result<std::optional<Batch>> b = std::optional<Batch>();
    {
      MutexLock lock(&mu);
      // A collator always hands in the next step (a batch, the end, or an error) unless the
      // epoch is stopped.
      while (!stop && ready.count(taken_step) == 0) arrived.wait(&mu);
      if (stop) return cancelled("the epoch was stopped");
      auto it = ready.find(taken_step);
      b = std::move(it->second.batch);
      *progress = std::move(it->second.progress);
      ready.erase(it);
      board->set_ready_batches(ready.size());
      if (b.is_ok() && b->has_value()) ++taken_step;
    }
    room.notify_one();
    return b;
  }

  // The prefetcher's source: take() on its copy thread, keeping the progress for next().
  Result<std::optional<Batch>> take_for_device() SY_EXCLUDES(mu) {
    StepProgress progress;
    auto b = take(&progress);
    if (b.is_ok() && b->has_value()) {
      MutexLock lock(&mu);
      prefetched[(*b)->step()] = std::move(progress);
    }
    return b;
  }
};

// What restore() granted: the epoch that resumes, and the stage states its workers start
// from (this rank's own, when the topology is unchanged), which are the cursor's until a
// worker's next item is consumed.
struct Loader::Restored {
  ResumePoint point;
  bool started = false;
  std::vector<std::shared_ptr<const std::string>> states;  // by worker
  // This rank's own dispatcher and loader states (when the number of ranks is the same),
  // which the cursor keeps until the next consumed item; the loader states its post stages
  // restore from.
  std::shared_ptr<const std::string> dispatcher_state, loader_state;
  std::vector<std::string> loader_states;
  bool ranks_changed = false;
};

Loader::Loader(std::shared_ptr<Cluster> cluster, uint32_t rank)
    : cluster_(std::move(cluster)), rank_(rank) {}

Loader::~Loader() {
  stop_epoch();
  MutexLock lock(&cluster_->impl_->mu);
  auto it = cluster_->impl_->ranks.find(rank_);
  if (it != cluster_->impl_->ranks.end()) it->second.loader_open = false;
}

const Manifest& Loader::manifest() const { return cluster_->manifest(); }

uint64_t Loader::steps_per_epoch() const { return epoch_ ? epoch_->steps : 0; }

Result<std::unique_ptr<Loader>> Loader::open(const LoaderOptions& options) {
  SY_ASSIGN_OR_RETURN(auto cluster, Cluster::start(options, {options.rank}));
  return cluster->loader(options.rank);
}

void Loader::stop_epoch() {
  if (!epoch_) return;
  epoch_->board->close_epoch();
  epoch_->stats->end_wait(false, RoleState::kIdle);
  epoch_->merger->cancel();  // unblocks workers and the collator
  {
    MutexLock lock(&epoch_->mu);
    epoch_->stop = true;
  }
  epoch_->room.notify_all();
  epoch_->arrived.notify_all();
  epoch_->prefetcher.reset();  // its take() returned once `stop` was set
  for (auto& t : epoch_->collators) t.join();
  epoch_.reset();
}

Status Loader::start_epoch(uint32_t epoch) {
  stop_epoch();
  auto& d = *cluster_->impl_;
  SY_ASSIGN_OR_RETURN(auto system, d.running());
  if (Status why = d.job_failure(); !why.is_ok()) return failed(why);
  const RankRoles roles = d.roles_of(rank_);
  const auto& job = *d.job;
  const uint32_t w_count = job.topology.workers;
  const bool exact = d.options.order == Order::kExact;

  // Channels (and the route) first, so workers find them when their units arrive.
  std::vector<std::shared_ptr<io::Channel>> channels;
  std::shared_ptr<io::Route> route;
  EpochStart start{rank_, epoch, {}, {}};
  std::string base = "r" + std::to_string(rank_) + "/e" + std::to_string(epoch) + "/";
  if (job.dispatch != Dispatch::kNone) {
    // Routed items come back on one channel and are put in order by position; the window
    // covers every worker's queued packets plus the packets being filled.
    const auto window = static_cast<uint32_t>(std::max<uint64_t>(
        1024, uint64_t{job.packet_items} * w_count * (d.options.prefetch_packets + 2)));
    start.route = base + "route";
    route = job.data_plane->open_route(start.route, job.dispatch, w_count, window);
    start.channels.push_back(base + "all");
    channels.push_back(job.data_plane->open_channel(
        start.channels.back(), w_count, static_cast<size_t>(d.options.prefetch_packets) * w_count));
  } else if (exact) {
    for (uint32_t w = 0; w < w_count; ++w) {
      start.channels.push_back(base + "w" + std::to_string(w));
      channels.push_back(
          job.data_plane->open_channel(start.channels.back(), 1, d.options.prefetch_packets));
    }
  } else {
    start.channels.push_back(base + "all");
    channels.push_back(job.data_plane->open_channel(
        start.channels.back(), w_count, static_cast<size_t>(d.options.prefetch_packets) * w_count));
  }

  Result<EpochTicket> ticket = internal_error("no answer from the dispatcher");
  {
    caf::scoped_actor self{system->sys};
    self->request(roles.dispatcher, kEpochStartTimeout, start)
        .receive(
            [&](EpochTicket& t) {
              received(t);
              ticket = std::move(t);
            },
            [&](const caf::error& err) {
              ticket = request_failed(err, "the dispatcher of rank " + std::to_string(rank_),
                                      "EpochStart", kEpochStartTimeout);
            });
  }
  if (!ticket.is_ok()) {
    for (auto& c : channels) c->cancel();
    if (route) route->cancel();
    return failed(ticket.status());
  }
  {
    MutexLock lock(&d.mu);
    auto& registered = d.ranks.at(rank_);
    registered.channels.assign(channels.begin(), channels.end());
    registered.route = route;
    if (d.stopped) {  // shut down while the epoch was starting
      for (auto& c : channels) c->cancel();
      if (route) route->cancel();
    }
  }

  epoch_ = std::make_unique<Epoch>();
  auto& e = *epoch_;
  e.epoch = epoch;
  e.rank = rank_;
  e.cursor_actor = roles.loader;
  e.board = &d.job->status->rank(rank_);
  e.stats = d.job->status->role("loader", rank_).get();  // the board keeps it
  e.stats->set_epoch(epoch);
  e.stats->set_state(RoleState::kRunning);
  e.steps = ticket->steps;
  e.depth = d.options.prefetch_batches;
  std::vector<std::shared_ptr<const std::string>> states;
  std::vector<std::string> loader_states;
  std::shared_ptr<const std::string> dispatcher_state, loader_state;
  bool ranks_changed = false;
  if (restored_ && !restored_->started && restored_->point.epoch == epoch) {
    restored_->started = true;
    states = restored_->states;
    dispatcher_state = restored_->dispatcher_state;
    loader_state = restored_->loader_state;
    loader_states = restored_->loader_states;
    ranks_changed = restored_->ranks_changed;
  }
  auto post = StageRunner::open(job, job.cut.merge_at, job.cut.size,
                                loader_identity(job, rank_, epoch), loader_states, ranks_changed);
  if (!post.is_ok()) {
    for (auto& c : channels) c->cancel();
    if (route) route->cancel();
    return post.status();
  }
  e.cursor = RankCursor(*ticket, w_count, std::move(states), std::move(dispatcher_state),
                        std::move(loader_state));
  e.next_step = ticket->first_step;
  {
    MutexLock lock(&e.mu);
    e.taken_step = ticket->first_step;
  }
  {
    std::vector<QueueRef> queues;
    for (size_t k = 0; k < channels.size(); ++k)
      queues.push_back(
          QueueRef{start.channels[k],
                   channels[k],
                   {},
                   channels.size() == w_count && exact && !route
                       ? uint64_t{d.options.prefetch_packets}
                       : uint64_t{d.options.prefetch_packets} * w_count,
                   channels.size() == w_count && exact && !route ? static_cast<int32_t>(k) : -1});
    if (route) queues.push_back(QueueRef{start.route, {}, route, 0, -1});
    e.board->open_epoch(*ticket, std::move(queues), e.depth);
  }
  e.merger = std::make_unique<RankMerger>(d.job, rank_, std::move(ticket).value(), channels, exact,
                                          route, std::move(post).value());
  if (d.device) e.columns = d.device->columns.get();  // before any collator runs
  const size_t threads = std::min<size_t>(e.depth, 2);
  for (size_t t = 0; t < threads; ++t) e.collators.emplace_back([&e] { e.collate(); });
  if (d.device) {
    auto prefetcher = gpu::DevicePrefetcher::start(
        d.device->blocks, [&e] { return e.take_for_device(); }, d.device->prefetch);
    if (!prefetcher.is_ok()) {
      stop_epoch();
      return prefetcher.status();
    }
    e.prefetcher = std::move(prefetcher).value();
  }
  return Status::ok();
}

Status Loader::failed(Status st) {
  auto& d = *cluster_->impl_;
  // A job that stopped under this rank (a rank lost, the coordinator gone) is why its epoch
  // was cancelled: say that, not "cancelled".
  if (Status why = d.job_failure(); !why.is_ok()) st = why;
  MutexLock lock(&d.mu);
  d.rank_errors.emplace(rank_, st);
  return st;
}

Result<std::optional<Batch>> Loader::next() {
  if (!epoch_) return invalid_argument("next() before start_epoch()");
  auto& e = *epoch_;
  if (!e.error.is_ok()) return e.error;  // a failed epoch stays failed
  if (e.finished) return std::optional<Batch>();
  // Since the last batch was handed out, the trainer was busy (its step); from here on it
  // waits for the next batch.
  const auto step_time = e.stats->end_wait(false, RoleState::kRunning);
  if (step_time.count() > 0)
    e.board->step_time.observe(std::chrono::duration<double>(step_time).count());
  e.stats->begin_wait(true);
  Result<std::optional<Batch>> b = std::optional<Batch>();
  StepProgress progress;
  if (e.prefetcher) {
    b = e.prefetcher->next();
    if (b.is_ok() && b->has_value()) {
      MutexLock lock(&e.mu);
      auto it = e.prefetched.find((*b)->step());
      if (it != e.prefetched.end()) {
        progress = std::move(it->second);
        e.prefetched.erase(it);
      } else {
        b = internal_error("the device prefetcher returned step " + std::to_string((*b)->step()) +
                           ", which the loader never gave it");
      }
    }
  } else {
    b = e.take(&progress);
  }
  // A shard cut short under a memory mapping reads as zeros from then on
  // (io/fs/mapping_guard.h): no batch goes out after that, and the error names the shard
  // rather than what the zeros broke downstream.
  if (Status fault = io::mapping_fault(); !fault.is_ok()) b = fault;
  const bool more = b.is_ok() && b->has_value();
  const auto waited = e.stats->end_wait(true, more        ? RoleState::kRunning
                                              : b.is_ok() ? RoleState::kIdle
                                                          : RoleState::kFailed);
  e.board->next_wait.observe(std::chrono::duration<double>(waited).count());
  if (!b.is_ok()) {
    e.error = failed(b.status());
    e.stats->set_detail(e.error.to_string());
    return e.error;
  }
  if (!b->has_value()) {
    e.finished = true;
    e.board->set_cursor(e.next_step, e.delivered_items, e.cursor.consumed());
    return b;
  }
  ++e.next_step;
  e.delivered_items += (*b)->size();
  e.cursor.apply(progress);
  e.stats->add((*b)->size(), (*b)->payload_bytes());
  e.stats->add_steps(1);
  e.board->batches.add();
  e.stats->begin_wait(false);  // the trainer has the batch
  // The loader actor keeps the cursor for the monitor. A message per batch would wake an
  // actor thousands of times a second, so report at most every 20 ms (and at the end); the
  // exact cursor stays with this object.
  const int64_t now = cluster_->impl_->job->clock->steady_ns();
  if (now - e.last_report_ns >= 20'000'000 || e.next_step == e.steps) {
    e.last_report_ns = now;
    caf::anon_send(e.cursor_actor, StepReport{rank_, e.epoch, e.next_step, e.delivered_items});
    e.board->set_cursor(e.next_step, e.delivered_items, e.cursor.consumed());
  }
  if (e.next_step == e.steps)
    caf::anon_send(e.cursor_actor, RankEpochDone{rank_, e.epoch, e.next_step, e.delivered_items});
  return b;
}

// ---- checkpoints -------------------------------------------------------------------------

Status Loader::save(const std::string& dir) {
  if (dir.empty())
    return invalid_argument("save() needs a directory; state() returns the cut as bytes");
  return save_cut(dir).status();
}

Result<std::string> Loader::state() {
  SY_ASSIGN_OR_RETURN(std::string bytes, save_cut(""));
  return bytes;
}

Result<std::string> Loader::save_cut(const std::string& dir) {
  if (!epoch_) return invalid_argument("save() needs a started epoch: call start_epoch() first");
  auto& e = *epoch_;
  if (!e.error.is_ok())
    return Status(e.error.code(), "cannot save a failed epoch: " + e.error.message());
  auto& d = *cluster_->impl_;
  SY_ASSIGN_OR_RETURN(auto system, d.running());
  if (Status why = d.job_failure(); !why.is_ok()) return why;
  if (d.job->dispatch != Dispatch::kNone && d.options.order != Order::kExact)
    return invalid_argument(
        "a checkpoint needs order=exact when a dispatcher routes items: with as_completed "
        "the consumed items of a logical shard are not a prefix of its order");
  const checkpoint_actor keeper = d.roles_of(rank_).checkpoint;
  const EpochTicket& t = e.merger->ticket();
  SaveRequest req;
  req.dir = dir;
  req.epoch = e.epoch;
  req.step = e.next_step;
  req.steps = t.steps;
  req.layout_step0 = t.layout_step0;
  req.epoch_complete = e.next_step == t.steps;
  req.shards = t.shards;
  req.take = t.take;
  req.consumed = e.cursor.consumed();
  req.layout_offset = t.layout_offset;
  req.layout_items = t.layout_items;
  req.worker_states = e.cursor.worker_states();
  req.dispatcher_state = e.cursor.dispatcher_state();
  req.loader_state = e.cursor.loader_state();
  Status result = internal_error("no answer from the checkpoint actor");
  std::string state;
  const auto t0 = std::chrono::steady_clock::now();
  caf::scoped_actor self{system->sys};
  const std::chrono::milliseconds timeout{d.options.checkpoint_timeout_ms};
  const std::string where = dir.empty() ? "its loader state" : dir;
  self->request(keeper, timeout, std::move(req))
      .receive(
          [&](SaveDone& msg) {
            received(msg);
            result = Status::ok();
            state = std::move(msg.state);
          },
          [&](const caf::error& err) {
            result = request_failed(err, "the checkpoint actor of rank " + std::to_string(rank_),
                                    "SaveRequest", timeout);
            if (err == caf::sec::request_timeout)
              result = unavailable(
                  "checkpoint of rank " + std::to_string(rank_) + " into " + where +
                  " timed out: " + result.message() + "; every rank must call " +
                  (dir.empty() ? "state()" : "save()") + " at step " + std::to_string(e.next_step));
          });
  if (!result.is_ok()) {
    if (Status why = d.job_failure(); !why.is_ok()) result = why;
    return result;
  }
  e.board->save_time.observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return state;
}

Result<ResumePoint> Loader::restore(const std::string& dir) {
  if (dir.empty()) return invalid_argument("restore() needs a directory; load_state() takes bytes");
  return restore_from(RestoreRequest{dir, {}});
}

Result<ResumePoint> Loader::load_state(const std::string& bytes) {
  if (bytes.empty()) return invalid_argument("load_state() was given no bytes");
  return restore_from(RestoreRequest{{}, bytes});
}

Result<ResumePoint> Loader::restore_from(const RestoreRequest& request) {
  if (epoch_ || (restored_ && restored_->started))
    return invalid_argument("restore() must come before the first start_epoch()");
  auto& d = *cluster_->impl_;
  SY_ASSIGN_OR_RETURN(auto system, d.running());
  const checkpoint_actor keeper = d.roles_of(rank_).checkpoint;
  Result<ResumeGrant> grant = internal_error("no answer from the checkpoint actor");
  caf::scoped_actor self{system->sys};
  const std::chrono::milliseconds timeout{d.options.checkpoint_timeout_ms};
  self->request(keeper, timeout, request)
      .receive(
          [&](ResumeGrant& g) {
            received(g);
            grant = std::move(g);
          },
          [&](const caf::error& err) {
            grant = request_failed(err, "the checkpoint actor of rank " + std::to_string(rank_),
                                   "RestoreRequest", timeout);
          });
  if (!grant.is_ok()) {
    if (Status why = d.job_failure(); !why.is_ok()) return why;
    return grant.status();
  }
  auto r = std::make_unique<Restored>();
  r->point = ResumePoint{grant->epoch, grant->partial ? grant->step : 0, grant->generation,
                         grant->rescaled};
  auto shared = [](std::string s) {
    return s.empty() ? nullptr : std::make_shared<const std::string>(std::move(s));
  };
  if (!grant->rescaled)
    for (auto& s : grant->worker_states) r->states.push_back(shared(std::move(s)));
  if (!grant->ranks_changed) {
    if (!grant->dispatcher_states.empty())
      r->dispatcher_state = shared(grant->dispatcher_states[0]);
    if (!grant->loader_states.empty()) r->loader_state = shared(grant->loader_states[0]);
  }
  r->ranks_changed = grant->ranks_changed;
  r->loader_states = grant->loader_states;
  restored_ = std::move(r);
  return restored_->point;
}

}  // namespace shardyard
