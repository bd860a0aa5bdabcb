// Dispatch modes on the in-process test cluster (real CAF actors, real tar files): every
// mode delivers every item once; routed modes give the batches of kNone; non-replicable
// stages run once per rank in the dispatcher, replicable ones in the workers, post stages
// in the loader; broadcast shares one copy of each loaded shard; the route window bounds
// how far the dispatcher runs ahead; refusals (as_completed save, broadcast strategies).
//
// Probe stages registered in StageRegistry::global() record what they see (thread, rank,
// key, owner buffer) into one global Probe, reset by every test.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "actors/loader.h"
#include "testdata.h"

namespace shardyard {
namespace {

// A number per thread that is never reused: std::thread::id values are, once a thread ends,
// so two feed threads one after the other could look like one.
uint64_t thread_serial() {
  static std::atomic<uint64_t> next{1};
  thread_local const uint64_t mine = next++;
  return mine;
}

struct Seen {
  uint64_t thread = 0;
  uint32_t rank = 0;
  uint32_t worker = 0;
  bool dispatcher = false;
  std::string key;
  uint32_t shard = 0;
  const void* owner = nullptr;
};

struct Probe {
  std::mutex mu;
  std::vector<Seen> once, map, post;   // guarded by mu
  std::atomic<int64_t> dispatched{0};  // items the once stage processed
  std::atomic<int64_t> posted{0};      // items the post stage processed (before the credit)
  std::atomic<int64_t> max_ahead{0};
  std::atomic<int> map_sleep_us{0};

  void reset() {
    std::lock_guard<std::mutex> lock(mu);
    once.clear();
    map.clear();
    post.clear();
    dispatched = 0;
    posted = 0;
    max_ahead = 0;
    map_sleep_us = 0;
  }
  void record(std::vector<Seen>& into, const Item& item, const StageContext& ctx) {
    Seen s{thread_serial(), ctx.worker.rank, ctx.worker.worker, ctx.worker.dispatcher,
           item.key,        item.shard,      item.owner.get()};
    std::lock_guard<std::mutex> lock(mu);
    into.push_back(std::move(s));
  }
};

Probe& probe() {
  static Probe p;
  return p;
}

void register_probes() {
  static bool done = [] {
    auto& reg = StageRegistry::global();
    (void)reg.add("probe_once", map_stage([](Item& item, StageContext& ctx) {
                    auto& p = probe();
                    p.record(p.once, item, ctx);
                    const int64_t ahead = ++p.dispatched - p.posted.load();
                    int64_t seen = p.max_ahead.load();
                    while (ahead > seen && !p.max_ahead.compare_exchange_weak(seen, ahead)) {
                    }
                    return Status::ok();
                  }));
    (void)reg.add("probe_map", map_stage([](Item& item, StageContext& ctx) {
                    auto& p = probe();
                    if (int us = p.map_sleep_us.load())
                      std::this_thread::sleep_for(std::chrono::microseconds(us));
                    p.record(p.map, item, ctx);
                    return Status::ok();
                  }));
    (void)reg.add("probe_post", map_stage([](Item& item, StageContext& ctx) {
                    auto& p = probe();
                    p.record(p.post, item, ctx);
                    ++p.posted;
                    return Status::ok();
                  }));
    // A worker strategy that kNone accepts and broadcast does not.
    (void)StrategyRegistry::global().add("reversed_contiguous",
                                         [](const std::vector<ShardInfo>& shards, uint32_t parts) {
                                           auto a = assign_contiguous(shards, parts);
                                           for (auto& x : a) x = parts - 1 - x;
                                           return a;
                                         });
    return true;
  }();
  (void)done;
}

const Dispatch kModes[] = {Dispatch::kNone, Dispatch::kRoundRobin, Dispatch::kOnRequest,
                           Dispatch::kBroadcast, Dispatch::kByKey};

using Steps = std::vector<std::vector<std::string>>;  // keys of each batch

class DispatchClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    register_probes();
    probe().reset();
    pattern_ = testing::make_dataset(tmp_.path() + "/d", 6, 20, 256, 3);
    ASSERT_FALSE(pattern_.empty());
    opt_.sources = {pattern_};
    opt_.workers = 3;
    opt_.batch_size = 7;
    opt_.plan.shuffle = true;
    opt_.plan.seed = 4;
    opt_.cache_dir = tmp_.path() + "/cache";
  }
  // The batches of the rest of the epoch.
  static Steps drain(Loader& loader, Status* error) {
    Steps steps;
    for (;;) {
      auto b = loader.next();
      if (!b.is_ok()) {
        *error = b.status();
        return steps;
      }
      if (!b->has_value()) return steps;
      steps.push_back((*b)->keys());
    }
  }
  static std::vector<std::string> flat(const Steps& steps) {
    std::vector<std::string> out;
    for (const auto& s : steps) out.insert(out.end(), s.begin(), s.end());
    return out;
  }
  // One rank, epochs [0, epochs): the batches of each.
  std::vector<Steps> run_one(LoaderOptions opt, uint32_t epochs = 1) {
    std::vector<Steps> out;
    auto loader = Loader::open(opt);
    EXPECT_TRUE(loader.is_ok()) << loader.status().to_string();
    if (!loader.is_ok()) return out;
    for (uint32_t e = 0; e < epochs; ++e) {
      Status st = (*loader)->start_epoch(e);
      EXPECT_TRUE(st.is_ok()) << st.to_string();
      Status error;
      out.push_back(drain(**loader, &error));
      EXPECT_TRUE(error.is_ok()) << error.to_string();
    }
    return out;
  }
  // All ranks of a world in one cluster, each rank on its own thread: the batches by rank.
  std::vector<Steps> run_ranks(LoaderOptions opt, uint32_t ranks) {
    opt.world_size = ranks;
    std::vector<uint32_t> ids(ranks);
    for (uint32_t r = 0; r < ranks; ++r) ids[r] = r;
    auto cluster = Cluster::start(opt, ids);
    EXPECT_TRUE(cluster.is_ok()) << cluster.status().to_string();
    std::vector<Steps> out(ranks);
    if (!cluster.is_ok()) return out;
    std::vector<Status> errors(ranks);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < ranks; ++r)
      threads.emplace_back([&, r] {
        auto loader = (*cluster)->loader(r);
        if (!loader.is_ok()) {
          errors[r] = loader.status();
          return;
        }
        errors[r] = (*loader)->start_epoch(0);
        if (errors[r].is_ok()) out[r] = drain(**loader, &errors[r]);
      });
    for (auto& t : threads) t.join();
    for (uint32_t r = 0; r < ranks; ++r) EXPECT_TRUE(errors[r].is_ok()) << errors[r].to_string();
    return out;
  }

  testing::TempDir tmp_;
  std::string pattern_;
  LoaderOptions opt_;
};

