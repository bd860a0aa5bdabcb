// JobMonitor: the status and the metrics of the job this process hosts, and the HTTP
// endpoints that serve them (docs/monitor.md):
//
//   GET /metrics   Prometheus text format 0.0.4 (runtime/metrics_text.h)
//   GET /status    JSON, schema shardyard.status/1 (actors/state/job_status.h); ?pretty indents
//   GET /          a short index of the two
//
// status() asks the coordinator for its snapshot (an event-based actor, answered at once;
// 2 s at most) and adds every rank this process hosts from the StatusBoard, which it reads
// without asking any other actor. A coordinator in its own process will instead ask each
// rank process for its RankReport (StatusBoard::collect_report) and add them the same way.
//
// The server runs on its own thread (io/serve/http.h) and never blocks the job. stop()
// must come before the actor system goes (Cluster::shutdown() stops it first): it closes
// the endpoints and lets go of the coordinator; status() after it reports no coordinator.
//
// Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "actors/roles.h"
#include "actors/state/job_status.h"
#include "io/serve/http.h"
#include "runtime/mutex.h"

namespace shardyard::actors {

class JobMonitor {
 public:
  JobMonitor(caf::actor_system& sys, coordinator_actor coordinator,
             std::shared_ptr<const JobData> job);
  ~JobMonitor();

  JobStatus status();
  MetricsSnapshot metrics();

  // Serves the endpoints on address:port (port 0: a free one, see port()).
  Status serve(const std::string& address, uint16_t port);
  uint16_t port() const { return port_.load(); }  // 0: not serving
  void stop();

 private:
  io::HttpResponse handle(const io::HttpRequest& request);

  caf::actor_system& sys_;
  std::shared_ptr<const JobData> job_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  Mutex mu_;
  coordinator_actor coordinator_ SY_GUARDED_BY(mu_);  // null after stop()
  std::unique_ptr<io::HttpServer> server_;            // made by serve(), before any request
  std::atomic<uint16_t> port_{0};
};

}  // namespace shardyard::actors
