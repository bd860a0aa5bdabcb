#include "actors/monitor.h"

#include "actors/state/status_board.h"
#include "runtime/metrics_text.h"

namespace shardyard::actors {

JobMonitor::JobMonitor(caf::actor_system& sys, coordinator_actor coordinator,
                       std::shared_ptr<const JobData> job)
    : sys_(sys), job_(std::move(job)), coordinator_(std::move(coordinator)) {}

JobMonitor::~JobMonitor() { stop(); }

JobStatus JobMonitor::status() {
  const JobData& job = *job_;
  StatusBoard& board = *job.status;
  JobStatus s;
  s.world_size = job.topology.ranks;
  s.workers = job.topology.workers;
  s.batch_size = job.batch_size;
  s.logical_shards = job.shards.count();
  s.items = job.index.num_items();
  s.dispatch = dispatch_name(job.dispatch);
  s.fingerprint = job.manifest->fingerprint_hex();
  s.node = board.node();
  s.pid = board.pid();
  s.uptime_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();

  ActorSnapshot coordinator;
  coordinator.role = "coordinator";
  coordinator.state = "unresponsive";
  coordinator.detail = "no answer within 2 s";
  coordinator_actor handle;
  {
    MutexLock lock(&mu_);
    handle = coordinator_;
  }
  if (!handle) {
    coordinator.detail = "the job is shutting down";
  } else {
    caf::scoped_actor self{sys_};
    self->request(handle, std::chrono::seconds(2), SnapshotRequest{})
        .receive(
            [&](const ActorSnapshot& a) {
              received(a);
              coordinator = a;
            },
            [&](const caf::error& err) { coordinator.detail = caf::to_string(err); });
  }
  coordinator.node = board.node();
  coordinator.pid = board.pid();
  coordinator.uptime_s = s.uptime_s;
  s.actors.push_back(std::move(coordinator));
  for (uint32_t r : board.ranks()) add_rank(&s, board.collect_rank(r));
  return s;
}

MetricsSnapshot JobMonitor::metrics() { return job_->status->metrics().collect(); }

io::HttpResponse JobMonitor::handle(const io::HttpRequest& request) {
  if (request.path == "/metrics")
    return {200, kPrometheusContentType, render_prometheus(metrics()), {}};
  if (request.path == "/status") {
    const int indent = request.query.find("pretty") != std::string::npos ? 2 : -1;
    return {200, "application/json", status_json(status(), indent) + "\n", {}};
  }
  const char* index =
      "shardyard job\n"
      "  /metrics  Prometheus text format 0.0.4\n"
      "  /status   the job's actors, ranks and logical shards as JSON (?pretty to indent)\n";
  if (request.path == "/") return {200, "text/plain; charset=utf-8", index, {}};
  return {404, "text/plain; charset=utf-8", "no page " + request.path + " here; try\n" + index, {}};
}

Status JobMonitor::serve(const std::string& address, uint16_t port) {
  if (server_) return Status::ok();
  io::HttpServerOptions o;
  o.address = address;
  o.port = port;
  SY_ASSIGN_OR_RETURN(
      server_, io::HttpServer::start(o, [this](const io::HttpRequest& r) { return handle(r); }));
  port_ = server_->port();
  return Status::ok();
}

void JobMonitor::stop() {
  if (server_) server_->stop();  // joins the thread that answers requests
  port_ = 0;
  MutexLock lock(&mu_);
  coordinator_ = nullptr;
}

}  // namespace shardyard::actors