void expect_exactly_once(const std::vector<std::string>& keys, size_t n, const std::string& what) {
  EXPECT_EQ(keys.size(), n) << what;
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()).size(), n) << what;
}

TEST_F(DispatchClusterTest, EveryModeDeliversEveryItemOncePerEpoch) {
  for (auto mode : kModes)
    for (uint32_t w : {1u, 3u}) {
      std::string what = std::string(dispatch_name(mode)) + " W=" + std::to_string(w);
      auto opt = opt_;
      opt.dispatch = mode;
      opt.workers = w;
      auto epochs = run_one(opt, 2);
      ASSERT_EQ(epochs.size(), 2u) << what;
      expect_exactly_once(flat(epochs[0]), 120, what + " epoch 0");
      expect_exactly_once(flat(epochs[1]), 120, what + " epoch 1");
      EXPECT_NE(flat(epochs[0]), flat(epochs[1])) << what << ": the epochs share an order";
      for (const auto& s : epochs[0]) EXPECT_LE(s.size(), 7u) << what;
    }
}

TEST_F(DispatchClusterTest, EveryModeDeliversEveryItemOnceAcrossRanks) {
  for (auto mode : kModes) {
    auto opt = opt_;
    opt.dispatch = mode;
    opt.prefetch_shards = 2;
    auto ranks = run_ranks(opt, 2);
    std::vector<std::string> all = flat(ranks[0]);
    auto second = flat(ranks[1]);
    all.insert(all.end(), second.begin(), second.end());
    expect_exactly_once(all, 120, dispatch_name(mode));
    EXPECT_EQ(ranks[0].size(), ranks[1].size()) << dispatch_name(mode) << ": equal step counts";
  }
}

