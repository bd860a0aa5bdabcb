// Checkpoints through the real actors: save at a step, restore in a new cluster, and what
// the cut holds (stage state as of the trainer's consumption, reads on resume).
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <caf/actor_system_config.hpp>

#include "actors/loader.h"
#include "io/fs/file_system.h"
#include "io/persist/checkpoint_store.h"
#include "io/transport/data_plane.h"
#include "testdata.h"

namespace shardyard {
namespace {

// Counts items this worker processed in the epoch and writes the count into field "seen".
// Its state is the count; after a rescale it starts from the sum of all saved counts.
class CountSeen : public Stage {
 public:
  Status process(Item& item, StageContext&) override {
    item.set_field("seen", std::to_string(++count_));
    return Status::ok();
  }
  bool has_state() const override { return true; }
  std::string save_state() const override { return std::to_string(count_); }
  Status restore_state(const std::vector<std::string>& saved, bool rescaled) override {
    if (!rescaled && saved.size() != 1)
      return invalid_argument("expected one saved state, got " + std::to_string(saved.size()));
    count_ = 0;
    for (const auto& s : saved) count_ += std::stoull(s);
    return Status::ok();
  }

 private:
  uint64_t count_ = 0;
};

// The local file system, counting the bytes read and the files written (checkpoints).
class CountingFileSystem : public FileSystemWrapper {
 public:
  CountingFileSystem() : FileSystemWrapper(&io::local_file_system()) {}
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> writes{0};
  Result<std::unique_ptr<RandomAccessFile>> open(const std::string& uri) override {
    SY_ASSIGN_OR_RETURN(auto f, target()->open(uri));
    return std::unique_ptr<RandomAccessFile>(new File(std::move(f), &bytes));
  }
  Result<std::unique_ptr<WritableFile>> new_writable_file(const std::string& uri) override {
    ++writes;
    return target()->new_writable_file(uri);
  }

 private:
  class File : public RandomAccessFile {
   public:
    File(std::unique_ptr<RandomAccessFile> f, std::atomic<uint64_t>* bytes)
        : f_(std::move(f)), bytes_(bytes) {}
    Result<size_t> read_at(uint64_t offset, void* dst, size_t n) override {
      SY_ASSIGN_OR_RETURN(size_t got, f_->read_at(offset, dst, n));
      *bytes_ += got;
      return got;
    }
    uint64_t size() const override { return f_->size(); }
    const std::string& uri() const override { return f_->uri(); }

   private:
    std::unique_ptr<RandomAccessFile> f_;
    std::atomic<uint64_t>* bytes_;
  };
};

struct Step {
  uint64_t step;
  std::vector<std::string> keys;
  std::vector<std::string> seen;
};

class CheckpointClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static bool registered = [] {
      return StageRegistry::global()
          .add("count_seen",
               [](const StageParams&) -> Result<std::unique_ptr<Stage>> {
                 return std::unique_ptr<Stage>(new CountSeen());
               })
          .is_ok();
    }();
    ASSERT_TRUE(registered);
    pattern_ = testing::make_dataset(tmp_.path() + "/d", 5, 30, 200, 7);
    ASSERT_FALSE(pattern_.empty());
    opt_.sources = {pattern_};
    opt_.workers = 2;
    opt_.batch_size = 5;
    opt_.plan.shuffle = true;
    opt_.plan.seed = 21;
    opt_.plan.chunk_items = 4;
    opt_.prefetch_batches = 3;  // workers and collators run well ahead of the trainer
    opt_.prefetch_eager = true;
    opt_.cache_dir = tmp_.path() + "/cache";
    ckpt_ = tmp_.path() + "/ckpt";
  }

  // Runs up to `steps` batches (all when 0) of `epoch`; saves afterwards when asked.
  static std::vector<Step> take(Loader& l, size_t steps, Status* error = nullptr) {
    std::vector<Step> out;
    while (steps == 0 || out.size() < steps) {
      auto b = l.next();
      if (!b.is_ok()) {
        if (error) *error = b.status();
        break;
      }
      if (!b->has_value()) break;
      const Batch& batch = **b;
      Step s{batch.step(), batch.keys(), {}};
      const Column* seen = batch.field("seen");
      for (size_t i = 0; seen && i < batch.size(); ++i) s.seen.emplace_back(seen->value(i));
      out.push_back(std::move(s));
    }
    return out;
  }

