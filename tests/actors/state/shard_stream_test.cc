// ShardStreams and load_shard (actors/state/shard_stream.h): the items of a unit's logical
// shards in their epoch order, read from real tar shards, resumed at a consumed position.
#include "actors/state/shard_stream.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "io/fs/interface.h"
#include "state_fixture.h"

namespace shardyard::actors {
namespace {

using testing::JobSpec;
using testing::make_test_job;
using testing::shard_order;

// A unit of every logical shard of `job`, whole, from `consumed` items on (epoch 2).
WorkUnit whole_unit(const JobData& job, uint64_t consumed = 0) {
  WorkUnit u;
  u.epoch = 2;
  u.epoch_key = epoch_key(job.plan.seed, 2);
  for (uint32_t j = 0; j < job.shards.count(); ++j) {
    u.shards.push_back(j);
    u.take.push_back(job.shards.size(j));
    u.consumed.push_back(std::min<uint64_t>(consumed, job.shards.size(j)));
  }
  return u;
}

class ShardStreamsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    JobSpec spec;
    spec.plan.shuffle = true;
    spec.plan.seed = 3;
    spec.plan.logical_shards = 6;
    spec.plan.chunk_items = 4;
    job_ = make_test_job(tmp_.path(), spec);
    ASSERT_NE(job_, nullptr);
  }
  WorkUnit unit(uint64_t consumed = 0) const { return whole_unit(*job_, consumed); }

  testing::TempDir tmp_;
  std::shared_ptr<const JobData> job_;
};

TEST_F(ShardStreamsTest, EachShardYieldsItsItemsInTheEpochOrderWithTheirBytes) {
  io::SampleReader reader(*job_->fs, job_->manifest, job_->pool);
  const WorkUnit u = unit();
  ShardStreams streams(*job_, u, reader);
  for (uint32_t k = 0; k < u.shards.size(); ++k) {
    const auto expected = shard_order(*job_, u.shards[k], u.epoch_key);
    ASSERT_EQ(expected.size(), u.take[k]);
    for (uint64_t id : expected) {
      auto item = streams.next(k);
      ASSERT_TRUE(item.is_ok()) << item.status().to_string();
      EXPECT_EQ(item->id, id);
      EXPECT_EQ(item->shard, u.shards[k]);
      auto loc = job_->index.locate(id);
      EXPECT_EQ(item->key, job_->manifest->item_key(loc.source, loc.sample));
      EXPECT_NE(item->field("cls"), nullptr) << item->key;
      EXPECT_GT(item->payload_bytes(), 0u);
    }
    // Past the shard's last item: an error naming the logical shard, not a silent repeat.
    auto past = streams.next(k);
    ASSERT_FALSE(past.is_ok());
    EXPECT_NE(past.status().message().find("logical shard " + std::to_string(u.shards[k])),
              std::string::npos);
  }
}

TEST_F(ShardStreamsTest, AResumedShardStartsAtItsConsumedPositionInsideAChunk) {
  io::SampleReader reader(*job_->fs, job_->manifest, job_->pool);
  for (uint64_t consumed : {1u, 4u, 6u}) {  // inside the first chunk, at a boundary, inside
    const WorkUnit u = unit(consumed);
    ShardStreams streams(*job_, u, reader);
    for (uint32_t k = 0; k < u.shards.size(); ++k) {
      const auto expected = shard_order(*job_, u.shards[k], u.epoch_key);
      for (size_t i = u.consumed[k]; i < expected.size(); ++i) {
        auto item = streams.next(k);
        ASSERT_TRUE(item.is_ok()) << item.status().to_string();
        EXPECT_EQ(item->id, expected[i]) << "consumed " << consumed << ", shard " << k;
      }
    }
  }
}

TEST_F(ShardStreamsTest, LoadShardReadsWhatIsLeftOfOneShardAtOnce) {
  io::SampleReader reader(*job_->fs, job_->manifest, job_->pool);
  const uint64_t key = epoch_key(job_->plan.seed, 2);
  const uint32_t shard = 3;
  const auto expected = shard_order(*job_, shard, key);
  io::SharedShard loaded;
  ASSERT_TRUE(load_shard(*job_, reader, shard, 2, expected.size(), key, &loaded).is_ok());
  ASSERT_EQ(loaded.items.size(), expected.size() - 2);
  for (size_t i = 0; i < loaded.items.size(); ++i) EXPECT_EQ(loaded.items[i].id, expected[i + 2]);
  EXPECT_GT(loaded.bytes, 0u);
}