TEST_F(DispatchClusterTest, RoutedModesGiveTheBatchesOfNone) {
  auto none = run_one(opt_, 2);
  for (auto mode : {Dispatch::kRoundRobin, Dispatch::kOnRequest, Dispatch::kByKey})
    for (uint32_t w : {1u, 2u, 4u}) {
      auto opt = opt_;
      opt.dispatch = mode;
      opt.workers = w;
      opt.pipeline = Spec().map("probe_map");
      EXPECT_EQ(run_one(opt, 2), none) << dispatch_name(mode) << " W=" << w;
    }
  // A once stage alone asks for a dispatcher (round robin): the batches do not change.
  auto opt = opt_;
  opt.pipeline = Spec().once("probe_once").map("probe_map");
  EXPECT_EQ(run_one(opt, 2), none) << "none + once stage";
}

TEST_F(DispatchClusterTest, OnceStageRunsOnOneThreadPerRankInRankOrder) {
  for (auto mode : {Dispatch::kRoundRobin, Dispatch::kOnRequest}) {
    probe().reset();
    auto opt = opt_;
    opt.dispatch = mode;
    opt.pipeline = Spec().once("probe_once").map("probe_map");
    auto ranks = run_ranks(opt, 2);
    auto& p = probe();
    std::lock_guard<std::mutex> lock(p.mu);
    std::set<uint64_t> once_threads_all;
    for (uint32_t r = 0; r < 2; ++r) {
      std::string what = std::string(dispatch_name(mode)) + " rank " + std::to_string(r);
      std::vector<std::string> once_keys;
      std::set<uint64_t> once_threads, map_threads;
      for (const auto& s : p.once)
        if (s.rank == r) {
          once_keys.push_back(s.key);
          once_threads.insert(s.thread);
          EXPECT_TRUE(s.dispatcher) << what;
        }
      std::set<uint32_t> map_workers;
      for (const auto& s : p.map)
        if (s.rank == r) {
          map_threads.insert(s.thread);
          map_workers.insert(s.worker);
          EXPECT_FALSE(s.dispatcher) << what;
        }
      EXPECT_EQ(once_threads.size(), 1u) << what << ": the once stage on one thread";
      EXPECT_EQ(once_keys, flat(ranks[r])) << what << ": every item once, in rank order";
      for (auto t : once_threads) {
        EXPECT_EQ(map_threads.count(t), 0u) << what << ": a map stage ran in the dispatcher";
        once_threads_all.insert(t);
      }
      EXPECT_GE(map_threads.size(), 1u) << what;
      EXPECT_LE(map_threads.size(), 3u) << what;
      if (mode == Dispatch::kRoundRobin) {
        EXPECT_EQ(map_threads.size(), 3u) << what << ": round robin feeds every worker";
        EXPECT_EQ(map_workers, (std::set<uint32_t>{0, 1, 2})) << what;
      }
    }
    EXPECT_EQ(once_threads_all.size(), 2u) << "one dispatcher thread per rank";
    EXPECT_EQ(p.map.size(), 120u);
  }
}

// By key: every item of a routing key meets the same worker, for the item key and for a
// field that a non-replicable stage computed (here the key's shard: six groups).
TEST_F(DispatchClusterTest, ByKeySendsEveryItemOfAKeyToOneWorker) {
  (void)StageRegistry::global().add("group_of_key", map_stage([](Item& item, StageContext&) {
                                      item.set_field("group", item.key.substr(0, 7));
                                      return Status::ok();
                                    }));
  for (std::string field : {"", "group"}) {
    probe().reset();
    auto opt = opt_;
    opt.dispatch = Dispatch::kByKey;
    opt.route_key_field = field;
    opt.pipeline = Spec().once("group_of_key").map("probe_map");
    (void)run_ranks(opt, 1);
    auto& p = probe();
    std::lock_guard<std::mutex> lock(p.mu);
    std::map<std::string, std::set<uint32_t>> workers_of;
    for (const auto& s : p.map)
      workers_of[field.empty() ? s.key : s.key.substr(0, 7)].insert(s.worker);
    std::set<uint32_t> used;
    for (const auto& [k, w] : workers_of) {
      EXPECT_EQ(w.size(), 1u) << "routing key '" << k << "' reached " << w.size() << " workers";
      used.insert(w.begin(), w.end());
    }
    EXPECT_EQ(p.map.size(), 120u);
    EXPECT_GE(used.size(), 2u) << "keys spread over the workers";
  }
  // A routing field that an item lacks is an error that names it.
  auto opt = opt_;
  opt.dispatch = Dispatch::kByKey;
  opt.route_key_field = "nosuchfield";
  auto loader = Loader::open(opt);
  ASSERT_TRUE(loader.is_ok()) << loader.status().to_string();
  ASSERT_TRUE((*loader)->start_epoch(0).is_ok());
  Status error;
  (void)drain(**loader, &error);
  EXPECT_FALSE(error.is_ok());
  EXPECT_NE(error.message().find("nosuchfield"), std::string::npos) << error.to_string();
}

