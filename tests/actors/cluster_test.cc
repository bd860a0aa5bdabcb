// The in-process test cluster: all roles as real CAF actors in one process.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <set>
#include <thread>

#include "actors/env.h"
#include "actors/loader.h"
#include "testdata.h"

namespace shardyard {
namespace {

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pattern_ = testing::make_dataset(tmp_.path() + "/d", 6, 20, 256, 3);
    ASSERT_FALSE(pattern_.empty());
    opt_.sources = {pattern_};
    opt_.workers = 3;
    opt_.batch_size = 7;
    opt_.plan.shuffle = true;
    opt_.plan.seed = 4;
    opt_.cache_dir = tmp_.path() + "/cache";
  }
  // Drains the rest of an epoch; returns the keys.
  static std::vector<std::string> drain(Loader& loader, Status* error = nullptr) {
    std::vector<std::string> keys;
    for (;;) {
      auto b = loader.next();
      if (!b.is_ok()) {
        if (error) *error = b.status();
        return keys;
      }
      if (!b->has_value()) return keys;
      for (const auto& k : (*b)->keys()) keys.push_back(k);
    }
  }
  testing::TempDir tmp_;
  std::string pattern_;
  LoaderOptions opt_;
};

TEST_F(ClusterTest, TwoRanksDeliverEverySampleOncePerEpoch) {
  opt_.world_size = 2;
  auto cluster = Cluster::start(opt_, {0, 1});
  ASSERT_TRUE(cluster.is_ok()) << cluster.status().to_string();
  std::vector<std::vector<std::string>> keys(2);
  std::vector<Status> errors(2);
  std::vector<uint64_t> steps(2);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      auto loader = (*cluster)->loader(r);
      if (!loader.is_ok()) {
        errors[r] = loader.status();
        return;
      }
      errors[r] = (*loader)->start_epoch(0);
      steps[r] = (*loader)->steps_per_epoch();
      if (errors[r].is_ok()) keys[r] = drain(**loader, &errors[r]);
    });
  for (auto& t : threads) t.join();
  ASSERT_TRUE(errors[0].is_ok()) << errors[0].to_string();
  ASSERT_TRUE(errors[1].is_ok()) << errors[1].to_string();
  EXPECT_EQ(steps[0], steps[1]);
  std::set<std::string> all(keys[0].begin(), keys[0].end());
  all.insert(keys[1].begin(), keys[1].end());
  EXPECT_EQ(all.size(), 120u);
  EXPECT_EQ(keys[0].size() + keys[1].size(), 120u);
}

TEST_F(ClusterTest, PacketsQueuedPerWorkerAreTheJobsUnlessSet) {
  // Each worker's channel (exact order: one per worker) holds the packets the job says.
  opt_.plan.logical_shards = 6;
  opt_.plan.chunk_items = 20;
  auto run = [&](uint32_t asked) -> uint32_t {
    opt_.prefetch_packets = asked;
    auto cluster = Cluster::start(opt_, {0});
    EXPECT_TRUE(cluster.is_ok()) << cluster.status().to_string();
    if (!cluster.is_ok()) return 0;
    const uint32_t used = (*cluster)->prefetch_packets();
    auto loader = (*cluster)->loader(0);
    EXPECT_TRUE(loader.is_ok()) << loader.status().to_string();
    if (!loader.is_ok()) return 0;
    EXPECT_TRUE((*loader)->start_epoch(0).is_ok());
    size_t workers = 0;
    for (const auto& a : (*cluster)->snapshot()) {
      if (a.role != "worker") continue;
      ++workers;
      EXPECT_EQ(a.queue_capacity, used) << "worker " << a.worker;
    }
    EXPECT_EQ(workers, 3u);
    Status error;
    EXPECT_EQ(drain(**loader, &error).size(), 120u);
    EXPECT_TRUE(error.is_ok()) << error.to_string();
    return used;
  };
  const uint32_t chosen = run(0);  // the default: chosen from the job
  EXPECT_EQ(chosen, 1u) << "2 shuffled logical shards a worker, chunks of 20: 40 items a round";
  EXPECT_EQ(run(5), 5u);
}