// The files of a file system, with every will_need() hint they get noted by file; their
// hint_bytes() is what set_hint_bytes() says (0 at first, as for a local file).
class HintsSeen : public io::FileSystemWrapper {
 public:
  using io::FileSystemWrapper::FileSystemWrapper;
  using Range = std::pair<uint64_t, uint64_t>;  // [begin, end) of a file
  Result<std::unique_ptr<io::RandomAccessFile>> open(const std::string& uri) override {
    SY_ASSIGN_OR_RETURN(auto f, target()->open(uri));
    return std::unique_ptr<io::RandomAccessFile>(new File(std::move(f), this));
  }
  std::map<std::string, std::set<uint64_t>> hints() {
    std::lock_guard<std::mutex> lock(mu_);
    std::map<std::string, std::set<uint64_t>> starts;
    for (const auto& [uri, ranges] : hints_)
      for (const auto& r : ranges) starts[uri].insert(r.first);
    return starts;
  }
  // Every hint's range, in the order they came.
  std::map<std::string, std::vector<Range>> ranges() {
    std::lock_guard<std::mutex> lock(mu_);
    return hints_;
  }
  void set_hint_bytes(size_t n) { hint_bytes_ = n; }

 private:
  class File : public io::RandomAccessFile {
   public:
    File(std::unique_ptr<io::RandomAccessFile> f, HintsSeen* fs) : f_(std::move(f)), fs_(fs) {}
    Result<size_t> read_at(uint64_t offset, void* dst, size_t n) override {
      return f_->read_at(offset, dst, n);
    }
    Result<std::shared_ptr<const io::MappedRange>> map(uint64_t offset, size_t n) override {
      return f_->map(offset, n);
    }
    void will_need(uint64_t offset, size_t n) override {
      {
        std::lock_guard<std::mutex> lock(fs_->mu_);
        fs_->hints_[f_->uri()].emplace_back(offset, offset + n);
      }
      f_->will_need(offset, n);
    }
    uint64_t size() const override { return f_->size(); }
    const std::string& uri() const override { return f_->uri(); }
    int64_t version() const override { return f_->version(); }
    size_t hint_bytes() const override { return fs_->hint_bytes_; }

   private:
    std::unique_ptr<io::RandomAccessFile> f_;
    HintsSeen* fs_;
  };
  std::mutex mu_;
  std::map<std::string, std::vector<Range>> hints_;
  std::atomic<size_t> hint_bytes_{0};
};

// The byte ranges of every chunk a stream of the unit's shards reads (JobData::read_items
// items each), by file (a chunk that spans the end of a file and the start of the next has
// a range in each), with the chunk's logical shard and place in the shard's epoch order.
using ChunkRanges = std::map<std::string, std::map<HintsSeen::Range, std::pair<uint32_t, size_t>>>;
ChunkRanges chunk_ranges(const JobData& job, const WorkUnit& u) {
  ChunkRanges out;
  for (uint32_t shard : u.shards) {
    ShardSequence seq(job.shards, shard, job.read_items, job.plan.shuffle, job.manifest->seekable(),
                      u.epoch_key);
    for (size_t i = 0; i < seq.num_chunks(); ++i) {
      for (uint64_t g = seq.chunk_begin(i); g < seq.chunk_end(i);) {
        const auto loc = job.index.locate(g);
        const uint64_t end = std::min(seq.chunk_end(i), job.index.source_end(loc.source));
        const auto& src = job.manifest->sources[loc.source];
        const auto r = src.samples.byte_range(loc.sample, loc.sample + (end - g));
        out[src.uri][{r.begin, r.end}] = {shard, i};
        g = end;
      }
    }
  }
  return out;
}

