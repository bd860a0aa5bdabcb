#include "actors/worker_core.h"

#include "runtime/checkpoint.h"

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
  uint64_t skip = 0;  // items of the next chunk consumed before a resume
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

Status WorkerCore::restore_stages(const WorkUnit& unit, const std::vector<Stage*>& stateful) {
  if (unit.stage_states.empty()) return Status::ok();
  // Each saved worker state lists its stateful stages in order; stage i gets entry i of
  // every saved state (one without a rescale).
  std::vector<std::vector<std::string>> per_stage(stateful.size());
  for (const auto& blob : unit.stage_states) {
    SY_ASSIGN_OR_RETURN(auto saved, decode_stage_states(blob));
    if (saved.size() != stateful.size())
      return invalid_argument("the checkpoint holds state for " + std::to_string(saved.size()) +
                              " stateful stages; this pipeline has " +
                              std::to_string(stateful.size()));
    for (size_t i = 0; i < saved.size(); ++i) per_stage[i].push_back(std::move(saved[i]));
  }
  for (size_t i = 0; i < stateful.size(); ++i)
    SY_RETURN_IF_ERROR(stateful[i]->restore_state(per_stage[i], unit.rescaled));
  return Status::ok();
}

Status WorkerCore::produce(const WorkUnit& unit, io::Channel& channel, UnitStats* stats) {
  identity_.epoch = unit.epoch;
  ScopedWorkerInfo scoped(&identity_);
  SY_ASSIGN_OR_RETURN(auto stages, build_pipeline(job_->pipeline));
  for (auto& s : stages) SY_RETURN_IF_ERROR(s->open(identity_));
  std::vector<Stage*> stateful;
  for (auto& s : stages)
    if (s->has_state()) stateful.push_back(s.get());
  SY_RETURN_IF_ERROR(restore_stages(unit, stateful));

  const auto& job = *job_;
  const bool permute_chunks = job.manifest->seekable();
  std::vector<ShardCursor> cursors;
  cursors.reserve(unit.shards.size());
  for (size_t k = 0; k < unit.shards.size(); ++k) {
    ShardSequence seq(job.shards, unit.shards[k], job.plan.chunk_items, job.plan.shuffle,
                      permute_chunks, unit.epoch_key);
    // A resumed shard starts inside the chunk (shuffle block) the trainer was in: that chunk
    // is read again, and its items before the cursor are skipped.
    const uint64_t consumed = k < unit.consumed.size() ? unit.consumed[k] : 0;
    auto at = seq.seek(consumed);
    cursors.push_back(ShardCursor{std::move(seq), at.chunk, {}, {}, 0, at.offset});
  }

  InterleaveCursor order(unit.take, unit.consumed);
  std::vector<std::string> states(stateful.size());
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
      c.pos = c.skip;
      c.skip = 0;
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
      if (!stateful.empty()) {  // the states right after this item travel with it
        for (size_t i = 0; i < stateful.size(); ++i) states[i] = stateful[i]->save_state();
        item.stage_state = std::make_shared<const std::string>(encode_stage_states(states));
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
