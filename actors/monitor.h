// JobMonitor: the status and the metrics of the job this process hosts, and the HTTP
// endpoints that serve them (docs/monitor.md):
//
//   GET /metrics   Prometheus text format 0.0.4 (runtime/metrics_text.h)
//   GET /status    JSON, schema shardyard.status/1 (actors/state/job_status.h); ?pretty indents
//   GET /          a short index of the two
//
// status() asks the coordinator for its snapshot (an event-based actor, answered at once;
// 2 s at most). For a job in one process it adds every rank from this process's
// StatusBoard, read without asking any other actor. For a job of several processes
// (whole_job) it asks the coordinator for every rank's RankReport instead: the coordinator
// asks each rank's loader actor, wherever it lives, and a rank that does not answer within
// 1.5 s shows as unresponsive; metrics() likewise merges every process's samples. A monitor
// without JobData (`shardyard coordinator` in its own process) reads the job from the
// coordinator (JobInfoRequest).
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
  // `job` may be null (a coordinator in its own process); whole_job: ask the coordinator
  // for every rank's report (ranks in other processes).
  JobMonitor(caf::actor_system& sys, coordinator_actor coordinator,
             std::shared_ptr<const JobData> job, bool whole_job = false);
  ~JobMonitor();

  JobStatus status();
  MetricsSnapshot metrics();

  // Serves the endpoints on address:port (port 0: a free one, see port()).
  Status serve(const std::string& address, uint16_t port);
  uint16_t port() const { return port_.load(); }  // 0: not serving
  void stop();

 private:
  io::HttpResponse handle(const io::HttpRequest& request);
  coordinator_actor coordinator();
  // The whole job's report from the coordinator (empty with a note when it cannot answer).
  RankReport job_report(std::string* error);

  caf::actor_system& sys_;
  std::shared_ptr<const JobData> job_;
  const bool whole_job_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  Mutex mu_;
  coordinator_actor coordinator_ SY_GUARDED_BY(mu_);  // null after stop()
  std::unique_ptr<io::HttpServer> server_;            // made by serve(), before any request
  std::atomic<uint16_t> port_{0};
};

}  // namespace shardyard::actors
