#include "actors/worker_core.h"

namespace shardyard::actors {

WorkerCore::WorkerCore(std::shared_ptr<const JobData> job, uint32_t rank, uint32_t worker)
    : job_(std::move(job)), reader_(*job_->fs, job_->manifest, job_->pool) {
  identity_.rank = rank;
  identity_.world_size = job_->topology.ranks;
  identity_.worker = worker;
  identity_.num_workers = job_->topology.workers;
  identity_.global_worker = rank * job_->topology.workers + worker;
  identity_.seed = job_->plan.seed;
}

Result<UnitStats> WorkerCore::run(const WorkUnit& unit, io::Channel& channel) {
  UnitStats stats;
  Status st = produce(unit, channel, &stats);
  channel.finish(st);
  if (!st.is_ok()) return st;
  return stats;
}

namespace {
// One logical shard being emitted: its epoch sequence and the chunk in hand.
struct ShardCursor {
  ShardSequence seq;
  size_t next_chunk = 0;
  std::vector<Item> items;     // the current chunk, in item-id order
  std::vector<uint32_t> perm;  // emission order
  size_t pos = 0;
};

// Calls fn(source, first sample, last sample, first item id) for each run of one source's
// samples in a chunk (a chunk can span the end of one source and the start of the next).
template <typename Fn>
Status for_each_run(const JobData& job, const ShardSequence& seq, size_t chunk, Fn&& fn) {
  const uint64_t g0 = seq.chunk_begin(chunk), g1 = seq.chunk_end(chunk);
  for (uint64_t g = g0; g < g1;) {
    auto loc = job.index.locate(g);
    uint64_t end = std::min(g1, job.index.source_end(loc.source));
    SY_RETURN_IF_ERROR(fn(loc.source, loc.sample, loc.sample + (end - g), g));
    g = end;
  }
  return Status::ok();
}
}  // namespace

Status WorkerCore::produce(const WorkUnit& unit, io::Channel& channel, UnitStats* stats) {
  identity_.epoch = unit.epoch;
  ScopedWorkerInfo scoped(&identity_);
  SY_ASSIGN_OR_RETURN(auto stages, build_pipeline(job_->pipeline));
  for (auto& s : stages) SY_RETURN_IF_ERROR(s->open(identity_));

  const auto& job = *job_;
  const bool permute_chunks = job.manifest->seekable();
  std::vector<ShardCursor> cursors;
  cursors.reserve(unit.shards.size());
  for (auto shard : unit.shards)
    cursors.push_back(ShardCursor{ShardSequence(job.shards, shard, job.plan.chunk_items,
                                                job.plan.shuffle, permute_chunks, unit.epoch_key),
                                  0,
                                  {},
                                  {},
                                  0});

  InterleaveCursor order(unit.take);
  io::Packet packet;
  uint64_t packet_bytes = 0;
  while (!order.done()) {
    const uint32_t k = order.next();
    auto& c = cursors[k];
    if (c.pos == c.perm.size()) {  // read the shard's next chunk
      c.items.clear();
      SY_RETURN_IF_ERROR(
          for_each_run(job, c.seq, c.next_chunk,
                       [&](uint32_t source, uint64_t first, uint64_t last, uint64_t id) {
                         return reader_.read(source, first, last, id, &c.items);
                       }));
      c.perm = c.seq.chunk_permutation(c.next_chunk);
      c.pos = 0;
      ++c.next_chunk;
      // Say what this shard reads next, so that a remote file fetches it (and a next shard
      // is opened) while this chunk's items are emitted.
      if (c.next_chunk < c.seq.num_chunks())
        (void)for_each_run(job, c.seq, c.next_chunk,
                           [&](uint32_t source, uint64_t first, uint64_t last, uint64_t) {
                             reader_.will_need(source, first, last);
                             return Status::ok();
                           });
    }
    Item item = std::move(c.items[c.perm[c.pos++]]);
    item.shard = unit.shards[k];
    if (!stages.empty()) {
      StageContext ctx{identity_, ItemRng(hash_combine(unit.epoch_key, item.id))};
      for (auto& s : stages) {
        Status st = s->process(item, ctx);
        if (!st.is_ok())
          return Status(st.code(), "stage failed on item '" + item.key + "' (item " +
                                       std::to_string(item.id) + "): " + st.message());
      }
    }
    uint64_t bytes = item.payload_bytes();
    stats->bytes += bytes;
    ++stats->items;
    packet_bytes += bytes;
    packet.items.push_back(std::move(item));
    if (packet.items.size() >= job.packet_items || packet_bytes >= job.packet_bytes) {
      SY_RETURN_IF_ERROR(channel.push(std::move(packet)));
      packet = io::Packet{};
      packet_bytes = 0;
    }
  }
  if (!packet.items.empty()) {
    SY_RETURN_IF_ERROR(channel.push(std::move(packet)));
  }
  return Status::ok();
}

}  // namespace shardyard::actors