// A file system that counts the reads made outside a worker thread (current_worker() null).
class ThreadCheckingFileSystem : public FileSystemWrapper {
 public:
  explicit ThreadCheckingFileSystem(FileSystem* target) : FileSystemWrapper(target) {}
  std::atomic<uint64_t> reads{0}, outside{0};
  Result<std::unique_ptr<RandomAccessFile>> open(const std::string& uri) override {
    SY_ASSIGN_OR_RETURN(auto f, target()->open(uri));
    return std::unique_ptr<RandomAccessFile>(new File(std::move(f), this));
  }

 private:
  class File : public RandomAccessFile {
   public:
    File(std::unique_ptr<RandomAccessFile> f, ThreadCheckingFileSystem* fs)
        : f_(std::move(f)), fs_(fs) {}
    Result<size_t> read_at(uint64_t offset, void* dst, size_t n) override {
      ++fs_->reads;
      if (current_worker() == nullptr) ++fs_->outside;
      return f_->read_at(offset, dst, n);
    }
    uint64_t size() const override { return f_->size(); }
    const std::string& uri() const override { return f_->uri(); }

   private:
    std::unique_ptr<RandomAccessFile> f_;
    ThreadCheckingFileSystem* fs_;
  };
};

// Large members are read into the batch (on collator threads) only from the default file
// system: a user file system's reads all run on worker threads, as LoaderOptions::env says.
TEST_F(ClusterTest, AUserFileSystemIsReadOnWorkerThreadsOnly) {
  const std::string large = testing::make_dataset(tmp_.path() + "/big", 2, 6, 200000, 5);
  ASSERT_FALSE(large.empty());
  opt_.sources = {large};
  opt_.plan.logical_shards = 2;
  ThreadCheckingFileSystem fs(Env::Default()->file_system());
  FileSystemEnv env(&fs);
  opt_.env = &env;
  {
    auto loader = Loader::open(opt_);
    ASSERT_TRUE(loader.is_ok()) << loader.status().to_string();
    const uint64_t before = fs.reads;  // the manifest scan (outside any worker)
    const uint64_t outside_before = fs.outside;
    ASSERT_TRUE((*loader)->start_epoch(0).is_ok());
    Status error;
    EXPECT_EQ(drain(**loader, &error).size(), 12u);
    EXPECT_TRUE(error.is_ok()) << error.to_string();
    EXPECT_GT(fs.reads.load(), before);
    EXPECT_EQ(fs.outside.load(), outside_before) << "a read of the epoch outside a worker";
  }
}

TEST_F(ClusterTest, SnapshotListsEveryRoleAndShutdownIsAcknowledged) {
  opt_.world_size = 2;
  auto cluster = Cluster::start(opt_, {0, 1});
  ASSERT_TRUE(cluster.is_ok()) << cluster.status().to_string();
  size_t delivered = 0;
  {
    auto loader = (*cluster)->loader(0);
    ASSERT_TRUE(loader.is_ok());
    ASSERT_TRUE((*loader)->start_epoch(0).is_ok());
    delivered = drain(**loader).size();
    EXPECT_GT(delivered, 50u);  // about half of 120
    EXPECT_FALSE((*cluster)->loader(0).is_ok()) << "a second loader for the same rank";
  }
  auto snap = (*cluster)->snapshot();
  std::multiset<std::string> roles;
  for (const auto& s : snap) roles.insert(s.role);
  EXPECT_EQ(roles.count("coordinator"), 1u);
  EXPECT_EQ(roles.count("dispatcher"), 2u);
  EXPECT_EQ(roles.count("loader"), 2u);
  EXPECT_EQ(roles.count("worker"), 6u);
  uint64_t worker_items = 0;
  for (const auto& s : snap)
    if (s.role == "worker" && s.rank == 0) worker_items += s.items;
  EXPECT_EQ(worker_items, delivered);
  EXPECT_TRUE((*cluster)->shutdown().is_ok());
  EXPECT_TRUE((*cluster)->shutdown().is_ok());  // idempotent
  EXPECT_TRUE((*cluster)->snapshot().empty());
}