TEST_F(DispatchClusterTest, BroadcastSharesOneCopyOfEachLoadedShard) {
  auto opt = opt_;
  opt.dispatch = Dispatch::kBroadcast;
  opt.plan.logical_shards = 6;
  opt.pipeline = Spec().map("probe_map");
  for (const char* strategy : {"strided", "contiguous"}) {
    probe().reset();
    opt.plan.worker_strategy = strategy;
    auto epochs = run_one(opt);
    ASSERT_EQ(epochs.size(), 1u);
    auto keys = flat(epochs[0]);
    expect_exactly_once(keys, 120, strategy);
    auto& p = probe();
    std::lock_guard<std::mutex> lock(p.mu);
    ASSERT_EQ(p.map.size(), 120u);
    // Every buffer a loaded shard's items live in is seen by several workers: the workers
    // read one shared copy, not one copy each.
    std::map<const void*, std::set<uint32_t>> workers_of_owner;
    std::map<uint32_t, std::set<const void*>> owners_of_shard;
    std::map<std::string, uint32_t> shard_of_key;
    for (const auto& s : p.map) {
      ASSERT_NE(s.owner, nullptr);
      workers_of_owner[s.owner].insert(s.worker);
      owners_of_shard[s.shard].insert(s.owner);
      shard_of_key[s.key] = s.shard;
    }
    EXPECT_EQ(owners_of_shard.size(), 6u) << strategy;
    for (const auto& [owner, workers] : workers_of_owner)
      EXPECT_EQ(workers.size(), 3u) << strategy << ": a buffer seen by only some workers";
    for (const auto& [shard, owners] : owners_of_shard)
      EXPECT_LT(owners.size(), 3u)
          << strategy << ": shard " << shard << " in one buffer per worker";
    // The rank order takes the shards one after another.
    size_t changes = 0;
    for (size_t i = 1; i < keys.size(); ++i)
      changes += shard_of_key.at(keys[i]) != shard_of_key.at(keys[i - 1]);
    EXPECT_EQ(changes, 5u) << strategy << ": shard after shard";
  }
}

TEST_F(DispatchClusterTest, PostStagesRunInTheLoaderInRankOrder) {
  for (auto mode : kModes)
    for (uint32_t prefetch : {0u, 2u}) {
      std::string what = std::string(dispatch_name(mode)) + " prefetch " + std::to_string(prefetch);
      probe().reset();
      auto opt = opt_;
      opt.dispatch = mode;
      opt.prefetch_batches = prefetch;
      opt.pipeline = Spec().map("probe_map").merge().map("probe_post");
      auto epochs = run_one(opt);
      ASSERT_EQ(epochs.size(), 1u) << what;
      auto& p = probe();
      std::lock_guard<std::mutex> lock(p.mu);
      std::vector<std::string> post_keys;
      std::set<uint64_t> post_threads, map_threads;
      for (const auto& s : p.post) {
        post_keys.push_back(s.key);
        post_threads.insert(s.thread);
      }
      for (const auto& s : p.map) map_threads.insert(s.thread);
      EXPECT_EQ(post_keys, flat(epochs[0])) << what << ": once each, in rank order";
      for (auto t : post_threads) EXPECT_EQ(map_threads.count(t), 0u) << what;
      if (prefetch == 0) {
        EXPECT_EQ(post_threads, std::set<uint64_t>{thread_serial()})
            << what << ": without prefetch the trainer's next() runs them";
      }
    }
}

