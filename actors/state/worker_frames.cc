#include "actors/state/worker_frames.h"

#include "io/transport/shm_frames.h"
#include "runtime/codec.h"

namespace shardyard::actors {

namespace {

Status damaged(const char* frame) {
  return corrupt(std::string("a damaged ") + frame + " frame between a rank and its worker");
}

// A count of strings, each at least 4 bytes, that the rest of the body can hold.
bool count_fits(const ByteReader& r, uint64_t n, size_t least) { return n <= r.left() / least; }

}  // namespace

std::string encode_job(const WorkerJob& j) {
  ByteWriter w;
  w.u32(kWorkerFrameVersion);
  w.u64(j.fingerprint);
  w.u32(j.plan.logical_shards);
  w.u32(j.plan.chunk_items);
  w.u64(j.plan.seed);
  w.u8(j.plan.shuffle ? 1 : 0);
  w.u8(j.plan.drop_last ? 1 : 0);
  w.str(j.plan.distributed_strategy);
  w.str(j.plan.worker_strategy);
  w.str(j.pipeline);
  w.u32(j.topology.ranks);
  w.u32(j.topology.workers);
  w.u32(j.batch_size);
  w.u8(j.exact_order ? 1 : 0);
  w.str(j.dispatch);
  w.u32(j.prefetch_shards);
  w.str(j.route_key_field);
  w.u64(j.max_sample_bytes);
  w.u64(j.read_into_batch_bytes);
  w.u32(j.packet_items);
  w.u64(j.packet_bytes);
  w.u64(j.windows.record_bytes);
  w.u64(j.windows.length);
  w.u64(j.windows.stride);
  w.u64(j.windows.target);
  w.u8(j.windows.stitch ? 1 : 0);
  w.u32(j.scan_threads);
  w.u32(static_cast<uint32_t>(j.sources.size()));
  for (const auto& s : j.sources) w.str(s);
  w.u64(j.manifest_bytes);
  w.u32(j.rank);
  w.u32(j.worker);
  return std::move(w.out);
}

Result<WorkerJob> decode_job(std::string_view body) {
  ByteReader r(body);
  WorkerJob j;
  if (r.u32() != kWorkerFrameVersion)
    return corrupt("a job frame of another version: run workers of the same build as the trainer");
  j.fingerprint = r.u64();
  j.plan.logical_shards = r.u32();
  j.plan.chunk_items = r.u32();
  j.plan.seed = r.u64();
  j.plan.shuffle = r.flag();
  j.plan.drop_last = r.flag();
  j.plan.distributed_strategy = r.str();
  j.plan.worker_strategy = r.str();
  j.pipeline = r.str();
  j.topology.ranks = r.u32();
  j.topology.workers = r.u32();
  j.batch_size = r.u32();
  j.exact_order = r.flag();
  j.dispatch = r.str();
  j.prefetch_shards = r.u32();
  j.route_key_field = r.str();
  j.max_sample_bytes = r.u64();
  j.read_into_batch_bytes = r.u64();
  j.packet_items = r.u32();
  j.packet_bytes = r.u64();
  j.windows.record_bytes = r.u64();
  j.windows.length = r.u64();
  j.windows.stride = r.u64();
  j.windows.target = r.u64();
  j.windows.stitch = r.flag();
  j.scan_threads = r.u32();
  const uint32_t n = r.u32();
  if (!count_fits(r, n, 4)) return damaged("job");
  for (uint32_t i = 0; i < n; ++i) j.sources.push_back(r.str());
  j.manifest_bytes = r.u64();
  j.rank = r.u32();
  j.worker = r.u32();
  if (!r.done()) return damaged("job");
  return j;
}

std::string encode_unit(const UnitOrder& o) {
  const WorkUnit& u = o.unit;
  ByteWriter w;
  w.u32(u.rank);
  w.u32(u.worker);
  w.u32(u.epoch);
  w.u64(u.epoch_key);
  w.u32(static_cast<uint32_t>(u.shards.size()));
  for (size_t i = 0; i < u.shards.size(); ++i) {
    w.u32(u.shards[i]);
    w.u64(i < u.take.size() ? u.take[i] : 0);
    w.u64(i < u.consumed.size() ? u.consumed[i] : 0);
  }
  w.str(u.channel);
  w.u32(static_cast<uint32_t>(u.stage_states.size()));
  for (const auto& s : u.stage_states) w.str(s);
  w.u8(u.rescaled ? 1 : 0);
  w.str(u.route);
  w.u64(o.skip_below);
  w.u32(o.window);
  return std::move(w.out);
}

Result<UnitOrder> decode_unit(std::string_view body) {
  ByteReader r(body);
  UnitOrder o;
  WorkUnit& u = o.unit;
  u.rank = r.u32();
  u.worker = r.u32();
  u.epoch = r.u32();
  u.epoch_key = r.u64();
  const uint32_t n = r.u32();
  if (!count_fits(r, n, 20)) return damaged("unit");
  for (uint32_t i = 0; i < n; ++i) {
    u.shards.push_back(r.u32());
    u.take.push_back(r.u64());
    u.consumed.push_back(r.u64());
  }
  u.channel = r.str();
  const uint32_t states = r.u32();
  if (!count_fits(r, states, 4)) return damaged("unit");
  for (uint32_t i = 0; i < states; ++i) u.stage_states.push_back(r.str());
  u.rescaled = r.flag();
  u.route = r.str();
  o.skip_below = r.u64();
  o.window = r.u32();
  if (!r.done()) return damaged("unit");
  return o;
}

std::string encode_status(const Status& st) { return io::encode(io::finish_frame(st)); }

bool status_well_formed(std::string_view body) {
  auto f = io::decode_finish(body);
  return f.is_ok() && (f->code != 0 || f->message.empty());
}

Status decode_status(std::string_view body) {
  if (!status_well_formed(body)) return damaged("status");
  SY_ASSIGN_OR_RETURN(io::FinishFrame f, io::decode_finish(body));
  return io::finish_status(f);
}

std::string encode_done(const Result<UnitStats>& r) {
  ByteWriter w;
  w.u64(r.is_ok() ? r->items : 0);
  w.u64(r.is_ok() ? r->bytes : 0);
  return w.out + encode_status(r.status());
}

bool done_well_formed(std::string_view body) {
  return body.size() >= 16 && status_well_formed(body.substr(16));
}

Result<UnitStats> decode_done(std::string_view body) {
  if (!done_well_formed(body)) return damaged("done");
  UnitStats s;
  s.items = load_le(body.data(), 8);
  s.bytes = load_le(body.data() + 8, 8);
  SY_RETURN_IF_ERROR(decode_status(body.substr(16)));
  return s;
}

}  // namespace shardyard::actors