TEST_F(ClusterTest, AbandonedEpochDoesNotLeakIntoTheNext) {
  auto loader = Loader::open(opt_);
  ASSERT_TRUE(loader.is_ok()) << loader.status().to_string();
  ASSERT_TRUE((*loader)->start_epoch(0).is_ok());
  auto first = (*loader)->next();
  ASSERT_TRUE(first.is_ok() && first->has_value());
  ASSERT_TRUE((*loader)->start_epoch(1).is_ok());  // abandons epoch 0 mid-way
  auto keys = drain(**loader);
  EXPECT_EQ(keys.size(), 120u);
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()).size(), 120u);
}

TEST_F(ClusterTest, LoaderDestroyedMidEpochStopsWorkers) {
  opt_.prefetch_packets = 1;
  opt_.batch_size = 1;
  auto loader = Loader::open(opt_);
  ASSERT_TRUE(loader.is_ok());
  ASSERT_TRUE((*loader)->start_epoch(0).is_ok());
  ASSERT_TRUE((*loader)->next().is_ok());
  loader->reset();  // workers are blocked on full channels: must not hang
  SUCCEED();
}

TEST_F(ClusterTest, ShardDamagedAfterPlanningFailsTheEpochWithTheFileName) {
  opt_.workers = 2;
  auto loader = Loader::open(opt_);
  ASSERT_TRUE(loader.is_ok()) << loader.status().to_string();
  // The manifest is built; now the shard changes under it.
  std::string victim = tmp_.path() + "/d/shard-000002.tar";
  std::filesystem::resize_file(victim, 2048);
  ASSERT_TRUE((*loader)->start_epoch(0).is_ok());
  Status error;
  drain(**loader, &error);
  ASSERT_FALSE(error.is_ok());
  EXPECT_NE(error.message().find("shard-000002.tar"), std::string::npos) << error.to_string();
}

// Samples of 80 KiB: their members are read from the shards straight into the batch
// (LoaderOptions::read_into_batch_bytes), and the two collators build each batch together.
// The batches are those of the mapped read path (read_into_batch_bytes = 0), whose
// collators build one batch each, at every depth; a shard cut short fails the epoch naming
// it, and a loader dropped mid-epoch stops.
TEST_F(ClusterTest, BothCollatorsReadLargeMembersIntoOneBatchTogether) {
  const std::string large = testing::make_dataset(tmp_.path() + "/large", 4, 12, 80 << 10, 5);
  ASSERT_FALSE(large.empty());
  opt_.sources = {large};
  opt_.workers = 2;
  opt_.batch_size = 5;
  struct Built {
    std::vector<std::string> keys;
    std::vector<std::string> columns;  // name, then bytes
  };
  auto run = [&](const LoaderOptions& opt, Status* error) {
    std::vector<Built> out;
    auto loader = Loader::open(opt);
    if (!loader.is_ok()) {
      *error = loader.status();
      return out;
    }
    *error = (*loader)->start_epoch(0);
    while (error->is_ok()) {
      auto b = (*loader)->next();
      if (!b.is_ok()) *error = b.status();
      if (!b.is_ok() || !b->has_value()) break;
      Built built{(*b)->keys(), {}};
      for (const auto& c : (*b)->columns()) {
        built.columns.push_back(c.name);
        built.columns.emplace_back(reinterpret_cast<const char*>(c.data()), c.bytes());
      }
      out.push_back(std::move(built));
    }
    return out;
  };
  LoaderOptions mapped = opt_;
  mapped.read_into_batch_bytes = 0;
  Status error;
  const auto want = run(mapped, &error);
  ASSERT_TRUE(error.is_ok()) << error.to_string();
  ASSERT_EQ(want.size(), 10u);  // 48 samples in batches of 5
  for (uint32_t depth : {1u, 2u, 3u}) {
    SCOPED_TRACE("prefetch_batches " + std::to_string(depth));
    LoaderOptions opt = opt_;
    opt.prefetch_batches = depth;
    const auto got = run(opt, &error);
    ASSERT_TRUE(error.is_ok()) << error.to_string();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].keys, want[i].keys) << "batch " << i;
      EXPECT_TRUE(got[i].columns == want[i].columns) << "batch " << i << " has other bytes";
    }
  }
  for (uint32_t depth : {1u, 2u}) {
    LoaderOptions opt = opt_;
    opt.prefetch_batches = depth;
    auto loader = Loader::open(opt);
    ASSERT_TRUE(loader.is_ok()) << loader.status().to_string();
    ASSERT_TRUE((*loader)->start_epoch(0).is_ok());
    ASSERT_TRUE((*loader)->next().is_ok());
    loader->reset();  // the collators are building: must not hang
  }
  // Cut short after the manifest was built: the epoch fails naming the shard.
  auto loader = Loader::open(opt_);
  ASSERT_TRUE(loader.is_ok()) << loader.status().to_string();
  std::filesystem::resize_file(tmp_.path() + "/large/shard-000002.tar", 200 << 10);
  ASSERT_TRUE((*loader)->start_epoch(0).is_ok());
  drain(**loader, &error);
  ASSERT_FALSE(error.is_ok());
  EXPECT_NE(error.message().find("shard-000002.tar"), std::string::npos) << error.to_string();
}

