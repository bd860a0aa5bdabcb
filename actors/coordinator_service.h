// A job's coordinator in a process of its own: what `shardyard coordinator` runs, and what
// tools/shardyard-launch starts on node 0 (docs/multi-process.md).
//
//   CoordinatorServiceOptions o;
//   o.listen = "127.0.0.1:0";  o.world_size = 8;  o.token_file = "/run/job/token";
//   SY_ASSIGN_OR_RETURN(auto service, CoordinatorService::start(o));
//   std::printf("listening on port %u\n", service->port());
//   Status outcome = service->wait();   // every rank left, or why the job stopped
//
// The first rank that joins describes the job; every other rank must agree with it. The
// service ends when every rank of the world joined and left, or when the job stops (a rank
// lost, a rank that disagreed, one that failed): wait() returns the reason then.
//
// Thread-safe: stop() may be called from any thread (a signal watcher).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "runtime/status.h"

namespace shardyard {

class Env;

struct CoordinatorServiceOptions {
  std::string listen = "127.0.0.1:0";  // HOST:PORT; port 0: a free one (see port())
  uint32_t world_size = 1;
  // The job's secret: `token`, else the first line of `token_file`. A coordinator off
  // loopback refuses to start without one.
  std::string token;
  std::string token_file;
  uint32_t restart_count = 0;         // ranks of another restart are refused
  uint32_t join_timeout_ms = 300000;  // after the first rank joined, for the others
  bool force_tls = false;             // TLS also on loopback (always off it)
  uint32_t heartbeat_interval_ms = 500;
  uint32_t connection_timeout_ms = 5000;  // a rank silent this long is lost
  // Where the service reports (admissions, refusals, a lost rank, the job stopping); null:
  // stderr.
  std::function<void(const std::string&)> log;
  // The file system the coordinator commits checkpoints through (the CHECKPOINT file, in
  // the directory the ranks save to) and the clock that dates them; null: Env::Default().
  // Must outlive the service.
  Env* env = nullptr;
  // The whole job's monitoring endpoints (docs/monitor.md): GET /metrics and GET /status
  // merged from every rank process. -1: not served; 0: a free port (metrics_port()).
  int32_t metrics_port = -1;
  std::string metrics_address = "127.0.0.1";
};

class CoordinatorService {
 public:
  static Result<std::unique_ptr<CoordinatorService>> start(const CoordinatorServiceOptions& o);
  ~CoordinatorService();
  CoordinatorService(const CoordinatorService&) = delete;
  CoordinatorService& operator=(const CoordinatorService&) = delete;

  uint16_t port() const;
  uint16_t metrics_port() const;  // 0: not serving
  // Blocks until every rank joined and left (OK), the job stopped (its reason), or stop()
  // (kCancelled).
  Status wait();
  void stop();

 private:
  struct Impl;
  CoordinatorService();
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardyard
