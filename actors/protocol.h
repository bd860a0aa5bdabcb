// The control-plane protocol: every message between the roles, in one place.
//
// Messages are plain structs with inspect(), registered with CAF in register_protocol()
// (call it on every actor_system_config, in every process), so any of them can cross a
// process boundary. None holds a pointer, a callable or a process-local handle; bytes of
// items never travel here (they use the data plane, io/data_plane.h), only the name of the
// channel that carries them. docs/protocol.md says who sends each message, who answers
// with what, and when.
//
// CAF is included only under actors/.
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace shardyard::actors {

// What defines a job; the coordinator hands it to every rank that joins.
struct JobInfo {
  uint64_t fingerprint = 0;  // manifest fingerprint
  uint64_t num_items = 0;
  uint32_t logical_shards = 1;
  uint32_t chunk_items = 1;
  uint64_t seed = 0;
  bool shuffle = false;
  bool drop_last = false;
  std::string distributed_strategy;
  std::string worker_strategy;
  uint32_t world_size = 1;
  uint32_t workers = 1;
  uint32_t batch_size = 1;
};

// rank -> coordinator: join the job; reply JobInfo, or an error when the fingerprint or the
// topology does not match the job.
struct JoinRequest {
  uint32_t rank = 0;
  uint32_t workers = 0;
  uint64_t fingerprint = 0;
};

// dispatcher -> coordinator: the shared key of an epoch; reply EpochKey.
struct EpochKeyRequest {
  uint32_t epoch = 0;
};
struct EpochKey {
  uint32_t epoch = 0;
  uint64_t key = 0;
};

// loader -> dispatcher: start an epoch, feeding the named channels (one per worker, or one
// shared by all workers). Reply EpochTicket once every worker has its unit.
struct EpochStart {
  uint32_t rank = 0;
  uint32_t epoch = 0;
  std::vector<std::string> channels;  // size 1 (shared) or W
};

// The rank's share of the epoch, enough for the loader to merge worker output in order.
struct EpochTicket {
  uint32_t epoch = 0;
  uint64_t steps = 0;
  uint64_t items = 0;
  std::vector<uint32_t> shards;     // logical shards in interleave order
  std::vector<uint64_t> take;       // items of each
  std::vector<uint32_t> worker_of;  // worker of each
};

// dispatcher -> worker: produce these shards' items of this epoch into `channel`.
struct WorkUnit {
  uint32_t rank = 0;
  uint32_t worker = 0;
  uint32_t epoch = 0;
  uint64_t epoch_key = 0;
  std::vector<uint32_t> shards;  // in interleave order
  std::vector<uint64_t> take;
  std::string channel;
};

// worker -> dispatcher: the unit is finished (ok == false: `error` says why).
struct WorkerDone {
  uint32_t rank = 0;
  uint32_t worker = 0;
  uint32_t epoch = 0;
  uint64_t items = 0;
  uint64_t bytes = 0;
  bool ok = true;
  std::string error;
};

// loader -> coordinator: the rank's trainer consumed the whole epoch.
struct RankEpochDone {
  uint32_t rank = 0;
  uint32_t epoch = 0;
  uint64_t steps = 0;
  uint64_t items = 0;
};

// loader side -> loader actor: where the trainer is (the cursor).
struct StepReport {
  uint32_t rank = 0;
  uint32_t epoch = 0;
  uint64_t step = 0;   // steps consumed in this epoch
  uint64_t items = 0;  // items consumed in this epoch
};

// anyone -> any role: a plain snapshot of the actor's state (for the monitor and tests).
struct SnapshotRequest {};
struct ActorSnapshot {
  std::string role;  // coordinator, dispatcher, worker, loader
  uint32_t rank = 0;
  uint32_t worker = 0;
  std::string state;  // idle, running, done, failed, stopping
  uint32_t epoch = 0;
  uint64_t items = 0;
  uint64_t bytes = 0;
  uint64_t steps = 0;
  std::string detail;
};

// owner -> role: stop; the role replies ShutdownAck after it has let go of what it holds.
struct ShutdownRequest {
  std::string reason;
};
struct ShutdownAck {
  std::string role;
  uint32_t rank = 0;
  uint32_t worker = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, JobInfo& x) {
  return f(caf::meta::type_name("JobInfo"), x.fingerprint, x.num_items, x.logical_shards,
           x.chunk_items, x.seed, x.shuffle, x.drop_last, x.distributed_strategy, x.worker_strategy,
           x.world_size, x.workers, x.batch_size);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, JoinRequest& x) {
  return f(caf::meta::type_name("JoinRequest"), x.rank, x.workers, x.fingerprint);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, EpochKeyRequest& x) {
  return f(caf::meta::type_name("EpochKeyRequest"), x.epoch);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, EpochKey& x) {
  return f(caf::meta::type_name("EpochKey"), x.epoch, x.key);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, EpochStart& x) {
  return f(caf::meta::type_name("EpochStart"), x.rank, x.epoch, x.channels);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, EpochTicket& x) {
  return f(caf::meta::type_name("EpochTicket"), x.epoch, x.steps, x.items, x.shards, x.take,
           x.worker_of);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, WorkUnit& x) {
  return f(caf::meta::type_name("WorkUnit"), x.rank, x.worker, x.epoch, x.epoch_key, x.shards,
           x.take, x.channel);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, WorkerDone& x) {
  return f(caf::meta::type_name("WorkerDone"), x.rank, x.worker, x.epoch, x.items, x.bytes, x.ok,
           x.error);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RankEpochDone& x) {
  return f(caf::meta::type_name("RankEpochDone"), x.rank, x.epoch, x.steps, x.items);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, StepReport& x) {
  return f(caf::meta::type_name("StepReport"), x.rank, x.epoch, x.step, x.items);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SnapshotRequest&) {
  return f(caf::meta::type_name("SnapshotRequest"));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ActorSnapshot& x) {
  return f(caf::meta::type_name("ActorSnapshot"), x.role, x.rank, x.worker, x.state, x.epoch,
           x.items, x.bytes, x.steps, x.detail);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ShutdownRequest& x) {
  return f(caf::meta::type_name("ShutdownRequest"), x.reason);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ShutdownAck& x) {
  return f(caf::meta::type_name("ShutdownAck"), x.role, x.rank, x.worker);
}

// Registers every message type above (and the vectors they use) with CAF.
void register_protocol(caf::actor_system_config& cfg);

}  // namespace shardyard::actors
