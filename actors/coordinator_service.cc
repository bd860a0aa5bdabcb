#include "actors/coordinator_service.h"

#include <chrono>
#include <cstdio>

#include "actors/env.h"
#include "actors/monitor.h"
#include "actors/net/host.h"
#include "actors/net/network.h"
#include "actors/roles.h"

namespace shardyard {

using namespace actors;  // NOLINT: glue of the actors layer

struct CoordinatorService::Impl {
  std::unique_ptr<net::TlsIdentity> tls;
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  net::HostedCoordinator hosted;
  std::unique_ptr<JobMonitor> monitor;  // with metrics_port
  std::atomic<bool> stop{false};
};

CoordinatorService::CoordinatorService() : impl_(std::make_unique<Impl>()) {}

CoordinatorService::~CoordinatorService() {
  auto& d = *impl_;
  if (!d.sys) return;
  if (d.monitor) d.monitor->stop();  // before the actor system goes
  d.monitor.reset();
  caf::anon_send_exit(d.hosted.gate, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(d.hosted.coordinator, caf::exit_reason::user_shutdown);
  d.hosted = {};
  d.sys.reset();
}

uint16_t CoordinatorService::port() const { return impl_->hosted.port; }

uint16_t CoordinatorService::metrics_port() const {
  return impl_->monitor ? impl_->monitor->port() : 0;
}

void CoordinatorService::stop() { impl_->stop = true; }

Result<std::unique_ptr<CoordinatorService>> CoordinatorService::start(
    const CoordinatorServiceOptions& o) {
  if (o.world_size == 0) return invalid_argument("the world size must be at least 1");
  SY_ASSIGN_OR_RETURN(HostPort listen, parse_host_port(o.listen, /*allow_any_port=*/true));
  SY_ASSIGN_OR_RETURN(std::string token, net::job_token(o.token, o.token_file));
  std::unique_ptr<CoordinatorService> s(new CoordinatorService());
  auto& d = *s->impl_;
  auto log = o.log ? o.log : [](const std::string& line) {
    std::fprintf(stderr, "shardyard coordinator: %s\n", line.c_str());
  };
  SY_ASSIGN_OR_RETURN(net::NetOptions net,
                      net::net_options(o.heartbeat_interval_ms, o.connection_timeout_ms,
                                       listen.host, o.force_tls, token, &d.tls));
  register_protocol(d.cfg);
  net::enable_network(d.cfg, net);
  d.cfg.set("scheduler.max-threads", 2);
  d.cfg.set("scheduler.policy", caf::atom("sharing"));
  d.cfg.set("logger.verbosity", caf::atom("quiet"));
  d.sys = std::make_unique<caf::actor_system>(d.cfg);
  net::HostOptions host;
  host.listen = listen;
  host.source = "--listen";
  host.tls = net.tls;
  host.token = token;
  host.coordinator.join_timeout_ms = o.join_timeout_ms;
  host.coordinator.log = log;
  Env* env = o.env != nullptr ? o.env : Env::Default();
  host.coordinator.fs = env->file_system();
  host.coordinator.clock = env->clock();
  SY_ASSIGN_OR_RETURN(
      d.hosted, net::host_coordinator(
                    *d.sys, CoordinatorState::for_world(o.world_size, o.restart_count), host));
  if (o.metrics_port > 65535) return invalid_argument("the metrics port must be 0..65535");
  if (o.metrics_port >= 0) {
    d.monitor = std::make_unique<JobMonitor>(*d.sys, d.hosted.coordinator, nullptr, true);
    SY_RETURN_IF_ERROR(d.monitor->serve(o.metrics_address, static_cast<uint16_t>(o.metrics_port)));
  }
  return s;
}

Status CoordinatorService::wait() {
  auto& d = *impl_;
  caf::scoped_actor self{*d.sys};
  // One question, answered once every rank left or the job stopped; meanwhile stop() is
  // looked at every second.
  self->send(d.hosted.coordinator, AwaitLeaves{});
  for (;;) {
    bool done = false;
    Status outcome;
    self->receive(
        [&](const LeaveAck& msg) {
          received(msg);
          done = true;
        },
        [&](const caf::error& err) {
          outcome = from_error(err);
          done = true;
        },
        caf::after(std::chrono::seconds(1)) >> [] {});
    if (done) return outcome;
    if (d.stop) return cancelled("the coordinator was stopped");
  }
}

}  // namespace shardyard