// Collator threads build ahead only once the trainer is seen to be busy between batches:
// until then (and at least for the first four steps) next() collates in the trainer's
// thread, so the post stages run there. A trainer that spends longer on each step than a
// batch takes to collate gets every later step from the collators. prefetch_eager starts
// them at once. The batches are the same whichever thread builds them.
TEST_F(DispatchClusterTest, CollatorsBuildAheadOnceTheTrainerIsBusy) {
  auto opt = opt_;
  opt.prefetch_batches = 0;
  opt.pipeline = Spec().map("probe_map").merge().map("probe_post");
  const auto want = run_one(opt);
  ASSERT_EQ(want.size(), 1u);
  ASSERT_GT(want[0].size(), 8u);
  for (bool eager : {false, true}) {
    const std::string what = eager ? "eager" : "when busy";
    probe().reset();
    opt.prefetch_batches = 2;
    opt.prefetch_eager = eager;
    auto loader = Loader::open(opt);
    ASSERT_TRUE(loader.is_ok()) << loader.status().to_string();
    ASSERT_TRUE((*loader)->start_epoch(0).is_ok());
    Steps got;
    std::map<std::string, size_t> step_of;
    for (;;) {
      auto b = (*loader)->next();
      ASSERT_TRUE(b.is_ok()) << b.status().to_string();
      if (!b->has_value()) break;
      for (const auto& k : (*b)->keys()) step_of[k] = got.size();
      got.push_back((*b)->keys());
      std::this_thread::sleep_for(std::chrono::milliseconds(eager ? 0 : 20));  // its step
    }
    EXPECT_EQ(got, want[0]) << what;
    std::lock_guard<std::mutex> lock(probe().mu);
    ASSERT_EQ(probe().post.size(), step_of.size()) << what;
    for (const auto& seen : probe().post) {
      const size_t step = step_of.at(seen.key);
      const bool here = seen.thread == thread_serial();
      if (eager) {
        EXPECT_FALSE(here) << what << ": step " << step << " collated by the trainer";
      } else {
        EXPECT_EQ(here, step < 4) << what << ": step " << step
                                  << (here ? " collated by the trainer" : " by a collator");
      }
    }
  }
}

TEST_F(DispatchClusterTest, SavingAsCompletedWithADispatcherIsRefused) {
  auto opt = opt_;
  opt.order = Order::kAsCompleted;
  opt.dispatch = Dispatch::kOnRequest;
  auto loader = Loader::open(opt);
  ASSERT_TRUE(loader.is_ok()) << loader.status().to_string();
  ASSERT_TRUE((*loader)->start_epoch(0).is_ok());
  auto b = (*loader)->next();
  ASSERT_TRUE(b.is_ok() && b->has_value());
  Status st = (*loader)->save(tmp_.path() + "/ck");
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("order=exact"), std::string::npos) << st.to_string();
  EXPECT_NE(st.message().find("as_completed"), std::string::npos) << st.to_string();
  EXPECT_FALSE(std::filesystem::exists(tmp_.path() + "/ck/CHECKPOINT"));
  // The epoch goes on: as_completed with a dispatcher still delivers everything once.
  Status error;
  auto rest = flat(drain(**loader, &error));
  ASSERT_TRUE(error.is_ok()) << error.to_string();
  rest.insert(rest.end(), (*b)->keys().begin(), (*b)->keys().end());
  expect_exactly_once(rest, 120, "as_completed on request");
}

TEST_F(DispatchClusterTest, BroadcastWithAnotherWorkerStrategyFailsAtOpen) {
  auto opt = opt_;
  opt.plan.worker_strategy = "reversed_contiguous";
  auto fine = run_one(opt);  // a registered strategy: fine without a dispatcher
  ASSERT_EQ(fine.size(), 1u);
  expect_exactly_once(flat(fine[0]), 120, "kNone with a user worker strategy");
  for (const char* strategy : {"reversed_contiguous", "by-something"}) {
    opt.dispatch = Dispatch::kBroadcast;
    opt.plan.worker_strategy = strategy;
    auto loader = Loader::open(opt);
    ASSERT_FALSE(loader.is_ok()) << strategy;
    EXPECT_EQ(loader.status().code(), StatusCode::kInvalidArgument);
    const auto& m = loader.status().message();
    EXPECT_NE(m.find("broadcast"), std::string::npos) << m;
    EXPECT_NE(m.find(std::string("'") + strategy + "'"), std::string::npos) << m;
  }
}