  testing::TempDir tmp_;
  std::string pattern_, ckpt_;
  LoaderOptions opt_;
};

TEST_F(CheckpointClusterTest, StatefulStageResumesFromWhatTheTrainerConsumed) {
  opt_.pipeline.map("count_seen");
  std::vector<Step> full;
  {
    auto l = Loader::open(opt_);
    ASSERT_TRUE(l.is_ok()) << l.status().to_string();
    ASSERT_TRUE((*l)->start_epoch(0).is_ok());
    full = take(**l, 0);
  }
  const size_t cut = 7;
  std::vector<Step> before, after;
  {
    auto l = Loader::open(opt_);
    ASSERT_TRUE(l.is_ok());
    ASSERT_TRUE((*l)->start_epoch(0).is_ok());
    before = take(**l, cut);
    // Let the workers and collators run ahead before the cut is taken.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    Status st = (*l)->save(ckpt_);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
  }
  {
    opt_.workers = 2;
    auto l = Loader::open(opt_);
    ASSERT_TRUE(l.is_ok());
    auto point = (*l)->restore(ckpt_);
    ASSERT_TRUE(point.is_ok()) << point.status().to_string();
    EXPECT_EQ(point->epoch, 0u);
    EXPECT_EQ(point->step, cut);
    EXPECT_FALSE(point->rescaled);
    ASSERT_TRUE((*l)->start_epoch(point->epoch).is_ok());
    after = take(**l, 0);
  }
  ASSERT_EQ(before.size() + after.size(), full.size());
  for (size_t i = 0; i < full.size(); ++i) {
    const Step& got = i < cut ? before[i] : after[i - cut];
    EXPECT_EQ(got.step, full[i].step);
    EXPECT_EQ(got.keys, full[i].keys) << "step " << i;
    EXPECT_EQ(got.seen, full[i].seen) << "step " << i << ": stage state resumed wrongly";
  }
}

TEST_F(CheckpointClusterTest, RescaledStageMergesEveryWorkersState) {
  opt_.pipeline.map("count_seen");
  const size_t cut = 4;
  {
    auto l = Loader::open(opt_);
    ASSERT_TRUE(l.is_ok());
    ASSERT_TRUE((*l)->start_epoch(0).is_ok());
    take(**l, cut);
    ASSERT_TRUE((*l)->save(ckpt_).is_ok());
  }
  opt_.workers = 3;
  auto l = Loader::open(opt_);
  ASSERT_TRUE(l.is_ok());
  auto point = (*l)->restore(ckpt_);
  ASSERT_TRUE(point.is_ok()) << point.status().to_string();
  EXPECT_TRUE(point->rescaled);
  ASSERT_TRUE((*l)->start_epoch(0).is_ok());
  auto rest = take(**l, 0);
  ASSERT_FALSE(rest.empty());
  // Every new worker starts counting from the items consumed before the cut.
  uint64_t lowest = UINT64_MAX;
  for (const auto& s : rest)
    for (const auto& v : s.seen) lowest = std::min<uint64_t>(lowest, std::stoull(v));
  EXPECT_EQ(lowest, cut * opt_.batch_size + 1);
}

