// ShardStreams and load_shard (actors/state/shard_stream.h): the items of a unit's logical
// shards in their epoch order, read from real tar shards, resumed at a consumed position.
#include "actors/state/shard_stream.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <set>

#include "io/fs/interface.h"
#include "state_fixture.h"

namespace shardyard::actors {
namespace {

using testing::JobSpec;
using testing::make_test_job;
using testing::shard_order;

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
  // A unit of every logical shard, whole, from `consumed` items on.
  WorkUnit unit(uint64_t consumed = 0) const {
    WorkUnit u;
    u.epoch = 2;
    u.epoch_key = epoch_key(job_->plan.seed, 2);
    for (uint32_t j = 0; j < job_->shards.count(); ++j) {
      u.shards.push_back(j);
      u.take.push_back(job_->shards.size(j));
      u.consumed.push_back(std::min<uint64_t>(consumed, job_->shards.size(j)));
    }
    return u;
  }

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

// The files of a file system, with every will_need() hint they get noted by file.
class HintsSeen : public io::FileSystemWrapper {
 public:
  using io::FileSystemWrapper::FileSystemWrapper;
  Result<std::unique_ptr<io::RandomAccessFile>> open(const std::string& uri) override {
    SY_ASSIGN_OR_RETURN(auto f, target()->open(uri));
    return std::unique_ptr<io::RandomAccessFile>(new File(std::move(f), this));
  }
  std::map<std::string, std::set<uint64_t>> hints() {
    std::lock_guard<std::mutex> lock(mu_);
    return hints_;
  }

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
        fs_->hints_[f_->uri()].insert(offset);
      }
      f_->will_need(offset, n);
    }
    uint64_t size() const override { return f_->size(); }
    const std::string& uri() const override { return f_->uri(); }
    int64_t version() const override { return f_->version(); }

   private:
    std::unique_ptr<io::RandomAccessFile> f_;
    HintsSeen* fs_;
  };
  std::mutex mu_;
  std::map<std::string, std::set<uint64_t>> hints_;
};

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

}  // namespace
}  // namespace shardyard::actors
