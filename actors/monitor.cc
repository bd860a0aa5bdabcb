#include "actors/monitor.h"

#include <unistd.h>

#include <cstdio>

#include "actors/state/status_board.h"
#include "runtime/metrics_text.h"

namespace shardyard::actors {

JobMonitor::JobMonitor(caf::actor_system& sys, coordinator_actor coordinator,
                       std::shared_ptr<const JobData> job, bool whole_job)
    : sys_(sys),
      job_(std::move(job)),
      whole_job_(whole_job || !job_),
      coordinator_(std::move(coordinator)) {}

JobMonitor::~JobMonitor() { stop(); }

coordinator_actor JobMonitor::coordinator() {
  MutexLock lock(&mu_);
  return coordinator_;
}

namespace {

constexpr std::chrono::seconds kAskTimeout{2};

std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

RankReport JobMonitor::job_report(std::string* error) {
  RankReport report;
  coordinator_actor handle = coordinator();
  if (!handle) {
    *error = "the job is shutting down";
    return report;
  }
  caf::scoped_actor self{sys_};
  self->request(handle, kAskTimeout, RankReportRequest{})
      .receive(
          [&](RankReport& r) {
            received(r);
            report = std::move(r);
          },
          [&](const caf::error& err) { *error = caf::to_string(err); });
  return report;
}

JobStatus JobMonitor::status() {
  JobStatus s;
  coordinator_actor handle = coordinator();
  auto describe = [&s](const JobInfo& info) {
    s.world_size = info.world_size;
    s.workers = info.workers;
    s.batch_size = info.batch_size;
    s.logical_shards = info.logical_shards;
    s.items = info.num_items;
    s.dispatch = info.dispatch;
    s.fingerprint = hex16(info.fingerprint);
  };
  if (job_) {
    describe(job_->info());
    s.node = job_->status->node();
    s.pid = job_->status->pid();
  } else {
    s.node = host_name();
    s.pid = static_cast<uint32_t>(::getpid());
    if (handle) {
      caf::scoped_actor self{sys_};
      self->request(handle, kAskTimeout, JobInfoRequest{})
          .receive(
              [&](const JobInfo& info) {
                received(info);
                describe(info);
              },
              [&](const caf::error&) {});  // no rank joined yet: the job is not known
    }
  }
  s.uptime_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();

  ActorSnapshot coordinator;
  coordinator.role = "coordinator";
  coordinator.state = "unresponsive";
  coordinator.detail = "no answer within 2 s";
  coordinator.node = s.node;
  coordinator.pid = s.pid;
  if (!handle) {
    coordinator.detail = "the job is shutting down";
  } else {
    caf::scoped_actor self{sys_};
    self->request(handle, kAskTimeout, SnapshotRequest{})
        .receive(
            [&](const ActorSnapshot& a) {
              received(a);
              coordinator = a;
            },
            [&](const caf::error& err) { coordinator.detail = caf::to_string(err); });
  }
  coordinator.uptime_s = s.uptime_s;
  s.actors.push_back(std::move(coordinator));
  if (whole_job_) {
    std::string error;
    RankReport report = job_report(&error);
    for (auto& r : report.ranks) add_rank(&s, std::move(r));
  } else {
    StatusBoard& board = *job_->status;
    for (uint32_t r : board.ranks()) add_rank(&s, board.collect_rank(r));
  }
  return s;
}

MetricsSnapshot JobMonitor::metrics() {
  if (!whole_job_) return job_->status->metrics().collect();
  std::string error;
  return job_report(&error).metrics;
}

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
