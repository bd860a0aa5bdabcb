// The control-plane protocol as CAF sees it: inspect() for every message of
// actors/state/messages.h, and register_protocol(), which registers them (and the vectors
// they use) with CAF. Call it on every actor_system_config, in every process: a type that is
// not registered works inside one process and arrives empty in another.
//
// CAF is included only under actors/ (not actors/state/).
#pragma once

#include <caf/all.hpp>

#include <cmath>
#include <vector>

#include "actors/state/messages.h"

namespace shardyard::actors {

// The last element of every message's inspect(): a message that arrives from another process
// is built by CAF's deserializer on its network thread, which writes the fields after the
// message's MailboxOrder was made; the token releases again once they are all in, so the
// handler's acquire orders them for ThreadSanitizer too (a no-op without it).
// CAF 0.17 encodes a double with a loop that never ends for NaN or infinity
// (caf::detail::pack754): such a value in a message would hang the sending thread, and a
// hostile peer's bytes can decode to one. Every double of our messages is made finite
// before it is encoded and after it is decoded (not finite: 0); tests/fuzz/net_fuzz.cc
// re-encodes what it decodes.
inline void make_finite(double& d) {
  if (!std::isfinite(d)) d = 0;
}
inline void make_finite(std::vector<double>& v) {
  for (double& d : v) make_finite(d);
}
template <class... Doubles>
auto finite_on_save(Doubles&... ds) {
  return caf::meta::save_callback([&ds...]() -> caf::error {
    (make_finite(ds), ...);
    return caf::none;
  });
}
template <class... Doubles>
auto finite_on_load(Doubles&... ds) {
  return caf::meta::load_callback([&ds...]() -> caf::error {
    (make_finite(ds), ...);
    return caf::none;
  });
}

// The first element of every message's inspect(): serializing a message for another process
// reads its fields on CAF's network thread, which got the message through CAF's own
// queues; acquiring the token the message's copy released orders the reads after the
// writes of the thread that built it, for ThreadSanitizer (a no-op without it).
template <class Message>
auto saving(Message& x) {
  return caf::meta::save_callback([&x]() -> caf::error {
    x.order.acquire();
    return caf::none;
  });
}
template <class Message>
auto loaded(Message& x) {
  return caf::meta::load_callback([&x]() -> caf::error {
    x.order.loaded();
    return caf::none;
  });
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, JobInfo& x) {
  return f(caf::meta::type_name("JobInfo"), saving(x), x.fingerprint, x.num_items, x.logical_shards,
           x.chunk_items, x.seed, x.shuffle, x.drop_last, x.distributed_strategy, x.worker_strategy,
           x.world_size, x.workers, x.batch_size, x.exact_order, x.pipeline, x.dispatch, x.windows,
           loaded(x));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, JoinRequest& x) {
  return f(caf::meta::type_name("JoinRequest"), saving(x), x.protocol_version, x.rank, x.workers,
           x.fingerprint, x.job, x.restart_count, loaded(x));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, EpochKeyRequest& x) {
  return f(caf::meta::type_name("EpochKeyRequest"), saving(x), x.epoch, loaded(x));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, EpochKey& x) {
  return f(caf::meta::type_name("EpochKey"), saving(x), x.epoch, x.key, loaded(x));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, EpochStart& x) {
  return f(caf::meta::type_name("EpochStart"), saving(x), x.rank, x.epoch, x.channels, x.route,
           loaded(x));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, EpochTicket& x) {
  return f(caf::meta::type_name("EpochTicket"), saving(x), x.epoch, x.steps, x.items, x.shards,
           x.take, x.consumed, x.worker_of, x.first_step, x.layout_step0, x.layout_offset,
           x.layout_items, loaded(x));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, WorkUnit& x) {
  return f(caf::meta::type_name("WorkUnit"), saving(x), x.rank, x.worker, x.epoch, x.epoch_key,
           x.shards, x.take, x.consumed, x.channel, x.stage_states, x.rescaled, x.route, loaded(x));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, UnitAccepted& x) {
  return f(caf::meta::type_name("UnitAccepted"), saving(x), x.rank, x.worker, x.epoch, loaded(x));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, WorkerDone& x) {
  return f(caf::meta::type_name("WorkerDone"), saving(x), x.rank, x.worker, x.epoch, x.items,
           x.bytes, x.ok, x.error, loaded(x));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RankEpochDone& x) {
  return f(caf::meta::type_name("RankEpochDone"), saving(x), x.rank, x.epoch, x.steps, x.items,
           loaded(x));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, StepReport& x) {
  return f(caf::meta::type_name("StepReport"), saving(x), x.rank, x.epoch, x.step, x.items,
           loaded(x));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SaveRequest& x) {
  return f(caf::meta::type_name("SaveRequest"), saving(x), x.dir, x.epoch, x.step, x.steps,
           x.layout_step0, x.epoch_complete, x.shards, x.take, x.consumed, x.layout_offset,
           x.layout_items, x.worker_states, x.dispatcher_state, x.loader_state, loaded(x));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SaveDone& x) {
  return f(caf::meta::type_name("SaveDone"), saving(x), x.generation, x.bytes, x.state, loaded(x));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, CheckpointBegin& x) {
  return f(caf::meta::type_name("CheckpointBegin"), saving(x), x.rank, x.dir, x.epoch, x.step,
           x.proposed_generation, loaded(x));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, CheckpointGeneration& x) {
  return f(caf::meta::type_name("CheckpointGeneration"), saving(x), x.generation, loaded(x));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RankSaved& x) {
  return f(caf::meta::type_name("RankSaved"), saving(x), x.rank, x.dir, x.generation, x.epoch,
           x.step, x.steps, x.layout_step0, x.epoch_complete, x.file, x.size, x.checksum, x.bytes,
           loaded(x));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, CheckpointCommitted& x) {
  return f(caf::meta::type_name("CheckpointCommitted"), saving(x), x.generation, x.state,
           loaded(x));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RankSaveFailed& x) {
  return f(caf::meta::type_name("RankSaveFailed"), saving(x), x.rank, x.dir, x.generation, x.error,
           loaded(x));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, CommitOutcome& x) {
  return f(caf::meta::type_name("CommitOutcome"), saving(x), x.generation, x.ok, x.error,
           loaded(x));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RestoreRequest& x) {
  return f(caf::meta::type_name("RestoreRequest"), saving(x), x.dir, x.state, loaded(x));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ResumeOffer& x) {
  return f(caf::meta::type_name("ResumeOffer"), saving(x), x.rank, x.dir, x.manifest, x.rank_files,
           loaded(x));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ResumeGrant& x) {
  return f(caf::meta::type_name("ResumeGrant"), saving(x), x.epoch, x.partial, x.step, x.take,
           x.consumed, x.saved_ranks, x.saved_batch_size, x.steps, x.layout_step0, x.layout_offset,
           x.layout_items, x.worker_states, x.dispatcher_states, x.loader_states, x.ranks_changed,
           x.rescaled, x.generation, loaded(x));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ResumeAck&) {
  return f(caf::meta::type_name("ResumeAck"));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, JobInfoRequest&) {
  return f(caf::meta::type_name("JobInfoRequest"));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SnapshotRequest&) {
  return f(caf::meta::type_name("SnapshotRequest"));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ActorSnapshot& x) {
  return f(caf::meta::type_name("ActorSnapshot"), saving(x),
           finite_on_save(x.items_per_s, x.input_wait_s, x.output_wait_s, x.uptime_s), x.role,
           x.rank, x.worker, x.state, x.epoch, x.items, x.bytes, x.steps, x.detail, x.node, x.pid,
           x.items_per_s, x.queue_depth, x.queue_capacity, x.input_wait_s, x.output_wait_s,
           x.uptime_s, finite_on_load(x.items_per_s, x.input_wait_s, x.output_wait_s, x.uptime_s),
           loaded(x));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ShutdownRequest& x) {
  return f(caf::meta::type_name("ShutdownRequest"), saving(x), x.reason, loaded(x));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ShutdownAck& x) {
  return f(caf::meta::type_name("ShutdownAck"), saving(x), x.role, x.rank, x.worker, loaded(x));
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Hello& x) {
  return f(caf::meta::type_name("Hello"), saving(x), x.protocol_version, x.rank, x.client_nonce,
           loaded(x));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Challenge& x) {
  return f(caf::meta::type_name("Challenge"), saving(x), x.server_nonce, x.node, loaded(x));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Proof& x) {
  return f(caf::meta::type_name("Proof"), saving(x), x.rank, x.proof, loaded(x));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Admitted& x) {
  return f(caf::meta::type_name("Admitted"), saving(x), x.proof, loaded(x));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, JobAborted& x) {
  return f(caf::meta::type_name("JobAborted"), saving(x), x.reason, loaded(x));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RankLeave& x) {
  return f(caf::meta::type_name("RankLeave"), saving(x), x.rank, x.ok, x.error, loaded(x));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, LeaveAck&) {
  return f(caf::meta::type_name("LeaveAck"));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, AwaitLeaves&) {
  return f(caf::meta::type_name("AwaitLeaves"));
}

// Registers every message type above (and the vectors they use) with CAF.
void register_protocol(caf::actor_system_config& cfg);

}  // namespace shardyard::actors
