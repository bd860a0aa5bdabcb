#include "actors/state/shard_stream.h"

#include <algorithm>

namespace shardyard::actors {

namespace {
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

Status read_chunk(const JobData& job, io::SampleReader& reader, const ShardSequence& seq,
                  size_t chunk, std::vector<Item>* out) {
  out->clear();
  return for_each_run(job, seq, chunk,
                      [&](uint32_t source, uint64_t first, uint64_t last, uint64_t id) {
                        return reader.read(source, first, last, id, out);
                      });
}

// The shard's epoch order in pieces of `chunk_items`: the plan's chunks, or for a stream
// JobData::read_items (the same order where that differs: without shuffle).
ShardSequence sequence_of(const JobData& job, uint32_t shard, uint64_t key, uint32_t chunk_items) {
  return ShardSequence(job.shards, shard, chunk_items, job.plan.shuffle, job.manifest->seekable(),
                       key);
}
}  // namespace

ShardStreams::ShardStreams(const JobData& job, const WorkUnit& unit, io::SampleReader& reader,
                           RoleStats* stats, uint64_t unit_hint_bytes)
    : job_(job), unit_(unit), reader_(reader), stats_(stats), unit_hint_bytes_(unit_hint_bytes) {
  cursors_.reserve(unit.shards.size());
  for (size_t k = 0; k < unit.shards.size(); ++k) {
    ShardSequence seq = sequence_of(job, unit.shards[k], unit.epoch_key, job.read_items);
    const uint64_t consumed = k < unit.consumed.size() ? unit.consumed[k] : 0;
    auto at = seq.seek(consumed);
    cursors_.push_back(Cursor{std::move(seq), at.chunk, {}, {}, 0, at.offset});
  }
  // Every shard with items left gives one in the unit's first round (InterleaveCursor): say
  // now what each reads first, so that remote files fetch their first chunks together
  // instead of one after another as the round reaches them. As far as the reader keeps
  // files open: a hint opens its file, and a file closed again before its read would be
  // opened twice.
  std::vector<uint32_t> sources;
  for (size_t k = 0; k < cursors_.size(); ++k) {
    const Cursor& c = cursors_[k];
    const uint64_t take = k < unit.take.size() ? unit.take[k] : 0;
    const uint64_t consumed = k < unit.consumed.size() ? unit.consumed[k] : 0;
    if (consumed >= take || c.next_chunk >= c.seq.num_chunks()) continue;
    const Status room = for_each_run(
        job_, c.seq, c.next_chunk, [&](uint32_t source, uint64_t first, uint64_t last, uint64_t) {
          if (std::find(sources.begin(), sources.end(), source) == sources.end()) {
            if (sources.size() == reader_.max_open_files())
              return cancelled("the reader keeps no more files open");
            sources.push_back(source);
          }
          reader_.will_need(source, first, last);
          return Status::ok();
        });
    if (!room.is_ok()) break;
    cursors_[k].named = c.next_chunk + 1;
  }
}

void ShardStreams::name_ahead(Cursor& c) {
  const size_t n = c.seq.num_chunks();
  if (c.next_chunk < c.named || c.next_chunk >= n) return;
  // The next chunk, and where the file wants larger hints (a remote tar shard: one request
  // per hint) the chunks after it, as far as each follows the one before in the file (not
  // where chunks are shuffled) and the hint stays within the file's hint_bytes(). A shard
  // holds up to about two hints' bytes in fetched blocks (the one its items use and the
  // next), so the hints of all the unit's shards together stay within unit_hint_bytes_.
  const uint64_t share = unit_hint_bytes_ / cursors_.size();
  uint64_t budget = 0, bytes = 0;
  size_t i = c.next_chunk;
  for (; i < n; ++i) {
    if (i > c.next_chunk && c.seq.chunk_begin(i) != c.seq.chunk_end(i - 1)) break;
    const size_t before = runs_.size();
    uint64_t more = 0;
    (void)for_each_run(job_, c.seq, i,
                       [&](uint32_t source, uint64_t first, uint64_t last, uint64_t) {
                         if (runs_.empty()) budget = std::min(reader_.hint_bytes(source), share);
                         runs_.push_back({source, first, last});
                         if (budget > 0) more += reader_.tar_bytes(source, first, last);
                         return Status::ok();
                       });
    if (i > c.next_chunk && (budget == 0 || bytes + more > budget)) {
      runs_.resize(before);
      break;
    }
    bytes += more;
  }
  c.named = i;
  // One hint per range of a file: runs of consecutive chunks that follow each other join.
  for (size_t r = 0; r < runs_.size();) {
    Run joined = runs_[r];
    for (++r; r < runs_.size() && runs_[r].source == joined.source && runs_[r].first == joined.last;
         ++r)
      joined.last = runs_[r].last;
    reader_.will_need(joined.source, joined.first, joined.last);
  }
  runs_.clear();
}

Result<Item> ShardStreams::next(uint32_t k) {
  auto& c = cursors_[k];
  if (c.pos == c.perm.size()) {  // read the shard's next chunk
    if (c.next_chunk >= c.seq.num_chunks())
      return internal_error("logical shard " + std::to_string(unit_.shards[k]) +
                            " has no item left");
    {
      WaitScope reading(stats_, true);
      SY_RETURN_IF_ERROR(read_chunk(job_, reader_, c.seq, c.next_chunk, &c.items));
    }
    c.perm = c.seq.chunk_permutation(c.next_chunk);
    c.pos = c.skip;
    c.skip = 0;
    ++c.next_chunk;
    // Say what this shard reads next, so that a remote file fetches it (and a next shard
    // is opened) while this chunk's items are emitted.
    name_ahead(c);
  }
  Item item = std::move(c.items[c.perm[c.pos++]]);
  item.shard = unit_.shards[k];
  return item;
}

Status load_shard(const JobData& job, io::SampleReader& reader, uint32_t shard, uint64_t consumed,
                  uint64_t take, uint64_t key, io::SharedShard* out) {
  ShardSequence seq = sequence_of(job, shard, key, job.plan.chunk_items);
  auto at = seq.seek(consumed);
  out->shard = shard;
  out->items.clear();
  out->items.reserve(take - std::min(take, consumed));
  const uint64_t before = reader.bytes_read();
  std::vector<Item> chunk;
  uint64_t left = take - std::min(take, consumed);
  for (size_t i = at.chunk; i < seq.num_chunks() && left > 0; ++i) {
    SY_RETURN_IF_ERROR(read_chunk(job, reader, seq, i, &chunk));
    auto perm = seq.chunk_permutation(i);
    for (size_t p = i == at.chunk ? at.offset : 0; p < perm.size() && left > 0; ++p, --left) {
      out->items.push_back(std::move(chunk[perm[p]]));
      out->items.back().shard = shard;
    }
  }
  if (left > 0)
    return internal_error("logical shard " + std::to_string(shard) + " ran out " +
                          std::to_string(left) + " items early");
  out->bytes = reader.bytes_read() - before;
  return Status::ok();
}

}  // namespace shardyard::actors