// Takes the items of the unit from the `from`-th of each shard (none before it taken yet)
// up to the `until`-th (every one by default), a round over its shards at a time (as a
// worker interleaves them), and checks each shard's items against its epoch order.
void read_all(const JobData& job, const WorkUnit& u, ShardStreams& streams, size_t from = 0,
              size_t until = SIZE_MAX) {
  std::vector<std::vector<uint64_t>> expected;
  for (uint32_t k = 0; k < u.shards.size(); ++k)
    expected.push_back(shard_order(job, u.shards[k], u.epoch_key));
  for (size_t i = from; i < until; ++i) {
    bool any = false;
    for (uint32_t k = 0; k < u.shards.size(); ++k) {
      if (i >= expected[k].size()) continue;
      any = true;
      auto item = streams.next(k);
      ASSERT_TRUE(item.is_ok()) << item.status().to_string();
      EXPECT_EQ(item->id, expected[k][i]) << "logical shard " << u.shards[k];
    }
    if (!any) return;
  }
}

TEST_F(ShardStreamsTest, EveryShardSaysWhatItReadsFirstBeforeTheFirstItem) {
  // A unit's first round takes an item of each of its shards: each is told at once where it
  // reads first, so that remote files fetch their first chunks together.
  HintsSeen fs(job_->fs);
  io::SampleReader reader(fs, job_->manifest, job_->pool);
  WorkUnit u = unit();
  // One shard resumed past its first chunk, one with nothing left to take.
  u.consumed[1] = 5;
  u.consumed[2] = u.take[2];
  ShardStreams streams(*job_, u, reader);
  const auto hints = fs.hints();
  auto hinted = [&](uint64_t id) {
    auto loc = job_->index.locate(id);
    const auto& src = job_->manifest->sources[loc.source];
    auto it = hints.find(src.uri);
    return it != hints.end() && it->second.count(src.samples[loc.sample].begin) > 0;
  };
  for (uint32_t k = 0; k < u.shards.size(); ++k) {
    if (u.consumed[k] >= u.take[k]) continue;
    ShardSequence seq(job_->shards, u.shards[k], job_->plan.chunk_items, job_->plan.shuffle,
                      job_->manifest->seekable(), u.epoch_key);
    const auto at = seq.seek(u.consumed[k]);
    EXPECT_TRUE(hinted(seq.chunk_begin(at.chunk))) << "logical shard " << u.shards[k];
  }
  // The shard with nothing left is not read, so it asks for nothing.
  ShardSequence done(job_->shards, u.shards[2], job_->plan.chunk_items, job_->plan.shuffle,
                     job_->manifest->seekable(), u.epoch_key);
  EXPECT_FALSE(hinted(done.chunk_begin(0)));
  // And the items are the same as without the hints.
  for (uint32_t k = 0; k < u.shards.size(); ++k) {
    if (u.consumed[k] >= u.take[k]) continue;
    const auto expected = shard_order(*job_, u.shards[k], u.epoch_key);
    auto item = streams.next(k);
    ASSERT_TRUE(item.is_ok()) << item.status().to_string();
    EXPECT_EQ(item->id, expected[u.consumed[k]]);
  }
}

TEST_F(ShardStreamsTest, TheFirstChunksAreHintedAsFarAsTheReaderKeepsFilesOpen) {
  // A hint opens its file: hinting more files than stay open would close the first ones
  // again before their reads, which would open them twice.
  HintsSeen fs(job_->fs);
  io::SampleReaderOptions o;
  o.max_open_files = 2;
  io::SampleReader reader(fs, job_->manifest, job_->pool, o);
  const WorkUnit u = unit();
  ShardStreams streams(*job_, u, reader);
  EXPECT_EQ(fs.hints().size(), 2u);
  for (uint32_t k = 0; k < u.shards.size(); ++k) {
    const auto expected = shard_order(*job_, u.shards[k], u.epoch_key);
    auto item = streams.next(k);
    ASSERT_TRUE(item.is_ok()) << item.status().to_string();
    EXPECT_EQ(item->id, expected[0]);
  }
}

