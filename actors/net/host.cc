#include "actors/net/host.h"

namespace shardyard::actors::net {

Result<HostedCoordinator> host_coordinator(caf::actor_system& sys, CoordinatorState core,
                                           const HostOptions& o) {
  if (o.token.empty() && !is_loopback_host(o.listen.host))
    return invalid_argument(
        "a coordinator on the non-loopback address " + o.listen.to_string() +
        " needs the job's token: give --token-file F or set SHARDYARD_TOKEN_FILE (the same "
        "file on every node)");
  HostedCoordinator h;
  h.coordinator = spawn_coordinator(sys, std::move(core), o.coordinator);
  GateOptions gate;
  gate.token = o.token;
  gate.log = o.coordinator.log;
  h.gate = spawn_gate(sys, h.coordinator, std::move(gate));
  auto port = publish_gate(sys, h.gate, o.listen, o.tls, o.source);
  if (!port.is_ok()) {
    caf::anon_send_exit(h.gate, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(h.coordinator, caf::exit_reason::user_shutdown);
    return port.status();
  }
  h.port = *port;
  if (!o.rendezvous_file.empty()) {
    Status st = write_rendezvous(o.rendezvous_file, HostPort{o.listen.host, h.port});
    if (!st.is_ok()) {
      caf::anon_send_exit(h.gate, caf::exit_reason::user_shutdown);
      caf::anon_send_exit(h.coordinator, caf::exit_reason::user_shutdown);
      return st;
    }
  }
  return h;
}

}  // namespace shardyard::actors::net
