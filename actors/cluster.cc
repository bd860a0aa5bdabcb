#include "actors/loader.h"

#include "actors/cluster_impl.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdlib>

#include "actors/state/fork_server.h"
#include "io/remote/remote_file_system.h"

namespace shardyard {

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
  if ((!device.empty() || custom_device) && (device_prefetch == 0 || device_prefetch > 64))
    return invalid_argument("device_prefetch must be 1..64");
  if (max_sample_bytes == 0) return invalid_argument("max_sample_bytes must be at least 1");
  if (windows.enabled()) SY_RETURN_IF_ERROR(validate_window_spec(windows));
  if (metrics_port < -1 || metrics_port > 65535)
    return invalid_argument("metrics_port must be -1 (off), 0 (a free port) or a port");
  if (placement == WorkerPlacement::kLocal) {
    if (env && env->file_system() != &io::default_file_system())
      return invalid_argument(
          "placement local: worker processes read through the default file system, not the "
          "Env's (docs/worker-processes.md)");
  }
  return Status::ok();
}

const char* worker_placement_name(WorkerPlacement p) {
  return p == WorkerPlacement::kLocal ? "local" : "inproc";
}

Result<WorkerPlacement> parse_worker_placement(const std::string& name) {
  if (name == "inproc") return WorkerPlacement::kInproc;
  if (name == "local") return WorkerPlacement::kLocal;
  return invalid_argument("placement '" + name + "' is neither inproc nor local");
}

std::optional<int> worker_main() { return actors::run_worker_process_if_requested(); }

Status start_worker_fork_server() { return actors::start_worker_fork_server(); }

EndedWorkerUsage ended_worker_process_usage() {
  struct rusage ru {};
  ::getrusage(RUSAGE_CHILDREN, &ru);
  const auto forked = actors::ForkServer::usage_of_ended_workers();
  EndedWorkerUsage u;
  u.cpu_seconds = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                  static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6 +
                  forked.cpu_seconds;
  u.peak_rss_kb = std::max<long>(ru.ru_maxrss, forked.peak_rss_kb);
  return u;
}

uint64_t Cluster::worker_restarts() const {
  return impl_->workers ? impl_->workers->restarts() : 0;
}

Cluster::Cluster() : impl_(std::make_unique<Impl>()) {}

Cluster::~Cluster() { (void)shutdown(); }

const Manifest& Cluster::manifest() const { return *impl_->job->manifest; }
const ScanReport& Cluster::scan_report() const { return impl_->report; }
const LoaderOptions& Cluster::options() const { return impl_->options; }
uint32_t Cluster::logical_shards() const { return impl_->job->shards.count(); }
uint32_t Cluster::prefetch_packets() const { return impl_->prefetch_packets(); }

Result<std::shared_ptr<Cluster>> Cluster::start(const LoaderOptions& options,
                                                std::vector<uint32_t> ranks) {
  SY_RETURN_IF_ERROR(options.validate());
  if (const char* fd = std::getenv(kWorkerFdEnv); fd && *fd)
    return invalid_argument(
        "this process was started as a shardyard worker process (" + std::string(kWorkerFdEnv) +
        " is set) but opened a loader: call shardyard::worker_main() at the top of main "
        "(docs/worker-processes.md)");
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
  // Unread fields are read on the collator threads, several at once: only the default file
  // system's files (pread) are known to allow that; a user FileSystemEnv's reads stay on the
  // worker threads, where current_worker() says who reads.
  jo.read_into_batch_bytes = &fs == &io::default_file_system() ? options.read_into_batch_bytes : 0;
  jo.fs = &fs;
  jo.clock = env->clock();
  jo.data_plane = env->new_data_plane();
  SY_ASSIGN_OR_RETURN(d.job, make_job(std::move(jo)));
  const auto& job = d.job;
  SY_RETURN_IF_ERROR(io::check_sample_bytes(*job->manifest, options.max_sample_bytes));
  if (options.placement == WorkerPlacement::kLocal) {
    WorkerProcessOptions wopts;
    wopts.binary = options.worker_binary;
    wopts.max_restarts = options.max_worker_restarts;
    wopts.arena_bytes = options.shm_arena_bytes;
    wopts.prefetch_batches = options.prefetch_batches;
    wopts.sources = options.sources;
    wopts.scan_threads = options.scan_threads;
    SY_ASSIGN_OR_RETURN(d.workers, WorkerLaunch::create(*job, std::move(wopts)));
  }
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
    SY_ASSIGN_OR_RETURN(
        net, net::net_options(options.heartbeat_interval_ms, options.connection_timeout_ms,
                              where.host, options.force_tls, token, &d.tls));
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
      roles.workers.push_back(spawn_worker(
          sys, job, r, w, d.workers ? make_process_runner(d.workers, job, r, w) : nullptr));
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
  std::vector<caf::actor_addr> stopped;  // the roles told to stop
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
    auto await_ack = [&](auto& asked, const std::string& what) {
      asked.receive([&](const ShutdownAck& msg) { received(msg); },
                    [&](const caf::error& err) {
                      if (result.is_ok())
                        result = request_failed(err, what, "ShutdownRequest", kShutdownTimeout);
                    });
    };
    auto stop = [&](auto& handle, const std::string& what) {
      if (!handle) return;
      auto asked = self->request(handle, kShutdownTimeout, ShutdownRequest{"cluster shutdown"});
      await_ack(asked, what);
      handle = nullptr;
    };
    // The roles are remembered to be waited for below; the coordinator is not: its pending
    // join deadline holds it until it is due.
    auto stop_role = [&](auto& handle, const std::string& what) {
      stopped.push_back(caf::actor_cast<caf::actor_addr>(handle));
      stop(handle, what);
    };
    // A rank's workers are asked together, then waited for: each ends its worker process (if
    // it has one) before it answers, and those processes then exit side by side.
    auto stop_workers = [&](std::vector<worker_actor>& workers, const std::string& what) {
      using Handle = decltype(self->request(std::declval<worker_actor>(), kShutdownTimeout,
                                            ShutdownRequest{}));
      std::vector<Handle> asked;
      for (auto& w : workers) {
        if (!w) continue;
        stopped.push_back(caf::actor_cast<caf::actor_addr>(w));
        asked.push_back(self->request(w, kShutdownTimeout, ShutdownRequest{"cluster shutdown"}));
        w = nullptr;
      }
      for (auto& h : asked) await_ack(h, what);
    };
    for (auto& [r, roles] : ranks) {
      stop_role(roles.checkpoint, "checkpoint actor of rank " + std::to_string(r));
      stop_role(roles.dispatcher, "dispatcher of rank " + std::to_string(r));
      stop_workers(roles.workers, "worker of rank " + std::to_string(r));
      stop_role(roles.loader, "loader of rank " + std::to_string(r));
    }
    if (gate) stop(gate, "the coordinator's gate");
    stop(coordinator, "coordinator");
  }
  if (gate) net::remove_rendezvous(d.options.rendezvous_file);
  // With other processes, the actors must be gone while the network thread still runs
  // (net::await_actors_gone says why); the warning names a wait that could not finish.
  if (d.networked) {
    if (size_t left = net::await_actors_gone(stopped, kShutdownTimeout))
      std::fprintf(stderr,
                   "shardyard: warning: %zu stopped actor(s) still referenced after %lld s; "
                   "the actor system may not stop\n",
                   left, static_cast<long long>(kShutdownTimeout.count() / 1000));
  }
  system.reset();  // waits for every actor to finish, unless a trainer call still holds it
  d.tls.reset();
  return result;
}

}  // namespace shardyard