TEST_F(CheckpointClusterTest, ResumeReadsOnlyTheShuffleBlockInProgress) {
  CountingFileSystem fs;
  FileSystemEnv env(&fs);
  opt_.env = &env;
  opt_.plan.logical_shards = 10;
  uint64_t full_bytes = 0;
  {
    auto l = Loader::open(opt_);
    ASSERT_TRUE(l.is_ok());
    uint64_t b0 = fs.bytes;
    ASSERT_TRUE((*l)->start_epoch(0).is_ok());
    take(**l, 0);
    full_bytes = fs.bytes - b0;
  }
  const size_t steps = (150 + opt_.batch_size - 1) / opt_.batch_size, cut = steps * 2 / 3;
  {
    auto l = Loader::open(opt_);
    ASSERT_TRUE(l.is_ok());
    ASSERT_TRUE((*l)->start_epoch(0).is_ok());
    take(**l, cut);
    ASSERT_TRUE((*l)->save(ckpt_).is_ok());
  }
  // The checkpoint went through the Env's file system: a rank file and CHECKPOINT.
  EXPECT_EQ(fs.writes.load(), 2u);
  auto l = Loader::open(opt_);
  ASSERT_TRUE(l.is_ok());
  ASSERT_TRUE((*l)->restore(ckpt_).is_ok());
  uint64_t b0 = fs.bytes;
  ASSERT_TRUE((*l)->start_epoch(0).is_ok());
  auto rest = take(**l, 0);
  const uint64_t resumed_bytes = fs.bytes - b0;
  // What is left is a third of the epoch, plus at most one block (4 items of ~200 B plus
  // tar headers) per logical shard read again.
  const double per_item = static_cast<double>(full_bytes) / 150;
  const double bound = per_item * (150 - cut * opt_.batch_size) + 10 * 4 * per_item;
  EXPECT_LE(resumed_bytes, bound) << "full epoch read " << full_bytes << " bytes";
  EXPECT_GE(resumed_bytes, per_item * (150 - cut * opt_.batch_size) * 0.9);
  EXPECT_EQ(rest.size(), steps - cut);
}

TEST_F(CheckpointClusterTest, RanksSavingDifferentStepsFailWithoutACheckpoint) {
  opt_.world_size = 2;
  opt_.checkpoint_timeout_ms = 1500;
  auto cluster = Cluster::start(opt_, {0, 1});
  ASSERT_TRUE(cluster.is_ok());
  std::vector<Status> saved(2);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      auto l = (*cluster)->loader(r);
      if (!l.is_ok() || !(*l)->start_epoch(0).is_ok()) return;
      take(**l, 2 + r);
      saved[r] = (*l)->save(ckpt_);
    });
  for (auto& t : threads) t.join();
  EXPECT_FALSE(saved[0].is_ok());
  EXPECT_FALSE(saved[1].is_ok());
  // The rank whose cut was not the coordinator's waited in vain for the other: its error names
  // what it waited for.
  auto waited = [](const Status& st) {
    return st.message().find("to SaveRequest within 1500 ms") != std::string::npos;
  };
  EXPECT_TRUE(waited(saved[0]) || waited(saved[1])) << saved[0].to_string() << "\n"
                                                    << saved[1].to_string();
  EXPECT_FALSE(std::filesystem::exists(ckpt_ + "/CHECKPOINT"));
}

// The default Env with a fixed wall clock, counting what the cluster asks it for.
class RecordingEnv : public EnvWrapper {
 public:
  RecordingEnv() : EnvWrapper(Env::Default()) {}
  class FixedClock : public Clock {
   public:
    int64_t unix_ms() override { return 1234567890123; }
    int64_t steady_ns() override { return real_clock().steady_ns(); }
  };
  Clock* clock() override { return &clock_; }
  std::shared_ptr<DataPlane> new_data_plane() override {
    ++data_planes;
    return EnvWrapper::new_data_plane();
  }
  std::unique_ptr<caf::actor_system_config> new_actor_system_config() override {
    ++configs;
    auto cfg = EnvWrapper::new_actor_system_config();
    cfg->set("scheduler.max-threads", 1);  // a placement's own setting
    return cfg;
  }
  std::atomic<int> data_planes{0}, configs{0};

 private:
  FixedClock clock_;
};

// Every rank of a job, each on its own thread as trainers are: `body(rank, loader)`.
template <typename F>
void each_rank(Cluster& cluster, uint32_t ranks, F body) {
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      auto l = cluster.loader(r);
      ASSERT_TRUE(l.is_ok()) << l.status().to_string();
      body(r, **l);
    });
  for (auto& t : threads) t.join();
}