TEST_F(ClusterTest, ShutdownWithBlockedWorkersReturnsAndLoaderReportsIt) {
  opt_.prefetch_packets = 1;
  opt_.batch_size = 1;
  auto cluster = Cluster::start(opt_, {0});
  ASSERT_TRUE(cluster.is_ok()) << cluster.status().to_string();
  auto loader = (*cluster)->loader(0);
  ASSERT_TRUE(loader.is_ok());
  ASSERT_TRUE((*loader)->start_epoch(0).is_ok());
  ASSERT_TRUE((*loader)->next().is_ok());
  // Workers are now blocked on full channels; shutdown must cancel them, not wait forever.
  EXPECT_TRUE((*cluster)->shutdown().is_ok());
  // The loader outlives the shutdown: it reports it instead of hanging or throwing.
  Status error;
  for (int i = 0; i < 1000 && error.is_ok(); ++i) {
    auto b = (*loader)->next();
    if (!b.is_ok())
      error = b.status();
    else if (!b->has_value())
      break;
  }
  EXPECT_EQ(error.code(), StatusCode::kCancelled) << error.to_string();
  EXPECT_EQ((*loader)->start_epoch(1).code(), StatusCode::kCancelled);
}

TEST_F(ClusterTest, FailedEpochStaysFailed) {
  auto loader = Loader::open(opt_);
  ASSERT_TRUE(loader.is_ok());
  std::filesystem::resize_file(tmp_.path() + "/d/shard-000001.tar", 1024);
  ASSERT_TRUE((*loader)->start_epoch(0).is_ok());
  Status first;
  drain(**loader, &first);
  ASSERT_FALSE(first.is_ok());
  auto again = (*loader)->next();
  ASSERT_FALSE(again.is_ok()) << "a failed epoch ended cleanly on the next call";
  EXPECT_EQ(again.status().to_string(), first.to_string());
}

TEST_F(ClusterTest, ErrorsKeepTheirCodeAcrossActors) {
  // A strategy that breaks its contract is caught by the dispatcher actor; the trainer
  // sees an InvalidArgument, not a generic "unavailable".
  ASSERT_TRUE(StrategyRegistry::global()
                  .add("broken_for_test", [](const std::vector<ShardInfo>&,
                                             uint32_t) { return std::vector<uint32_t>{}; })
                  .is_ok());
  opt_.plan.worker_strategy = "broken_for_test";
  auto loader = Loader::open(opt_);
  ASSERT_TRUE(loader.is_ok()) << loader.status().to_string();
  Status st = (*loader)->start_epoch(0);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("broken_for_test"), std::string::npos) << st.to_string();
}