// Checks the hints against the chunks: each hint is whole chunks of its file that come one
// after another in a shard's epoch order, at most `per_hint` bytes unless it is one chunk;
// every chunk lies inside exactly one hint, so none is fetched twice. Returns the number of
// hints.
size_t check_hints(const ChunkRanges& chunks,
                   const std::map<std::string, std::vector<HintsSeen::Range>>& hinted,
                   uint64_t per_hint) {
  size_t hints = 0, named = 0;
  for (const auto& [uri, ranges] : hinted) {
    const auto& mine = chunks.at(uri);
    named += mine.size();
    for (const auto& h : ranges) {
      ++hints;
      std::vector<std::pair<uint32_t, size_t>> inside;  // in file order
      uint64_t at = h.first;
      for (const auto& [c, place] : mine) {
        if (c.first < h.first || c.second > h.second) continue;
        EXPECT_EQ(c.first, at) << uri << ": a hint at " << h.first << " with a gap";
        at = c.second;
        inside.push_back(place);
      }
      EXPECT_EQ(at, h.second) << uri << ": a hint at " << h.first << " is not whole chunks";
      EXPECT_FALSE(inside.empty()) << uri << ": a hint at " << h.first << " names no chunk";
      if (inside.size() <= 1) continue;
      EXPECT_LE(h.second - h.first, per_hint) << uri << " at " << h.first;
      for (size_t i = 1; i < inside.size(); ++i)
        EXPECT_EQ(inside[i], std::make_pair(inside[0].first, inside[0].second + i))
            << uri << ": a hint at " << h.first << " joins chunks not read one after another";
    }
    for (const auto& [c, place] : mine) {
      int in = 0;
      for (const auto& h : ranges) in += h.first <= c.first && c.second <= h.second;
      EXPECT_EQ(in, 1) << uri << " chunk at " << c.first;
    }
  }
  size_t num_chunks = 0;
  for (const auto& [uri, ranges] : chunks) num_chunks += ranges.size();
  EXPECT_EQ(named, num_chunks) << "a file none of whose chunks was named";
  return hints;
}

// A job of 100 samples in 3 logical shards of 2-sample chunks (or `chunk_items`) over 4
// files, in order (no shuffle), and the chunks of its whole unit: their byte ranges, how
// many, the largest.
struct InOrderUnit {
  testing::TempDir tmp;
  std::shared_ptr<const JobData> job;
  WorkUnit unit;
  ChunkRanges chunks;
  size_t num_chunks = 0;
  uint64_t chunk_bytes = 0;

  explicit InOrderUnit(uint32_t chunk_items = 2) {
    JobSpec spec;
    spec.plan.shuffle = false;
    spec.plan.logical_shards = 3;
    spec.plan.chunk_items = chunk_items;
    job = make_test_job(tmp.path(), spec);
    if (job == nullptr) return;
    unit = whole_unit(*job);
    chunks = chunk_ranges(*job, unit);
    for (const auto& [uri, ranges] : chunks)
      for (const auto& [r, place] : ranges) {
        ++num_chunks;
        chunk_bytes = std::max(chunk_bytes, r.second - r.first);
      }
  }
  // The hints of a pass through the unit where its files want hints of `per_hint` bytes and
  // its shards share `unit_bytes`.
  std::map<std::string, std::vector<HintsSeen::Range>> hints(
      uint64_t per_hint, uint64_t unit_bytes = ShardStreams::kUnitHintBytes) const {
    HintsSeen fs(job->fs);
    fs.set_hint_bytes(per_hint);
    io::SampleReader reader(fs, job->manifest, job->pool);
    ShardStreams streams(*job, unit, reader, nullptr, unit_bytes);
    read_all(*job, unit, streams);
    return fs.ranges();
  }
};

TEST_F(ShardStreamsTest, AFileThatWantsLargerHintsGetsTheChunksThatFollowInOne) {
  // A remote shard fetches a hint with one request: where chunks follow each other in the
  // file (no shuffle), a shard names its next chunks together, as many as the file's
  // hint_bytes() holds (at least one), each chunk once.
  const InOrderUnit t;
  ASSERT_NE(t.job, nullptr);
  for (uint64_t per_hint : {uint64_t{0}, 3 * t.chunk_bytes, 100 * t.chunk_bytes}) {
    const size_t hints = check_hints(t.chunks, t.hints(per_hint), per_hint);
    if (per_hint == 0) {
      EXPECT_EQ(hints, t.num_chunks);
    } else {
      EXPECT_LT(hints, per_hint > 3 * t.chunk_bytes ? t.num_chunks / 4 : t.num_chunks / 2)
          << "hints of " << per_hint << " bytes";
    }
  }
}