// state() is save() without a directory: every rank gets the same bytes, nothing is
// written, and load_state() resumes from them like restore() from a directory, on the
// same topology bit-exactly and on another one exactly once.
TEST_F(CheckpointClusterTest, StateBytesResumeLikeACheckpointDirectory) {
  opt_.world_size = 2;
  std::map<uint32_t, std::vector<Step>> full, before, after;
  std::mutex mu;  // the rank threads fill the maps
  {
    auto c = Cluster::start(opt_, {0, 1});
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    each_rank(**c, 2, [&](uint32_t r, Loader& l) {
      ASSERT_TRUE(l.start_epoch(0).is_ok());
      auto got = take(l, 0);
      std::lock_guard<std::mutex> lock(mu);
      full[r] = std::move(got);
    });
  }
  std::map<uint32_t, std::string> states;
  {
    auto c = Cluster::start(opt_, {0, 1});
    ASSERT_TRUE(c.is_ok());
    each_rank(**c, 2, [&](uint32_t r, Loader& l) {
      ASSERT_TRUE(l.start_epoch(0).is_ok());
      auto got = take(l, 3);
      auto bytes = l.state();
      ASSERT_TRUE(bytes.is_ok()) << bytes.status().to_string();
      std::lock_guard<std::mutex> lock(mu);
      before[r] = std::move(got);
      states[r] = *bytes;
    });
  }
  ASSERT_EQ(states.size(), 2u);
  EXPECT_EQ(states[0], states[1]) << "every rank gets the whole cut";
  EXPECT_FALSE(std::filesystem::exists(ckpt_)) << "state() writes nothing";
  // The same topology: bit-exact. Rank 1 loads rank 0's copy: any copy will do.
  {
    auto c = Cluster::start(opt_, {0, 1});
    ASSERT_TRUE(c.is_ok());
    each_rank(**c, 2, [&](uint32_t r, Loader& l) {
      auto point = l.load_state(states[0]);
      ASSERT_TRUE(point.is_ok()) << point.status().to_string();
      EXPECT_EQ(point->step, 3u);
      EXPECT_FALSE(point->rescaled);
      ASSERT_TRUE(l.start_epoch(point->epoch).is_ok());
      auto got = take(l, 0);
      std::lock_guard<std::mutex> lock(mu);
      after[r] = std::move(got);
    });
  }
  for (uint32_t r = 0; r < 2; ++r) {
    ASSERT_EQ(before[r].size() + after[r].size(), full[r].size()) << "rank " << r;
    for (size_t i = 0; i < full[r].size(); ++i) {
      const Step& got = i < 3 ? before[r][i] : after[r][i - 3];
      EXPECT_EQ(got.keys, full[r][i].keys) << "rank " << r << " step " << i;
    }
  }
  // Three ranks: every key of the epoch not delivered before the cut, exactly once.
  std::multiset<std::string> rest;
  opt_.world_size = 3;
  {
    auto c = Cluster::start(opt_, {0, 1, 2});
    ASSERT_TRUE(c.is_ok());
    each_rank(**c, 3, [&](uint32_t, Loader& l) {
      auto point = l.load_state(states[1]);
      ASSERT_TRUE(point.is_ok()) << point.status().to_string();
      EXPECT_TRUE(point->rescaled);
      ASSERT_TRUE(l.start_epoch(point->epoch).is_ok());
      auto got = take(l, 0);
      std::lock_guard<std::mutex> lock(mu);
      for (const auto& s : got) rest.insert(s.keys.begin(), s.keys.end());
    });
  }
  std::multiset<std::string> expected;
  for (uint32_t r = 0; r < 2; ++r)
    for (size_t i = 3; i < full[r].size(); ++i)
      expected.insert(full[r][i].keys.begin(), full[r][i].keys.end());
  EXPECT_EQ(rest, expected);
}

