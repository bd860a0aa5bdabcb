// The gate: the coordinator's only door to the network (docs/multi-process.md).
//
// A coordinator that ranks in other processes reach is never published itself: the gate is.
// It speaks the coordinator's interface plus a handshake. A new process says Hello, gets a
// Challenge, and proves with a Proof that it knows the job's token (an HMAC over both
// nonces, its node id and its rank; the secret never travels); the gate then admits that
// process's node for that rank and proves the token back. From then on it checks every
// message: a sender from a node it did not admit, a message for a rank the node was not
// admitted for, or a message over the size limits is refused (and logged), and nothing else
// changes for the job. What passes is delegated to the coordinator, so replies go straight
// to the rank. Messages that only the coordinator's own process may send (commit outcomes,
// shutdown, awaiting the ranks) are refused from the network.
//
// A peer that cannot prove the token is refused with a message saying so; the coordinator
// logs it (through GateOptions::log) and the job goes on.
#pragma once

#include <caf/all.hpp>

#include <functional>
#include <string>

#include "actors/roles.h"

namespace shardyard::actors::net {

using gate_actor = coordinator_actor::extend<caf::replies_to<Hello>::with<Challenge>,
                                             caf::replies_to<Proof>::with<Admitted>>;

struct GateOptions {
  std::string token;  // the job's secret; empty when the job has none (loopback only)
  // Where refused peers and admissions are reported (a line each); null: stderr.
  std::function<void(const std::string&)> log;
};

gate_actor spawn_gate(caf::actor_system& sys, coordinator_actor coordinator, GateOptions options);

}  // namespace shardyard::actors::net