TEST_F(ClusterTest, RefusesBadOptionsClearly) {
  LoaderOptions bad = opt_;
  bad.sources.clear();
  EXPECT_FALSE(Loader::open(bad).is_ok());
  bad = opt_;
  bad.plan.distributed_strategy = "nonesuch";
  auto r = Loader::open(bad);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("nonesuch"), std::string::npos);
  bad = opt_;
  bad.pipeline.map("no_such_stage");
  EXPECT_FALSE(Loader::open(bad).is_ok());
  bad = opt_;
  bad.world_size = 200;  // more ranks than logical shards
  bad.rank = 0;
  EXPECT_FALSE(Loader::open(bad).is_ok());
}

TEST_F(ClusterTest, TopologyComesFromTheEnvironment) {
  LoaderOptions o;
  setenv("RANK", "3", 1);
  setenv("WORLD_SIZE", "8", 1);
  EXPECT_TRUE(o.topology_from_env().is_ok());
  EXPECT_EQ(o.rank, 3u);
  EXPECT_EQ(o.world_size, 8u);
  setenv("RANK", "x", 1);
  EXPECT_FALSE(o.topology_from_env().is_ok());
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
}

// Two processes' worth of ranks in one: each rank its own Cluster and actor system, joined
// over loopback (rank 0 hosts the coordinator and writes the rendezvous file). A Loader that
// outlives its Cluster's shutdown, with its epoch open, gets kCancelled and does not keep the
// rank's loader actor: a networked shutdown waits for its stopped roles to be destroyed, and
// says so on stderr when one is still referenced.
TEST_F(ClusterTest, ANetworkedShutdownIsNotHeldByALoaderThatOutlivesIt) {
  opt_.world_size = 2;
  opt_.rendezvous_file = tmp_.path() + "/rendezvous";
  opt_.join_timeout_ms = 60000;
  std::vector<std::shared_ptr<Cluster>> clusters(2);
  std::vector<Status> errors(2);
  {
    std::vector<std::thread> starts;
    for (uint32_t r = 0; r < 2; ++r)
      starts.emplace_back([&, r] {
        LoaderOptions o = opt_;
        o.rank = r;
        o.host_coordinator = r == 0;
        auto c = Cluster::start(o, {r});
        if (c.is_ok()) {
          clusters[r] = *c;
        } else {
          errors[r] = c.status();
        }
      });
    for (auto& t : starts) t.join();
  }
  for (uint32_t r = 0; r < 2; ++r) ASSERT_TRUE(errors[r].is_ok()) << errors[r].to_string();
  std::vector<std::unique_ptr<Loader>> loaders(2);
  for (uint32_t r = 0; r < 2; ++r) {
    auto l = clusters[r]->loader(r);
    ASSERT_TRUE(l.is_ok()) << l.status().to_string();
    loaders[r] = std::move(*l);
    ASSERT_TRUE(loaders[r]->start_epoch(0).is_ok());
    auto b = loaders[r]->next();
    ASSERT_TRUE(b.is_ok() && b->has_value()) << b.status().to_string();
  }
  ::testing::internal::CaptureStderr();
  {
    // Rank 0 waits for rank 1 to leave, so they stop together. Rank 0's on this thread: CAF
    // 0.17 lets a thread that used an actor system hold its logger until that thread uses
    // another one or ends, and an actor system's destruction waits for its logger.
    std::thread other([&] { errors[1] = clusters[1]->shutdown(); });
    errors[0] = clusters[0]->shutdown();
    other.join();
  }
  const std::string said = ::testing::internal::GetCapturedStderr();
  for (uint32_t r = 0; r < 2; ++r) EXPECT_TRUE(errors[r].is_ok()) << errors[r].to_string();
  EXPECT_EQ(said.find("still referenced"), std::string::npos) << said;
  for (uint32_t r = 0; r < 2; ++r) {
    Status after;
    drain(*loaders[r], &after);
    EXPECT_EQ(after.code(), StatusCode::kCancelled) << after.to_string();
  }
}

}  // namespace
}  // namespace shardyard