// Ranks that load different cuts (two state() calls of one job) are refused by generation,
// and bytes that are no state are refused as damage.
TEST_F(CheckpointClusterTest, RanksLoadingDifferentStatesAreRefused) {
  opt_.world_size = 2;
  std::map<uint32_t, std::vector<std::string>> states;
  std::mutex mu;
  {
    auto c = Cluster::start(opt_, {0, 1});
    ASSERT_TRUE(c.is_ok());
    each_rank(**c, 2, [&](uint32_t r, Loader& l) {
      ASSERT_TRUE(l.start_epoch(0).is_ok());
      for (int cut = 0; cut < 2; ++cut) {
        take(l, 2);
        auto bytes = l.state();
        ASSERT_TRUE(bytes.is_ok()) << bytes.status().to_string();
        std::lock_guard<std::mutex> lock(mu);
        states[r].push_back(*bytes);
      }
    });
  }
  ASSERT_EQ(states[0].size(), 2u);
  ASSERT_NE(states[0][0], states[0][1]);
  auto c = Cluster::start(opt_, {0, 1});
  ASSERT_TRUE(c.is_ok());
  std::map<uint32_t, Status> outcome;
  each_rank(**c, 2, [&](uint32_t r, Loader& l) {
    auto point = l.load_state(states[r][r]);  // rank 0 the first cut, rank 1 the second
    std::lock_guard<std::mutex> lock(mu);
    outcome[r] = point.status();
  });
  for (uint32_t r = 0; r < 2; ++r) {
    ASSERT_FALSE(outcome[r].is_ok()) << "rank " << r;
    EXPECT_NE(outcome[r].message().find("generation"), std::string::npos) << outcome[r].message();
  }
  LoaderOptions single = opt_;
  single.world_size = 1;
  single.rank = 0;
  auto one = Loader::open(single);
  ASSERT_TRUE(one.is_ok());
  auto garbage = (*one)->load_state("not a loader state");
  ASSERT_FALSE(garbage.is_ok());
  EXPECT_EQ(garbage.status().code(), StatusCode::kCorrupt) << garbage.status().to_string();
}

TEST_F(CheckpointClusterTest, TheClusterTakesClockDataPlaneAndActorSystemFromItsEnv) {
  RecordingEnv env;
  opt_.env = &env;
  {
    auto l = Loader::open(opt_);
    ASSERT_TRUE(l.is_ok()) << l.status().to_string();
    ASSERT_TRUE((*l)->start_epoch(0).is_ok());
    take(**l, 2);
    ASSERT_TRUE((*l)->save(ckpt_).is_ok());
  }
  EXPECT_EQ(env.data_planes.load(), 1);
  EXPECT_EQ(env.configs.load(), 1);
  auto ck = io::load_checkpoint(io::local_file_system(), ckpt_);
  ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
  EXPECT_EQ(ck->manifest.created_unix_ms, 1234567890123);  // the Env's clock dated it
}

TEST_F(CheckpointClusterTest, ACheckpointDirectoryTheFileSystemCannotWriteIsRefusedByName) {
  auto l = Loader::open(opt_);
  ASSERT_TRUE(l.is_ok());
  ASSERT_TRUE((*l)->start_epoch(0).is_ok());
  take(**l, 1);
  // The default Env reads s3:// but writes only local or mounted directories.
  Status st = (*l)->save("s3://bucket/ckpt");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("s3://bucket/ckpt"), std::string::npos) << st.to_string();
  EXPECT_NE(st.message().find("local or mounted directory"), std::string::npos) << st.to_string();
}

// A rank of a larger world without a coordinator to join cannot take part in a job (nor in
// its checkpoints): open() says what to set instead of running alone.
TEST_F(CheckpointClusterTest, ARankOfALargerWorldNeedsTheJobsCoordinator) {
  opt_.world_size = 2;
  opt_.rank = 1;
  auto l = Loader::open(opt_);
  ASSERT_FALSE(l.is_ok());
  EXPECT_EQ(l.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(l.status().message().find("SHARDYARD_COORDINATOR"), std::string::npos)
      << l.status().to_string();
}

TEST_F(CheckpointClusterTest, SaveAndRestoreAtTheWrongTimeAreRefused) {
  auto l = Loader::open(opt_);
  ASSERT_TRUE(l.is_ok());
  EXPECT_EQ((*l)->save(ckpt_).code(), StatusCode::kInvalidArgument);
  auto missing = (*l)->restore(tmp_.path() + "/nothing");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  ASSERT_TRUE((*l)->start_epoch(0).is_ok());
  EXPECT_EQ((*l)->restore(ckpt_).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(CheckpointClusterTest, SnapshotShowsTheCheckpointActor) {
  auto l = Loader::open(opt_);
  ASSERT_TRUE(l.is_ok());
  ASSERT_TRUE((*l)->start_epoch(0).is_ok());
  take(**l, 2);
  ASSERT_TRUE((*l)->save(ckpt_).is_ok());
  bool found = false;
  for (const auto& s : (*l)->cluster().snapshot())
    if (s.role == "checkpoint") {
      found = true;
      EXPECT_EQ(s.state, "idle");
      EXPECT_EQ(s.steps, 1u);  // saves
      EXPECT_GT(s.bytes, 0u);
    }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace shardyard
