// Tests of the sharding strategies, plan_epoch's argument checks and the defaults of
// runtime/shard.h. The order properties of planned epochs are in shard_test.cc.
#include "runtime/shard.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "runtime/manifest.h"

#include "test_manifest.h"

namespace shardyard {
namespace {

using testing::make_manifest;

// ---- strategies ---------------------------------------------------------------------------

std::vector<ShardInfo> infos(size_t n) {
  std::vector<ShardInfo> out(n);
  for (size_t i = 0; i < n; ++i) out[i].shard = static_cast<uint32_t>(i);
  return out;
}

TEST(Strategies, ContiguousAndStridedAreInRangeAndBalanced) {
  for (size_t n = 0; n <= 40; ++n) {
    for (uint32_t parts = 1; parts <= 9; ++parts) {
      auto contiguous = assign_contiguous(infos(n), parts);
      auto strided = assign_strided(infos(n), parts);
      ASSERT_EQ(contiguous.size(), n);
      ASSERT_EQ(strided.size(), n);
      std::vector<size_t> per_part(parts, 0);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_LT(contiguous[i], parts);
        if (i > 0) {
          ASSERT_GE(contiguous[i], contiguous[i - 1]) << "contiguous runs";
        }
        ++per_part[contiguous[i]];
        ASSERT_EQ(strided[i], i % parts);
      }
      auto [lo, hi] = std::minmax_element(per_part.begin(), per_part.end());
      ASSERT_LE(*hi - *lo, 1u) << n << " shards on " << parts << " parts";
    }
  }
}

std::string month_of(const ShardInfo& s) {
  auto at = s.first_source.find("2023-");
  return at == std::string::npos ? "" : s.first_source.substr(at, 7);
}

TEST(Strategies, ByKeyPutsAllShardsOfAKeyOnOnePart) {
  auto strategy = by_key(month_of);
  std::vector<ShardInfo> shards(30);
  for (size_t i = 0; i < shards.size(); ++i) {
    shards[i].shard = static_cast<uint32_t>(i);
    shards[i].first_source = "/data/2023-0" + std::to_string(1 + (i * 7) % 5) + "/x.tar";
  }
  for (uint32_t parts : {1u, 2u, 3u, 5u, 8u}) {
    auto part = strategy(shards, parts);
    ASSERT_EQ(part.size(), shards.size());
    std::map<std::string, uint32_t> part_of_key;
    for (size_t i = 0; i < shards.size(); ++i) {
      ASSERT_LT(part[i], parts);
      auto [it, fresh] = part_of_key.emplace(month_of(shards[i]), part[i]);
      ASSERT_EQ(it->second, part[i]) << "month " << it->first << " split over parts";
    }
    // Distinct keys, sorted, go to parts round robin.
    uint32_t k = 0;
    for (const auto& [month, p] : part_of_key) EXPECT_EQ(p, k++ % parts) << month;
  }
}

TEST(Strategies, PlanUsesAUserRegisteredStrategy) {
  // Eight sources of six items, two per month; a rank must get whole months.
  std::vector<std::string> uris;
  for (int i = 0; i < 8; ++i)
    uris.push_back("/data/2023-0" + std::to_string(1 + i / 2) + "/part-" + std::to_string(i) +
                   ".tar");
  Manifest m = make_manifest(std::vector<uint64_t>(8, 6), SourceKind::kTar, uris);
  ItemIndex index(m);
  LogicalShards shards(m.num_samples(), 16);
  ASSERT_TRUE(StrategyRegistry::global().add("test_by_month", by_key(month_of)).is_ok());
  static int worker_calls = 0;
  ASSERT_TRUE(StrategyRegistry::global()
                  .add("test_all_to_last_worker",
                       [](const std::vector<ShardInfo>& s, uint32_t parts) {
                         ++worker_calls;
                         return std::vector<uint32_t>(s.size(), parts - 1);
                       })
                  .is_ok());
  auto names = StrategyRegistry::global().names();
  EXPECT_NE(std::find(names.begin(), names.end(), "test_by_month"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "strided"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "contiguous"), names.end());

  PlanSpec spec;
  spec.logical_shards = 16;
  spec.shuffle = true;
  spec.seed = 8;
  spec.distributed_strategy = "test_by_month";
  spec.worker_strategy = "test_all_to_last_worker";
  auto plan = plan_epoch(m, index, shards, spec, Topology{2, 3}, 4, 0);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  EXPECT_EQ(worker_calls, 2);
  std::map<std::string, uint32_t> rank_of_month;
  for (uint32_t r = 0; r < 2; ++r) {
    for (size_t k = 0; k < plan->ranks[r].shards.size(); ++k) {
      EXPECT_EQ(plan->ranks[r].worker_of[k], 2u);
      auto loc = index.locate(shards.begin(plan->ranks[r].shards[k]));
      ShardInfo info;
      info.first_source = m.sources[loc.source].uri;
      auto [it, fresh] = rank_of_month.emplace(month_of(info), r);
      EXPECT_EQ(it->second, r) << "month " << it->first << " is on two ranks";
    }
  }
  EXPECT_EQ(rank_of_month.size(), 4u);
}

TEST(Strategies, UnknownStrategyNameIsAClearInvalidArgument) {
  Manifest m = make_manifest({10});
  ItemIndex index(m);
  LogicalShards shards(10, 4);
  for (bool worker_level : {false, true}) {
    PlanSpec spec;
    (worker_level ? spec.worker_strategy : spec.distributed_strategy) = "no_such_strategy";
    auto plan = plan_epoch(m, index, shards, spec, Topology{2, 2}, 2, 0);
    ASSERT_FALSE(plan.is_ok());
    EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(plan.status().message().find("'no_such_strategy'"), std::string::npos)
        << plan.status().message();
    EXPECT_NE(plan.status().message().find("strided"), std::string::npos)
        << "the message lists the registered strategies: " << plan.status().message();
  }
  EXPECT_FALSE(StrategyRegistry::global().get("no_such_strategy").is_ok());
}

TEST(Strategies, StrategyReturningABadAssignmentIsAnError) {
  Manifest m = make_manifest({20});
  ItemIndex index(m);
  LogicalShards shards(20, 6);
  auto& registry = StrategyRegistry::global();
  ASSERT_TRUE(
      registry
          .add("test_one_too_many", [](const std::vector<ShardInfo>& s,
                                       uint32_t) { return std::vector<uint32_t>(s.size() + 1, 0); })
          .is_ok());
  ASSERT_TRUE(registry
                  .add("test_out_of_range",
                       [](const std::vector<ShardInfo>& s, uint32_t parts) {
                         return std::vector<uint32_t>(s.size(), parts);
                       })
                  .is_ok());
  ASSERT_TRUE(
      registry
          .add("test_all_on_zero", [](const std::vector<ShardInfo>& s,
                                      uint32_t) { return std::vector<uint32_t>(s.size(), 0); })
          .is_ok());
  struct Bad {
    std::string name;
    bool worker_level;
    std::string says;
  };
  for (const auto& bad : std::vector<Bad>{{"test_one_too_many", false, "parts for"},
                                          {"test_one_too_many", true, "parts for"},
                                          {"test_out_of_range", false, "returned part"},
                                          {"test_out_of_range", true, "returned part"},
                                          {"test_all_on_zero", false, "no logical shard"}}) {
    PlanSpec spec;
    (bad.worker_level ? spec.worker_strategy : spec.distributed_strategy) = bad.name;
    auto plan = plan_epoch(m, index, shards, spec, Topology{3, 2}, 2, 0);
    ASSERT_FALSE(plan.is_ok()) << bad.name;
    EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument) << bad.name;
    EXPECT_NE(plan.status().message().find(bad.name), std::string::npos) << plan.status().message();
    EXPECT_NE(plan.status().message().find(bad.says), std::string::npos) << plan.status().message();
  }
}

