#include "runtime/checkpoint.h"

#include "runtime/codec.h"
#include "runtime/hash.h"

namespace shardyard {

// ---- layout ------------------------------------------------------------------------------
// Both files are envelopes (runtime/codec.h); str = u32 length + bytes, b = u8 0/1.
// Rank file, magic "SYCKRNK\0", body:
//   u64 generation | u32 rank | u64 fingerprint | u32 epoch | u64 step |
//   u64 layout_offset | u64 layout_items |
//   u32 num_shards | per shard: u32 shard | u64 take | u64 consumed |
//   u32 num_workers | per worker: str state
// Manifest (CHECKPOINT), magic "SYCKPT\0\0", body:
//   u64 generation | i64 created_unix_ms |
//   job: u64 fingerprint | u64 num_items | u32 L | u32 chunk_items | u64 seed | b shuffle |
//        b drop_last | str distributed_strategy | str worker_strategy |
//   topology: u32 ranks | u32 workers | u32 batch_size | b exact_order |
//   u32 epoch | u64 step | u64 steps | u64 layout_step0 | b epoch_complete |
//   u32 num_ranks | per rank: u32 rank | str file name | u64 size | u64 checksum

namespace {
constexpr char kRankMagic[8] = {'S', 'Y', 'C', 'K', 'R', 'N', 'K', '\0'};
constexpr char kManifestMagic[8] = {'S', 'Y', 'C', 'K', 'P', 'T', '\0', '\0'};
constexpr uint64_t kMinShardBytes = 4 + 8 + 8;
constexpr uint64_t kMinStrBytes = 4;
constexpr uint64_t kMinRankRefBytes = 4 + 4 + 8 + 8;
}  // namespace

Status check_same_job(const CheckpointJob& saved, const CheckpointJob& now) {
  auto differ = [](const std::string& what, const std::string& a, const std::string& b) {
    return invalid_argument("the checkpoint belongs to another job: " + what + " is " + a +
                            " in the checkpoint and " + b + " now");
  };
  if (saved.fingerprint != now.fingerprint || saved.num_items != now.num_items)
    return invalid_argument("the checkpoint belongs to another dataset (manifest fingerprint " +
                            std::to_string(saved.fingerprint) + " with " +
                            std::to_string(saved.num_items) + " samples; this dataset has " +
                            std::to_string(now.fingerprint) + " with " +
                            std::to_string(now.num_items) + ")");
  if (saved.logical_shards != now.logical_shards)
    return differ("the number of logical shards", std::to_string(saved.logical_shards),
                  std::to_string(now.logical_shards));
  if (saved.chunk_items != now.chunk_items)
    return differ("the shuffle block (chunk items)", std::to_string(saved.chunk_items),
                  std::to_string(now.chunk_items) +
                      " (broadcast dispatch takes a whole logical shard as its block unless "
                      "the chunk size is given: give the same one to both runs)");
  if (saved.seed != now.seed)
    return differ("the seed", std::to_string(saved.seed), std::to_string(now.seed));
  if (saved.shuffle != now.shuffle)
    return differ("shuffle", saved.shuffle ? "on" : "off", now.shuffle ? "on" : "off");
  if (saved.drop_last != now.drop_last)
    return differ("drop_last", saved.drop_last ? "on" : "off", now.drop_last ? "on" : "off");
  if (saved.distributed_strategy != now.distributed_strategy)
    return differ("the distributed strategy", saved.distributed_strategy, now.distributed_strategy);
  if (saved.worker_strategy != now.worker_strategy)
    return differ("the worker strategy", saved.worker_strategy, now.worker_strategy);
  return Status::ok();
}

std::string encode_rank_checkpoint(const RankCheckpoint& c) {
  ByteWriter w;
  w.u64(c.generation);
  w.u32(c.rank);
  w.u64(c.fingerprint);
  w.u32(c.epoch);
  w.u64(c.step);
  w.u64(c.layout_offset);
  w.u64(c.layout_items);
  w.u32(static_cast<uint32_t>(c.shards.size()));
  for (const auto& s : c.shards) {
    w.u32(s.shard);
    w.u64(s.take);
    w.u64(s.consumed);
  }
  w.u32(static_cast<uint32_t>(c.worker_states.size()));
  for (const auto& s : c.worker_states) w.str(s);
  w.str(c.dispatcher_state);
  w.str(c.loader_state);
  return seal(kRankMagic, kCheckpointFormatVersion, w.out);
}

Result<RankCheckpoint> decode_rank_checkpoint(std::string_view bytes, const std::string& name) {
  SY_ASSIGN_OR_RETURN(auto env, open_envelope(bytes, kRankMagic, kCheckpointFormatVersion,
                                              "checkpoint rank file", name));
  ByteReader r(env.body);
  RankCheckpoint c;
  c.generation = r.u64();
  c.rank = r.u32();
  c.fingerprint = r.u64();
  c.epoch = r.u32();
  c.step = r.u64();
  c.layout_offset = r.u64();
  c.layout_items = r.u64();
  uint64_t n = r.u32();
  if (n > r.left() / kMinShardBytes) return corrupt(name + ": shard count is implausible");
  c.shards.resize(n);
  for (auto& s : c.shards) {
    s.shard = r.u32();
    s.take = r.u64();
    s.consumed = r.u64();
  }
  n = r.u32();
  if (n > r.left() / kMinStrBytes) return corrupt(name + ": worker count is implausible");
  c.worker_states.resize(n);
  for (auto& s : c.worker_states) s = r.str();
  if (env.version >= 2) {
    c.dispatcher_state = r.str();
    c.loader_state = r.str();
  }
  if (!r.done()) return corrupt(name + ": checkpoint rank file body is malformed");
  return c;
}

std::string encode_checkpoint_manifest(const CheckpointManifest& m) {
  ByteWriter w;
  w.u64(m.generation);
  w.u64(static_cast<uint64_t>(m.created_unix_ms));
  w.u64(m.job.fingerprint);
  w.u64(m.job.num_items);
  w.u32(m.job.logical_shards);
  w.u32(m.job.chunk_items);
  w.u64(m.job.seed);
  w.u8(m.job.shuffle);
  w.u8(m.job.drop_last);
  w.str(m.job.distributed_strategy);
  w.str(m.job.worker_strategy);
  w.u32(m.topology.ranks);
  w.u32(m.topology.workers);
  w.u32(m.topology.batch_size);
  w.u8(m.topology.exact_order);
  w.u32(m.epoch);
  w.u64(m.step);
  w.u64(m.steps);
  w.u64(m.layout_step0);
  w.u8(m.epoch_complete);
  w.u32(static_cast<uint32_t>(m.ranks.size()));
  for (const auto& f : m.ranks) {
    w.u32(f.rank);
    w.str(f.name);
    w.u64(f.size);
    w.u64(f.checksum);
  }
  return seal(kManifestMagic, kCheckpointManifestFormatVersion, w.out);
}

Result<CheckpointManifest> decode_checkpoint_manifest(std::string_view bytes,
                                                      const std::string& name) {
  SY_ASSIGN_OR_RETURN(auto env,
                      open_envelope(bytes, kManifestMagic, kCheckpointManifestFormatVersion,
                                    "checkpoint manifest", name));
  ByteReader r(env.body);
  CheckpointManifest m;
  m.generation = r.u64();
  m.created_unix_ms = static_cast<int64_t>(r.u64());
  m.job.fingerprint = r.u64();
  m.job.num_items = r.u64();
  m.job.logical_shards = r.u32();
  m.job.chunk_items = r.u32();
  m.job.seed = r.u64();
  m.job.shuffle = r.flag();
  m.job.drop_last = r.flag();
  m.job.distributed_strategy = r.str();
  m.job.worker_strategy = r.str();
  m.topology.ranks = r.u32();
  m.topology.workers = r.u32();
  m.topology.batch_size = r.u32();
  m.topology.exact_order = r.flag();
  m.epoch = r.u32();
  m.step = r.u64();
  m.steps = r.u64();
  m.layout_step0 = r.u64();
  m.epoch_complete = r.flag();
  uint64_t n = r.u32();
  if (n > r.left() / kMinRankRefBytes) return corrupt(name + ": rank count is implausible");
  m.ranks.resize(n);
  for (auto& f : m.ranks) {
    f.rank = r.u32();
    f.name = r.str();
    f.size = r.u64();
    f.checksum = r.u64();
  }
  if (!r.done()) return corrupt(name + ": checkpoint manifest body is malformed");
  if (m.topology.ranks == 0 || m.topology.workers == 0 || m.topology.batch_size == 0 ||
      m.job.logical_shards == 0)
    return corrupt(name + ": checkpoint manifest has an empty topology or no logical shard");
  return m;
}

Result<Checkpoint> Checkpoint::assemble(CheckpointManifest manifest,
                                        std::vector<RankCheckpoint> ranks) {
  const auto& m = manifest;
  if (ranks.size() != m.topology.ranks)
    return corrupt("checkpoint has " + std::to_string(ranks.size()) + " rank files for " +
                   std::to_string(m.topology.ranks) + " ranks");
  std::vector<bool> seen(m.job.logical_shards, false);
  for (uint32_t r = 0; r < ranks.size(); ++r) {
    const auto& c = ranks[r];
    const std::string who = "checkpoint rank file of rank " + std::to_string(r);
    if (c.rank != r || c.generation != m.generation)
      return corrupt(who + " is of rank " + std::to_string(c.rank) + ", generation " +
                     std::to_string(c.generation) + "; CHECKPOINT names generation " +
                     std::to_string(m.generation));
    if (c.fingerprint != m.job.fingerprint || c.epoch != m.epoch || c.step != m.step)
      return corrupt(who + " is of another cut (epoch " + std::to_string(c.epoch) + " step " +
                     std::to_string(c.step) + "; CHECKPOINT: epoch " + std::to_string(m.epoch) +
                     " step " + std::to_string(m.step) + ")");
    if (c.worker_states.size() != m.topology.workers)
      return corrupt(who + " has state for " + std::to_string(c.worker_states.size()) +
                     " workers, not " + std::to_string(m.topology.workers));
    for (const auto& s : c.shards) {
      if (s.shard >= seen.size() || seen[s.shard] || s.consumed > s.take)
        return corrupt(who + " lists logical shard " + std::to_string(s.shard) +
                       " out of range, twice, or consumed past its take");
      seen[s.shard] = true;
    }
  }
  for (uint32_t j = 0; j < seen.size(); ++j)
    if (!seen[j])
      return corrupt("checkpoint has no progress for logical shard " + std::to_string(j));
  Checkpoint c;
  c.manifest = std::move(manifest);
  c.ranks = std::move(ranks);
  return c;
}

EpochCursor Checkpoint::cursor() const {
  const auto& m = manifest;
  EpochCursor c;
  c.epoch = m.epoch;
  c.step = m.step;
  c.take.assign(m.job.logical_shards, 0);
  c.consumed.assign(m.job.logical_shards, 0);
  c.ranks = m.topology.ranks;
  c.batch_size = m.topology.batch_size;
  c.steps = m.steps;
  c.layout_step0 = m.layout_step0;
  for (const auto& r : ranks) {
    for (const auto& s : r.shards) {
      c.take[s.shard] = s.take;
      c.consumed[s.shard] = s.consumed;
    }
    c.layout_offset.push_back(r.layout_offset);
    c.layout_items.push_back(r.layout_items);
  }
  return c;
}

std::vector<std::string> Checkpoint::worker_states() const {
  std::vector<std::string> out;
  for (const auto& r : ranks) out.insert(out.end(), r.worker_states.begin(), r.worker_states.end());
  return out;
}

Result<Checkpoint> decode_checkpoint(std::string_view manifest_bytes,
                                     const std::vector<std::string>& rank_files,
                                     const std::string& dir) {
  const std::string manifest_name = dir + "/" + kCheckpointManifestName;
  SY_ASSIGN_OR_RETURN(auto manifest, decode_checkpoint_manifest(manifest_bytes, manifest_name));
  if (rank_files.size() != manifest.ranks.size())
    return corrupt("checkpoint in " + dir + " names " + std::to_string(manifest.ranks.size()) +
                   " rank files; " + std::to_string(rank_files.size()) + " were read");
  std::vector<RankCheckpoint> ranks(manifest.ranks.size());
  for (const auto& ref : manifest.ranks) {
    if (ref.rank >= ranks.size())
      return corrupt(manifest_name + " names rank " + std::to_string(ref.rank) + " out of range");
    const std::string path = dir + "/" + ref.name;
    const std::string& file = rank_files[ref.rank];
    if (file.size() != ref.size)
      return corrupt(path + ": checkpoint rank file is truncated or grown (" +
                     std::to_string(file.size()) + " bytes, " + std::to_string(ref.size) +
                     " expected)");
    if (file_checksum(file) != ref.checksum)
      return corrupt(path + ": checkpoint rank file checksum mismatch (the file is damaged)");
    SY_ASSIGN_OR_RETURN(ranks[ref.rank], decode_rank_checkpoint(file, path));
  }
  return Checkpoint::assemble(std::move(manifest), std::move(ranks));
}

std::string encode_stage_states(const std::vector<std::string>& states) {
  ByteWriter w;
  w.u32(static_cast<uint32_t>(states.size()));
  for (const auto& s : states) w.str(s);
  return std::move(w.out);
}

Result<std::vector<std::string>> decode_stage_states(std::string_view bytes) {
  ByteReader r(bytes);
  uint64_t n = r.u32();
  if (n > r.left() / kMinStrBytes) return corrupt("saved stage state is malformed");
  std::vector<std::string> out(n);
  for (auto& s : out) s = r.str();
  if (!r.done()) return corrupt("saved stage state is malformed");
  return out;
}

namespace {
constexpr char kStateMagic[8] = {'S', 'Y', 'C', 'K', 'S', 'T', 'A', 'T'};
constexpr uint32_t kStateFormatVersion = 1;
}  // namespace

std::string encode_checkpoint_state(const CheckpointState& state) {
  ByteWriter w;
  w.str(state.manifest);
  w.u32(static_cast<uint32_t>(state.rank_files.size()));
  for (const auto& f : state.rank_files) w.str(f);
  return seal(kStateMagic, kStateFormatVersion, w.out);
}

Result<CheckpointState> decode_checkpoint_state(std::string_view bytes) {
  SY_ASSIGN_OR_RETURN(auto env, open_envelope(bytes, kStateMagic, kStateFormatVersion,
                                              "loader state", "the loader state"));
  ByteReader r(env.body);
  CheckpointState state;
  state.manifest = r.str();
  const uint64_t n = r.u32();
  if (n > r.left() / kMinStrBytes) return corrupt("the loader state is malformed");
  state.rank_files.resize(n);
  for (auto& f : state.rank_files) f = r.str();
  if (!r.done()) return corrupt("the loader state is malformed");
  return state;
}

uint64_t file_checksum(std::string_view bytes) {
  Hasher h;
  h.add(bytes);
  return h.digest();
}

}  // namespace shardyard
