// inspect() for what a rank process reports to its coordinator for the monitor: a
// RankReport (actors/state/job_status.h: one RankStatus per hosted rank and the process's
// metric samples), the answer to RankReportRequest. register_status_protocol() registers
// them; register_protocol() calls it, so every process that speaks the protocol has them.
//
// Nothing sends these yet (the coordinator and the ranks share one process, which reads
// the StatusBoard directly); they are here so that a coordinator in a process of its own
// can ask each rank process with one message and merge the answers (add_rank,
// merge_metrics). docs/monitor.md describes that step.
#pragma once

#include <caf/all.hpp>

#include "actors/protocol.h"
#include "actors/state/job_status.h"

namespace shardyard {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, MetricPoint& x) {
  return f(caf::meta::type_name("MetricPoint"), actors::finite_on_save(x.value, x.sum), x.labels,
           x.value, x.buckets, x.sum, x.count, actors::finite_on_load(x.value, x.sum));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, MetricFamily& x) {
  return f(caf::meta::type_name("MetricFamily"), actors::finite_on_save(x.bounds), x.name, x.help,
           x.type, x.bounds, x.points, actors::finite_on_load(x.bounds));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, MetricsSnapshot& x) {
  return f(caf::meta::type_name("MetricsSnapshot"), x.families);
}

namespace actors {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, QueueStatus& x) {
  return f(caf::meta::type_name("QueueStatus"), x.name, x.depth, x.capacity, x.bytes);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RankStatus& x) {
  return f(caf::meta::type_name("RankStatus"), x.rank, x.node, x.pid, x.epoch, x.epoch_open, x.step,
           x.steps, x.items, x.shards, x.take, x.consumed, x.queues, x.checkpoint_saves,
           x.checkpoint_generation, x.restored_generation, x.checkpoint_generations, x.actors);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RankReportRequest&) {
  return f(caf::meta::type_name("RankReportRequest"));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RankReport& x) {
  return f(caf::meta::type_name("RankReport"), saving(x), x.ranks, x.metrics, loaded(x));
}

void register_status_protocol(caf::actor_system_config& cfg);

}  // namespace actors
}  // namespace shardyard
