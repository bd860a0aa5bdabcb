// SystemConfig: the actor-system configuration shardyard's roles run on by default
// (Env::new_actor_system_config, actors/env.h).
//
// It registers every message of the protocol (actors/protocol.h) and sets the scheduler:
// workers are detached (own threads) and the event-based roles handle a few messages per
// epoch, so they get two scheduler threads that block when idle ("sharing") instead of the
// work-stealing threads that poll every 50 us and took a tenth of the CPU of a run. The
// logger is quiet. A process of another placement (a worker process, a node) starts its
// actor system from this configuration too.
//
// Thread-compatible, like caf::actor_system_config.
#pragma once

#include <caf/actor_system_config.hpp>

namespace shardyard::actors {

class SystemConfig : public caf::actor_system_config {
 public:
  SystemConfig();
};

}  // namespace shardyard::actors