TEST_F(DispatchClusterTest, BroadcastRefusesAOnceStageBeforeTheMergeAtOpen) {
  auto opt = opt_;
  opt.dispatch = Dispatch::kBroadcast;
  opt.pipeline = Spec().once("probe_once").map("probe_map");
  auto loader = Loader::open(opt);
  ASSERT_FALSE(loader.is_ok());
  EXPECT_NE(loader.status().message().find("non-replicable"), std::string::npos)
      << loader.status().to_string();
}

// Slow workers: the dispatcher reads and runs its once stage far faster than they work,
// so it runs up to the route window ahead of what the loader took, never further.
TEST_F(DispatchClusterTest, DispatcherNeverRunsMoreThanTheWindowAhead) {
  testing::TempDir big;
  auto pattern = testing::make_dataset(big.path() + "/d", 8, 300, 32, 5);
  ASSERT_FALSE(pattern.empty());
  for (auto mode : {Dispatch::kRoundRobin, Dispatch::kOnRequest}) {
    probe().reset();
    probe().map_sleep_us = 100;
    auto opt = opt_;
    opt.sources = {pattern};
    opt.cache_dir = big.path() + "/cache";
    opt.dispatch = mode;
    opt.workers = 2;
    opt.batch_size = 16;
    opt.prefetch_packets = 1;
    opt.pipeline = Spec().once("probe_once").map("probe_map").merge().map("probe_post");
    // What the loader opens the route with (actors/loader.cc), for 128 items per packet.
    const int64_t window = std::max<int64_t>(1024, 128 * 2 * (1 + 2));
    auto epochs = run_one(opt);
    ASSERT_EQ(epochs.size(), 1u);
    expect_exactly_once(flat(epochs[0]), 2400, dispatch_name(mode));
    EXPECT_EQ(probe().dispatched.load(), 2400);
    EXPECT_EQ(probe().posted.load(), 2400);
    // The post stage counts a step's items when the step is complete; the merger credits
    // the items it took as it goes, up to a batch earlier.
    EXPECT_LE(probe().max_ahead.load(), window + opt.batch_size) << dispatch_name(mode);
    EXPECT_GE(probe().max_ahead.load(), window / 2)
        << dispatch_name(mode) << ": the dispatcher never ran ahead, the bound was not tested";
  }
}

// The merger credits the route as it takes a step's items, not only at the step's end: a
// batch larger than the route window (routed modes), or spanning more logical shards than
// broadcast loads ahead, used to leave the dispatcher waiting for a credit that the merger
// gave only once it had the whole batch.
TEST_F(DispatchClusterTest, BatchesSpanningMoreThanTheWindowOrTheLoadedShardsDoNotStall) {
  testing::TempDir big;
  auto pattern = testing::make_dataset(big.path() + "/d", 6, 400, 16, 8);
  ASSERT_FALSE(pattern.empty());
  for (auto order : {Order::kExact, Order::kAsCompleted})
    for (auto mode : {Dispatch::kRoundRobin, Dispatch::kOnRequest}) {
      auto opt = opt_;
      opt.sources = {pattern};
      opt.cache_dir = big.path() + "/cache";
      opt.dispatch = mode;
      opt.order = order;
      opt.workers = 1;  // window 1024
      opt.batch_size = 1500;
      auto epochs = run_one(opt);
      ASSERT_EQ(epochs.size(), 1u);
      ASSERT_EQ(epochs[0].size(), 2u);
      expect_exactly_once(flat(epochs[0]), 2400, dispatch_name(mode));
    }
  // Default L: 66 logical shards of about 2 items here, batches of 7 and 40.
  for (uint32_t batch : {7u, 40u}) {
    auto opt = opt_;
    opt.dispatch = Dispatch::kBroadcast;
    opt.batch_size = batch;
    auto epochs = run_one(opt);
    ASSERT_EQ(epochs.size(), 1u);
    expect_exactly_once(flat(epochs[0]), 120, "broadcast B=" + std::to_string(batch));
  }
}

}  // namespace
}  // namespace shardyard