TEST(Strategies, RegistryRejectsAnEmptyNameOrFunction) {
  EXPECT_EQ(StrategyRegistry::global().add("", assign_strided).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(StrategyRegistry::global().add("test_null", ShardingStrategy()).code(),
            StatusCode::kInvalidArgument);
}

// ---- plan_epoch arguments -------------------------------------------------------------------

TEST(PlanEpoch, RejectsZeroRanksWorkersOrBatchSize) {
  Manifest m = make_manifest({10});
  ItemIndex index(m);
  LogicalShards shards(10, 4);
  PlanSpec spec;
  EXPECT_EQ(plan_epoch(m, index, shards, spec, Topology{0, 1}, 2, 0).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(plan_epoch(m, index, shards, spec, Topology{1, 0}, 2, 0).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(plan_epoch(m, index, shards, spec, Topology{1, 1}, 0, 0).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(PlanEpoch, FewerLogicalShardsThanRanksIsAnErrorNamingBoth) {
  Manifest m = make_manifest({10});
  ItemIndex index(m);
  LogicalShards shards(10, 3);
  auto plan = plan_epoch(m, index, shards, PlanSpec{}, Topology{4, 1}, 2, 0);
  ASSERT_FALSE(plan.is_ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("3 logical shards"), std::string::npos);
  EXPECT_NE(plan.status().message().find("4 ranks"), std::string::npos);
}

// runtime/shard.h promises: "Fails on ... fewer items than ranks". With N < R some rank
// would get no item at all and every one of its batches would be empty.
TEST(PlanEpoch, FailsWhenFewerItemsThanRanks) {
  Manifest m = make_manifest({3});
  ItemIndex index(m);
  LogicalShards shards(3, 4);
  auto plan = plan_epoch(m, index, shards, PlanSpec{}, Topology{4, 1}, 1, 0);
  EXPECT_FALSE(plan.is_ok()) << "3 items were planned onto 4 ranks";
  if (!plan.is_ok()) {
    EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(PlanEpoch, EpochKeyDependsOnSeedAndEpochOnly) {
  Manifest m = make_manifest({10, 10});
  ItemIndex index(m);
  LogicalShards shards(20, 4);
  PlanSpec spec;
  spec.seed = 3;
  auto a = plan_epoch(m, index, shards, spec, Topology{1, 1}, 2, 0);
  auto b = plan_epoch(m, index, shards, spec, Topology{2, 3}, 5, 0);
  auto c = plan_epoch(m, index, shards, spec, Topology{1, 1}, 2, 1);
  ASSERT_TRUE(a.is_ok() && b.is_ok() && c.is_ok());
  EXPECT_EQ(a->epoch_key, b->epoch_key);
  EXPECT_NE(a->epoch_key, c->epoch_key);
  EXPECT_EQ(c->epoch, 1u);
  EXPECT_EQ(a->epoch_key, epoch_key(3, 0)) << "the coordinator hands out this key";
  EXPECT_EQ(c->epoch_key, epoch_key(3, 1));
}

// ---- defaults ---------------------------------------------------------------------------------

TEST(Defaults, LogicalShardsDependOnTheDatasetOnly) {
  EXPECT_EQ(default_logical_shards(0, 5), 1u);
  EXPECT_EQ(default_logical_shards(100000, 1000), 256u);
  EXPECT_EQ(default_logical_shards(100000, 256), 256u);
  EXPECT_EQ(default_logical_shards(100000, 100), 100u);
  EXPECT_EQ(default_logical_shards(100000, 64), 64u);
  EXPECT_EQ(default_logical_shards(100000, 10), 70u);
  EXPECT_EQ(default_logical_shards(100000, 1), 64u);
  EXPECT_EQ(default_logical_shards(30, 10), 30u);
  for (uint64_t items : {1u, 10u, 63u, 64u, 100u, 1000000u}) {
    for (size_t sources : {0u, 1u, 3u, 10u, 63u, 64u, 200u, 256u, 300u}) {
      uint32_t l = default_logical_shards(items, sources);
      EXPECT_GE(l, 1u);
      EXPECT_LE(l, items) << "never more shards than items";
      EXPECT_LE(l, 256u);
      if (items >= 256) {
        EXPECT_GE(l, 64u) << items << " items, " << sources << " sources";
        if (sources > 0 && sources < 256) {
          EXPECT_EQ(l % sources, 0u) << "whole sources";
        }
      }
    }
  }
}

TEST(Defaults, ChunkItemsShrinkWithPayloadAndStayInRange) {
  EXPECT_EQ(default_chunk_items(Manifest{}, 64), 1u);
  uint32_t previous = UINT32_MAX;
  for (uint64_t payload : {1u, 100u, 10000u, 1000000u, 100000000u}) {
    Manifest m = make_manifest({50, 50});
    for (auto& s : m.sources)
      testing::edit_samples(&s.samples, [&](SampleEntry& e) { e.payload_bytes = payload; });
    for (uint32_t l : {0u, 1u, 64u, 256u}) {
      uint32_t c = default_chunk_items(m, l);
      EXPECT_GE(c, 1u);
      EXPECT_LE(c, 8192u);
    }
    uint32_t c = default_chunk_items(m, 64);
    EXPECT_LE(c, previous) << payload;
    previous = c;
  }
  EXPECT_EQ(previous, 1u) << "a 100 MB sample is its own chunk";
}

// Tiny samples: what a chunk holds is each sample's range of the tar (header and padding
// included) and its decoded item, not its payload, so a chunk of 8-byte samples is about
// 100 items (128 KiB at L = 64), not 8192 (when an open chunk per logical shard held every
// item of a 200,000-sample dataset at once).
TEST(Defaults, ChunkItemsCountWhatAnItemHolds) {
  Manifest m = make_manifest({3000, 3000});  // tar ranges of 1024 bytes
  for (auto& s : m.sources)
    testing::edit_samples(&s.samples, [](SampleEntry& e) { e.payload_bytes = 8; });
  EXPECT_EQ(held_bytes(m), 6000u * 1024);
  const uint64_t target = 128 << 10;  // 8 MiB / 64
  EXPECT_EQ(default_chunk_items(m, 64), target / (1024 + kItemCostBytes));
  // A directory's ranges are file indices: its samples count their payload.
  for (auto& s : m.sources) {
    s.kind = SourceKind::kDirectory;
    testing::edit_samples(&s.samples, [](SampleEntry& e) { e.payload_bytes = 4096; });
  }
  EXPECT_EQ(held_bytes(m), 6000u * 4096);
  EXPECT_EQ(default_chunk_items(m, 64), target / (4096 + kItemCostBytes));
  // Windows: their payload (x plus y), as a batch copies them: 4 months of 1.5 KiB windows
  // take 2 MiB / (1536 + 256) windows per chunk.
  Manifest w;
  w.windows = make_window_spec(24, 1, 0, false, 64);
  for (int i = 0; i < 4; ++i) {
    SourceEntry src;
    src.kind = SourceKind::kRecords;
    src.records = 1023;
    src.windows = 1000;
    w.sources.push_back(src);
  }
  EXPECT_EQ(held_bytes(w), 4000u * 1536);
  EXPECT_EQ(default_chunk_items(w, 4), (2u << 20) / (1536 + kItemCostBytes));
}

// A stream without shuffle reads about max(32 KiB, 2 MiB / L) at once, a quarter of a
// default chunk, counted as chunks are; a sample larger than that is read alone.
TEST(Defaults, ReadItemsAreAQuarterOfAChunk) {
  Manifest m = make_manifest({3000, 3000});  // tar ranges of 1024 bytes
  const uint64_t per_item = 1024 + kItemCostBytes;
  EXPECT_EQ(default_read_items(m, 64), (32u << 10) / per_item);
  EXPECT_EQ(default_chunk_items(m, 64), (128u << 10) / per_item);
  EXPECT_EQ(default_read_items(m, 4), (512u << 10) / per_item);
  EXPECT_EQ(default_chunk_items(m, 4), (2u << 20) / per_item);
  EXPECT_EQ(default_read_items(m, 1024), (32u << 10) / per_item) << "the floor";
  for (auto& s : m.sources)
    testing::edit_samples(&s.samples, [](SampleEntry& e) { e.payload_bytes = 1 << 20; });
  EXPECT_EQ(default_read_items(m, 64), 1u);
  EXPECT_EQ(default_read_items(Manifest{}, 64), 1u);
}
}  // namespace
}  // namespace shardyard