TEST(ShardStreamsReads, FewerItemsAtOnceOnlyWhereTheOrderDoesNotDependOnTheChunks) {
  // Without shuffle a shard's order is its items in id order whatever its chunks: a stream
  // reads default_read_items() at a time where a chunk is larger. With shuffle the chunks
  // are the shuffle blocks, and a loaded shard (broadcast) is read whole: both read chunks.
  auto read_items = [](bool shuffle, Dispatch dispatch, uint32_t chunk_items) -> int64_t {
    testing::TempDir tmp;
    JobSpec spec;
    spec.plan.shuffle = shuffle;
    spec.plan.logical_shards = 2;
    spec.plan.chunk_items = chunk_items;
    spec.dispatch = dispatch;
    auto job = make_test_job(tmp.path(), spec);
    if (job == nullptr) return -1;
    EXPECT_EQ(job->plan.chunk_items, chunk_items) << "the plan keeps its chunks";
    return job->read_items;
  };
  testing::TempDir tmp;
  JobSpec spec;
  auto job = make_test_job(tmp.path(), spec);
  ASSERT_NE(job, nullptr);
  const uint32_t pieces = default_read_items(*job->manifest, 2);
  ASSERT_LT(pieces, 5000u);
  EXPECT_EQ(read_items(false, Dispatch::kNone, 5000), int64_t{pieces});
  EXPECT_EQ(read_items(false, Dispatch::kNone, 3), 3) << "never more than a chunk";
  EXPECT_EQ(read_items(true, Dispatch::kNone, 5000), 5000);
  EXPECT_EQ(read_items(false, Dispatch::kBroadcast, 5000), 5000);
}

TEST(JobDefaults, QueuedPacketsSpanOneRoundOfAWorkersReads) {
  // A worker interleaves its logical shards and reads `read_items` of each at a time, so
  // every read_items rounds its items come at the cost of a read each: in exact order its
  // queue holds the packets of one such round, 1 to 3.
  struct Case {
    const char* what;
    int samples, bytes;
    bool shuffle, exact;
    uint32_t chunk_items, workers;
    Dispatch dispatch;
    uint32_t expected;
  };
  const Case cases[] = {
      // 4 logical shards, one worker: a round is 4 x read_items items; packets of 128.
      {"shuffled chunks of 10: 40 items a round", 200, 100, true, true, 10, 1, Dispatch::kNone, 1},
      {"shuffled chunks of 40: 160 items", 200, 100, true, true, 40, 1, Dispatch::kNone, 2},
      {"shuffled chunks of 100: 400 items, at most 3", 200, 100, true, true, 100, 1,
       Dispatch::kNone, 3},
      {"two workers: 2 x 40 items", 200, 100, true, true, 40, 2, Dispatch::kNone, 1},
      {"in order, pieces of 3 items", 200, 100, false, true, 3, 1, Dispatch::kNone, 1},
      // Packets of 100 KiB samples end at 4 MiB: 41 items.
      {"100 KiB samples, chunks of 12: 48 items", 25, 100 << 10, true, true, 12, 1, Dispatch::kNone,
       2},
      {"100 KiB samples, chunks of 10: 40 items", 25, 100 << 10, true, true, 10, 1, Dispatch::kNone,
       1},
      {"any order: nothing waits for a lagging worker", 200, 100, true, false, 100, 1,
       Dispatch::kNone, 1},
      {"a dispatcher's routes", 200, 100, false, true, 3, 1, Dispatch::kRoundRobin, 3},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    testing::TempDir tmp;
    JobSpec spec;
    spec.samples = c.samples;
    spec.bytes = c.bytes;
    spec.topology = Topology{1, c.workers};
    spec.plan.shuffle = c.shuffle;
    spec.plan.logical_shards = 4;
    spec.plan.chunk_items = c.chunk_items;
    spec.exact_order = c.exact;
    spec.dispatch = c.dispatch;
    auto job = make_test_job(tmp.path(), spec);
    ASSERT_NE(job, nullptr);
    if (!c.shuffle && c.dispatch == Dispatch::kNone) {
      ASSERT_EQ(job->read_items, c.chunk_items);
    }
    EXPECT_EQ(job->default_prefetch_packets(), c.expected);
  }
}

