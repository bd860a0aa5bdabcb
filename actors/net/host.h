// Hosting a job's coordinator for ranks in other processes: the coordinator actor, its gate
// (gate.h), published on the network, and the rendezvous file when ranks find it through one.
// The process that hosts it is rank 0's (torchrun, mpirun) or a `shardyard coordinator` of
// its own (tools/shardyard-launch); both go through host_coordinator().
//
// Thread-safe: call from a thread that is not an actor's.
#pragma once

#include <caf/all.hpp>

#include <string>

#include "actors/net/gate.h"
#include "actors/net/network.h"
#include "actors/roles.h"
#include "actors/state/coordinator_state.h"

namespace shardyard::actors::net {

struct HostOptions {
  HostPort listen;              // port 0: a free port
  std::string source;           // what chose the address, for messages
  bool tls = false;             // publish with TLS (enable_network() loaded the manager)
  std::string token;            // the job's secret (empty: none, loopback only)
  std::string rendezvous_file;  // write the bound address there when set
  CoordinatorOptions coordinator;
};

struct HostedCoordinator {
  coordinator_actor coordinator;  // for the hosting process's own ranks (no gate in between)
  gate_actor gate;
  uint16_t port = 0;
};

// Refuses a non-loopback address without a token; spawns the coordinator and its gate,
// publishes the gate, writes the rendezvous file.
Result<HostedCoordinator> host_coordinator(caf::actor_system& sys, CoordinatorState core,
                                           const HostOptions& options);

}  // namespace shardyard::actors::net
