#include "actors/state/job.h"

#include <algorithm>

#include "io/fs/uri.h"

namespace shardyard::actors {

bool JobData::collates_from_files() const {
  if (unread_field_bytes == 0 || dispatch != Dispatch::kNone || !manifest) return false;
  uint64_t range = 0, items = 0;
  for (const auto& src : manifest->sources) {
    if (src.kind != SourceKind::kTar || io::is_remote_uri(src.uri)) continue;
    range += src.samples.totals().range;
    items += src.samples.size();
  }
  return items > 0 && range / items >= unread_field_bytes;
}

uint64_t JobData::shards_per_worker() const {
  const uint64_t lanes = uint64_t{topology.ranks} * topology.workers;
  return (shards.count() + lanes - 1) / lanes;
}

uint64_t JobData::items_per_packet(uint64_t mean_payload) const {
  return std::min<uint64_t>(packet_items, packet_bytes / std::max<uint64_t>(1, mean_payload) + 1);
}

uint32_t JobData::default_prefetch_packets() const {
  constexpr uint32_t kMost = 3;
  if (dispatch != Dispatch::kNone) return kMost;
  if (!exact_order) return 1;
  const uint64_t per_packet =
      items_per_packet(manifest->payload_bytes() / std::max<uint64_t>(1, index.num_items()));
  const uint64_t round = uint64_t{read_items} * shards_per_worker();
  return static_cast<uint32_t>(
      std::clamp<uint64_t>((round + per_packet - 1) / per_packet, 1, kMost));
}

JobInfo JobData::info() const {
  JobInfo j;
  j.fingerprint = manifest->fingerprint;
  j.num_items = index.num_items();
  j.logical_shards = shards.count();
  j.chunk_items = plan.chunk_items;
  j.seed = plan.seed;
  j.shuffle = plan.shuffle;
  j.drop_last = plan.drop_last;
  j.distributed_strategy = plan.distributed_strategy;
  j.worker_strategy = plan.worker_strategy;
  j.world_size = topology.ranks;
  j.workers = topology.workers;
  j.batch_size = batch_size;
  j.exact_order = exact_order;
  j.pipeline = spec_to_string(pipeline);
  j.dispatch = dispatch_name(dispatch);
  j.windows = describe_window_spec(manifest->windows);
  return j;
}

Result<std::shared_ptr<const JobData>> make_job(JobOptions options) {
  if (!options.manifest || !options.fs || !options.clock || !options.data_plane)
    return invalid_argument("make_job needs a manifest, a file system, a clock and a data plane");
  auto& manifest = options.manifest;
  auto& plan = options.plan;
  auto& pipeline = options.pipeline;
  const Topology topology = options.topology;
  const uint32_t batch_size = options.batch_size;
  Dispatch dispatch = options.dispatch;
  auto job = std::make_shared<JobData>();
  job->index = ItemIndex(*manifest);
  const uint64_t n = job->index.num_items();
  if (n == 0) return invalid_argument("the dataset has no samples");
  if (plan.logical_shards == 0) plan.logical_shards = default_logical_shards(*manifest);
  if (plan.logical_shards > n)
    return invalid_argument(std::to_string(plan.logical_shards) + " logical shards for " +
                            std::to_string(n) +
                            " items: every logical shard needs at least one item");
  dispatch = resolve_dispatch(pipeline, dispatch);
  SY_ASSIGN_OR_RETURN(job->cut, cut_spec(pipeline, dispatch));
  if (dispatch == Dispatch::kBroadcast) {
    if (plan.worker_strategy != "contiguous" && plan.worker_strategy != "strided")
      return invalid_argument(
          "broadcast dispatch splits a loaded shard's items among workers "
          "by the worker strategy 'contiguous' or 'strided', not '" +
          plan.worker_strategy + "'");
    plan.sequential = true;
    // The loaded shard is the shuffle block: one read per source run, items permuted
    // across the whole shard.
    if (plan.chunk_items == 0) {
      auto shards = make_logical_shards(*manifest, job->index, plan.logical_shards);
      uint64_t largest = 1;
      for (uint32_t j = 0; j < shards.count(); ++j) largest = std::max(largest, shards.size(j));
      plan.chunk_items = static_cast<uint32_t>(std::min<uint64_t>(UINT32_MAX, largest));
    }
  }
  if (plan.chunk_items == 0) plan.chunk_items = default_chunk_items(*manifest, plan.logical_shards);
  if (topology.ranks == 0 || topology.workers == 0 || batch_size == 0)
    return invalid_argument("ranks, workers and batch size must each be at least 1");
  if (plan.logical_shards < topology.ranks)
    return invalid_argument(std::to_string(plan.logical_shards) + " logical shards cannot feed " +
                            std::to_string(topology.ranks) + " ranks");
  SY_RETURN_IF_ERROR(StrategyRegistry::global().get(plan.distributed_strategy).status());
  SY_RETURN_IF_ERROR(StrategyRegistry::global().get(plan.worker_strategy).status());
  for (const auto& s : pipeline.stages())
    if (!StageRegistry::global().contains(s.type))
      return invalid_argument("unknown stage type '" + s.type + "' in the pipeline spec");
  job->read_items = plan.chunk_items;
  if (!plan.shuffle && !plan.sequential && !manifest->windows.enabled())
    job->read_items =
        std::min(plan.chunk_items, default_read_items(*manifest, plan.logical_shards));
  job->manifest = std::move(manifest);
  job->shards = make_logical_shards(*job->manifest, job->index, plan.logical_shards);
  job->plan = std::move(plan);
  job->pipeline = std::move(pipeline);
  job->topology = topology;
  job->batch_size = batch_size;
  job->exact_order = options.exact_order;
  job->fs = options.fs;
  job->clock = options.clock;
  job->dispatch = dispatch;
  job->prefetch_shards = std::max(1u, options.prefetch_shards);
  job->route_key_field = std::move(options.route_key_field);
  job->checkpoint_timeout_ms = options.checkpoint_timeout_ms;
  job->status = std::move(options.status);
  job->reader.max_sample_bytes = options.max_sample_bytes;
  job->unread_field_bytes = spec_reads_bytes(job->pipeline) ? 0 : options.read_into_batch_bytes;
  // The pool must be able to keep the buffers of the batches in flight (prefetched, being
  // built, held by the trainer) plus the open chunks, or every large batch is mapped and
  // page-faulted afresh. Size it from the mean sample size.
  const uint64_t mean_bytes = job->manifest->payload_bytes() / n + 1024;
  job->pool = BufferPool::create(static_cast<size_t>(
      std::clamp<uint64_t>(mean_bytes * batch_size * 6 + (32u << 20), 32u << 20, 4ull << 30)));
  job->data_plane = std::move(options.data_plane);
  return std::shared_ptr<const JobData>(std::move(job));
}

}  // namespace shardyard::actors