TEST_F(ShardStreamsTest, WithoutShuffleAStreamReadsInPiecesSmallerThanAChunk) {
  // The same items in the same order as chunk by chunk, each piece named and read once,
  // and a resumed shard starts inside a piece.
  const InOrderUnit t(8);
  ASSERT_NE(t.job, nullptr);
  ASSERT_EQ(t.job->read_items, 8u) << "this small set's default pieces hold more than a chunk";
  JobData job = *t.job;
  job.read_items = 3;
  const ChunkRanges pieces = chunk_ranges(job, t.unit);
  size_t num_pieces = 0;
  for (const auto& [uri, ranges] : pieces) num_pieces += ranges.size();
  EXPECT_GE(num_pieces, 2 * t.num_chunks);
  HintsSeen fs(job.fs);
  {
    io::SampleReader reader(fs, job.manifest, job.pool);
    ShardStreams streams(job, t.unit, reader);
    read_all(job, t.unit, streams);
  }
  EXPECT_EQ(check_hints(pieces, fs.ranges(), 0), num_pieces);
  const WorkUnit resumed = whole_unit(job, 4);  // inside the second piece of each shard
  io::SampleReader reader(*job.fs, job.manifest, job.pool);
  ShardStreams streams(job, resumed, reader);
  read_all(job, resumed, streams, 4);
}

TEST_F(ShardStreamsTest, TheHintsOfAUnitsShardsShareOneBound) {
  // However large the hints a file wants, a unit's shards together name at most the unit's
  // bound (ShardStreams::kUnitHintBytes; smaller here): each shard's hint stays within its
  // share of it, and still names whole chunks, at least one.
  const InOrderUnit t;
  ASSERT_NE(t.job, nullptr);
  const uint64_t per_hint = 100 * t.chunk_bytes;
  const size_t shards = t.unit.shards.size();
  // Only the file's size binds by default (these shards are small).
  const size_t by_file = check_hints(t.chunks, t.hints(per_hint), per_hint);
  // A share of 3 chunks per shard.
  const uint64_t share = 3 * t.chunk_bytes;
  const size_t shared = check_hints(t.chunks, t.hints(per_hint, shards * share), share);
  EXPECT_GT(shared, by_file);
  EXPECT_LT(shared, t.num_chunks / 2) << "chunks that follow each other are still named together";
  // A share smaller than a chunk: each chunk alone.
  const uint64_t small = t.chunk_bytes / 4;
  EXPECT_EQ(check_hints(t.chunks, t.hints(per_hint, shards * small), small), t.num_chunks);
}

TEST_F(ShardStreamsTest, ChunksInAShuffledOrderAreNamedTogetherOnlyWhereTheyFollowInTheFile) {
  // Chunks in a shuffled order mostly do not follow each other in the file: those are named
  // alone, whatever the file's hint_bytes(), and those that do (check_hints) together.
  const WorkUnit u = unit();
  const auto chunks = chunk_ranges(*job_, u);
  size_t num_chunks = 0;
  for (const auto& [uri, ranges] : chunks) num_chunks += ranges.size();
  for (size_t per_hint : {size_t{0}, size_t{1} << 20}) {
    HintsSeen fs(job_->fs);
    fs.set_hint_bytes(per_hint);
    io::SampleReader reader(fs, job_->manifest, job_->pool);
    ShardStreams streams(*job_, u, reader);
    // After a first item of each shard: its first chunk and the next are named, not more.
    read_all(*job_, u, streams, 0, 1);
    size_t early = 0;
    for (const auto& [uri, ranges] : fs.ranges()) early += ranges.size();
    EXPECT_LE(early, 2 * u.shards.size() + 4) << "hint_bytes " << per_hint;
    read_all(*job_, u, streams, 1);
    const size_t hints = check_hints(chunks, fs.ranges(), per_hint);
    if (per_hint == 0) {
      EXPECT_EQ(hints, num_chunks);
    } else {
      EXPECT_GT(hints, num_chunks / 2);
    }
  }
}

}  // namespace
}  // namespace shardyard::actors
