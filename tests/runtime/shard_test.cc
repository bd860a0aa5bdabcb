// Property tests of the shard math in runtime/shard.h: every item exactly once, equal steps
// on every rank, determinism, elastic determinism and worker views of the rank order, over
// many shapes of dataset and topology. Strategies, argument checks and defaults are in
// shard_strategy_test.cc.
#include "runtime/shard.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "test_manifest.h"

namespace shardyard {
namespace {

using testing::make_manifest;

struct Shape {
  std::string name;
  Manifest manifest;
  ItemIndex index;
};

std::vector<Shape> make_shapes() {
  std::vector<Shape> out;
  auto add = [&](std::string name, std::vector<uint64_t> sizes, SourceKind kind) {
    Manifest m = make_manifest(sizes, kind);
    ItemIndex index(m);
    out.push_back({std::move(name), std::move(m), std::move(index)});
  };
  add("equal sources", {25, 25, 25, 25}, SourceKind::kTar);
  add("unequal sources with an empty one", {1, 7, 0, 30, 3, 12}, SourceKind::kTar);
  add("97 items, not seekable", {40, 33, 24}, SourceKind::kTarGz);
  add("5 items", {2, 3}, SourceKind::kTar);
  return out;
}

const std::vector<uint32_t> kShardCounts = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10,
                                            11, 12, 13, 14, 15, 16, 17, 31, 64, 100};
const std::vector<uint32_t> kRanks = {1, 2, 3, 4, 5, 8};
const std::vector<uint32_t> kWorkers = {1, 2, 3, 4, 7};
const std::vector<uint32_t> kBatchSizes = {1, 3, 64};

// The epoch order of all items of logical shard j, chunk by chunk.
std::vector<uint64_t> shard_items(const LogicalShards& shards, uint32_t j, uint32_t chunk_items,
                                  bool shuffle, bool permute_chunks, uint64_t key) {
  ShardSequence seq(shards, j, chunk_items, shuffle, permute_chunks, key);
  std::vector<uint64_t> out;
  for (size_t c = 0; c < seq.num_chunks(); ++c) {
    for (uint32_t p : seq.chunk_permutation(c)) out.push_back(seq.chunk_begin(c) + p);
  }
  return out;
}

// Round-robin interleave of the first take[k] items of seqs[k], driven by InterleaveCursor.
// Each element is (sequence index, item id).
std::vector<std::pair<uint32_t, uint64_t>> interleave(
    const std::vector<std::vector<uint64_t>>& seqs, const std::vector<uint64_t>& take) {
  InterleaveCursor cursor(take);
  std::vector<size_t> pos(seqs.size(), 0);
  std::vector<std::pair<uint32_t, uint64_t>> out;
  while (!cursor.done()) {
    uint32_t k = cursor.next();
    out.emplace_back(k, seqs[k].at(pos[k]++));
  }
  return out;
}

// Everything a test needs to walk one planned epoch.
struct Walker {
  const LogicalShards& shards;
  uint32_t chunk_items;
  bool shuffle;
  bool permute_chunks;

  std::vector<std::vector<uint64_t>> sequences(const EpochPlan& plan, uint32_t r) const {
    std::vector<std::vector<uint64_t>> seqs;
    for (uint32_t j : plan.ranks[r].shards)
      seqs.push_back(shard_items(shards, j, chunk_items, shuffle, permute_chunks, plan.epoch_key));
    return seqs;
  }
  // Rank r's order: its shards interleaved, each limited by RankPlan::take.
  std::vector<std::pair<uint32_t, uint64_t>> rank_order(const EpochPlan& plan, uint32_t r) const {
    return interleave(sequences(plan, r), plan.ranks[r].take);
  }
  std::vector<uint64_t> rank_items(const EpochPlan& plan, uint32_t r) const {
    std::vector<uint64_t> out;
    for (const auto& [k, item] : rank_order(plan, r)) out.push_back(item);
    return out;
  }
};

uint32_t chunk_for(const Manifest& m, uint32_t l, bool small) {
  return small ? 4 : default_chunk_items(m, l);
}

struct Case {
  const Shape* shape;
  uint32_t l, r, w, b;
  bool shuffle, drop_last;
  uint64_t seed;
  uint32_t epoch;
  uint32_t chunk_items;

  std::string str() const {
    std::ostringstream o;
    o << "shape=" << shape->name << " L=" << l << " R=" << r << " W=" << w << " B=" << b
      << " shuffle=" << shuffle << " drop_last=" << drop_last << " seed=" << seed
      << " epoch=" << epoch << " chunk=" << chunk_items;
    return o.str();
  }
  PlanSpec spec() const {
    PlanSpec s;
    s.logical_shards = l;
    s.chunk_items = chunk_items;
    s.seed = seed;
    s.shuffle = shuffle;
    s.drop_last = drop_last;
    return s;
  }
};

// Calls fn(case, shards, plan) for every combination of the grids above whose plan is
// valid, and checks that the invalid ones (L < R) are refused. The worker count does not
// enter the rank order, so each combination gets one W, cycling through kWorkers (the
// full product over W is walked by WorkerOrderIsTheRankOrderRestrictedToItsShards).
void for_each_plan(
    const std::function<void(const Case&, const LogicalShards&, const EpochPlan&)>& fn) {
  static const std::vector<Shape> shapes = make_shapes();
  const std::vector<std::pair<uint64_t, uint32_t>> seed_epochs = {{1, 0}, {99, 3}, {7, 1}};
  size_t combination = 0;
  for (const auto& shape : shapes) {
    const uint64_t n = shape.manifest.num_samples();
    for (uint32_t l : kShardCounts) {
      LogicalShards shards(n, l);
      for (uint32_t r : kRanks) {
        for (bool shuffle : {false, true}) {
          for (const auto& [seed, epoch] : seed_epochs) {
            for (uint32_t b : kBatchSizes) {
              for (bool drop_last : {false, true}) {
                const uint32_t w = kWorkers[combination++ % kWorkers.size()];
                // Small chunks (many per shard) or the default (one per shard here).
                const uint32_t chunk = chunk_for(shape.manifest, l, seed != 99);
                Case c{&shape, l, r, w, b, shuffle, drop_last, seed, epoch, chunk};
                auto plan = plan_epoch(shape.manifest, shape.index, shards, c.spec(),
                                       Topology{r, w}, b, epoch);
                if (l < r) {
                  ASSERT_FALSE(plan.is_ok()) << c.str();
                  ASSERT_EQ(plan.status().code(), StatusCode::kInvalidArgument) << c.str();
                  continue;
                }
                // A rank left without items is refused (FailsWhenFewerItemsThanRanks); that
                // needs fewer items than ranks, or empty logical shards (L > N).
                if (!plan.is_ok() && (n < r || l > n) &&
                    plan.status().message().find("gets no item") != std::string::npos)
                  continue;
                ASSERT_TRUE(plan.is_ok()) << c.str() << ": " << plan.status().to_string();
                fn(c, shards, *plan);
                if (::testing::Test::HasFatalFailure()) return;
              }
            }
          }
        }
      }
    }
  }
}

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

TEST(PlanEpochProperty, EveryItemExactlyOncePerEpoch) {
  size_t plans = 0;
  for_each_plan([&](const Case& c, const LogicalShards& shards, const EpochPlan& plan) {
    ++plans;
    const uint64_t n = shards.num_items();
    Walker walk{shards, c.chunk_items, c.shuffle, c.shape->manifest.seekable()};
    ASSERT_EQ(plan.ranks.size(), c.r) << c.str();
    // The ranks' shard lists partition the logical shards.
    std::vector<uint32_t> all_shards;
    for (const auto& rp : plan.ranks) {
      ASSERT_EQ(rp.take.size(), rp.shards.size()) << c.str();
      ASSERT_EQ(rp.worker_of.size(), rp.shards.size()) << c.str();
      for (size_t k = 0; k < rp.shards.size(); ++k) {
        ASSERT_LT(rp.worker_of[k], c.w) << c.str();
        ASSERT_LE(rp.take[k], shards.size(rp.shards[k])) << c.str();
      }
      ASSERT_EQ(rp.items, std::accumulate(rp.take.begin(), rp.take.end(), uint64_t{0})) << c.str();
      all_shards.insert(all_shards.end(), rp.shards.begin(), rp.shards.end());
    }
    std::sort(all_shards.begin(), all_shards.end());
    std::vector<uint32_t> expected_shards(c.l);
    std::iota(expected_shards.begin(), expected_shards.end(), 0);
    ASSERT_EQ(all_shards, expected_shards) << c.str();

    std::vector<uint64_t> delivered;
    for (uint32_t r = 0; r < c.r; ++r) {
      auto items = walk.rank_items(plan, r);
      ASSERT_EQ(items.size(), plan.ranks[r].items) << c.str() << " rank " << r;
      if (c.drop_last) {
        ASSERT_EQ(items.size(), plan.steps * c.b) << c.str() << " rank " << r;
        // Dropping the tail keeps a prefix of the full rank order.
        std::vector<uint64_t> full_take;
        for (uint32_t j : plan.ranks[r].shards) full_take.push_back(shards.size(j));
        auto full = interleave(walk.sequences(plan, r), full_take);
        for (size_t i = 0; i < items.size(); ++i)
          ASSERT_EQ(items[i], full[i].second) << c.str() << " rank " << r << " pos " << i;
      }
      delivered.insert(delivered.end(), items.begin(), items.end());
    }
    std::sort(delivered.begin(), delivered.end());
    ASSERT_TRUE(std::adjacent_find(delivered.begin(), delivered.end()) == delivered.end())
        << c.str() << ": an item is delivered twice";
    if (!c.drop_last) {
      ASSERT_EQ(delivered.size(), n) << c.str();
      for (uint64_t g = 0; g < n; ++g) ASSERT_EQ(delivered[g], g) << c.str();
    } else {
      ASSERT_EQ(delivered.size(), plan.steps * c.b * c.r) << c.str();
    }
  });
  EXPECT_GT(plans, 10000u);  // 4 shapes x 20 L x 6 R x 36 others, less the L < R ones
}

TEST(PlanEpochProperty, EveryRankHasTheSameStepsAndBoundedBatches) {
  for_each_plan([&](const Case& c, const LogicalShards& shards, const EpochPlan& plan) {
    uint64_t max_steps = 0, min_steps = UINT64_MAX;
    for (const auto& rp : plan.ranks) {
      uint64_t own = 0;
      for (uint32_t j : rp.shards) own += shards.size(j);
      max_steps = std::max(max_steps, ceil_div(own, c.b));
      min_steps = std::min(min_steps, own / c.b);
    }
    ASSERT_EQ(plan.steps, c.drop_last ? min_steps : max_steps) << c.str();
    ASSERT_EQ(plan.batch_size, c.b) << c.str();
    for (uint32_t r = 0; r < c.r; ++r) {
      const uint64_t items = plan.ranks[r].items;
      ASSERT_EQ(plan.batch_begin(r, 0), 0u) << c.str();
      ASSERT_EQ(plan.batch_begin(r, plan.steps), items) << c.str();
      for (uint64_t s = 0; s < plan.steps; ++s) {
        ASSERT_LE(plan.batch_begin(r, s), plan.batch_begin(r, s + 1)) << c.str();
        const uint64_t size = plan.batch_items(r, s);
        ASSERT_LE(size, c.b) << c.str() << " rank " << r << " step " << s;
        if (items >= plan.steps) {
          ASSERT_GE(size, 1u) << c.str() << " rank " << r << " step " << s;
        }
        if (c.drop_last) {
          ASSERT_EQ(size, c.b) << c.str();
        }
      }
    }
  });
}

TEST(PlanEpochProperty, SameInputsGiveIdenticalPlansAndSequences) {
  size_t compared = 0;
  for_each_plan([&](const Case& c, const LogicalShards& shards, const EpochPlan& plan) {
    auto again = plan_epoch(c.shape->manifest, c.shape->index, shards, c.spec(), Topology{c.r, c.w},
                            c.b, c.epoch);
    ASSERT_TRUE(again.is_ok()) << c.str();
    ASSERT_EQ(again->epoch_key, plan.epoch_key) << c.str();
    ASSERT_EQ(again->shard_order, plan.shard_order) << c.str();
    ASSERT_EQ(again->steps, plan.steps) << c.str();
    Walker walk{shards, c.chunk_items, c.shuffle, c.shape->manifest.seekable()};
    for (uint32_t r = 0; r < c.r; ++r) {
      ASSERT_EQ(again->ranks[r].shards, plan.ranks[r].shards) << c.str();
      ASSERT_EQ(again->ranks[r].take, plan.ranks[r].take) << c.str();
      ASSERT_EQ(again->ranks[r].worker_of, plan.ranks[r].worker_of) << c.str();
      ASSERT_EQ(walk.rank_items(*again, r), walk.rank_items(plan, r)) << c.str();
    }
    ++compared;
  });
  EXPECT_GT(compared, 1000u);
}

// The global order of an epoch: every rank's order, rank after rank.
std::vector<uint64_t> epoch_order(const Manifest& m, const ItemIndex& index,
                                  const LogicalShards& shards, const PlanSpec& spec, uint32_t ranks,
                                  uint32_t epoch) {
  auto plan = plan_epoch(m, index, shards, spec, Topology{ranks, 1}, 8, epoch);
  EXPECT_TRUE(plan.is_ok()) << plan.status().to_string();
  if (!plan.is_ok()) return {};
  uint32_t chunk = spec.chunk_items ? spec.chunk_items : default_chunk_items(m, shards.count());
  Walker walk{shards, chunk, spec.shuffle, m.seekable()};
  std::vector<uint64_t> out;
  for (uint32_t r = 0; r < ranks; ++r) {
    auto items = walk.rank_items(*plan, r);
    out.insert(out.end(), items.begin(), items.end());
  }
  return out;
}

TEST(PlanEpochProperty, ShuffledEpochsDifferAndUnshuffledEpochsRepeat) {
  for (const auto& shape : make_shapes()) {
    const uint64_t n = shape.manifest.num_samples();
    if (n < 20) continue;  // too few items for "differs" to be near certain
    for (uint32_t l : {1u, 4u, 17u, 64u}) {
      LogicalShards shards(n, l);
      for (uint32_t r : {1u, 2u}) {
        if (l < r) continue;
        for (uint32_t chunk : {0u, 4u}) {
          PlanSpec spec;
          spec.logical_shards = l;
          spec.chunk_items = chunk;
          spec.seed = 5;
          spec.shuffle = true;
          auto e0 = epoch_order(shape.manifest, shape.index, shards, spec, r, 0);
          auto e1 = epoch_order(shape.manifest, shape.index, shards, spec, r, 1);
          ASSERT_EQ(e0.size(), n);
          EXPECT_NE(e0, e1) << shape.name << " L=" << l << " R=" << r << " chunk=" << chunk;
          spec.seed = 6;
          EXPECT_NE(e0, epoch_order(shape.manifest, shape.index, shards, spec, r, 0))
              << "another seed, " << shape.name << " L=" << l;
          spec.shuffle = false;
          auto u0 = epoch_order(shape.manifest, shape.index, shards, spec, r, 0);
          EXPECT_EQ(u0, epoch_order(shape.manifest, shape.index, shards, spec, r, 7));
          if (r == 1 && l == 1) {  // one shard, no shuffle: canonical order
            std::vector<uint64_t> canonical(n);
            std::iota(canonical.begin(), canonical.end(), 0);
            EXPECT_EQ(u0, canonical);
          }
        }
      }
    }
  }
}

TEST(PlanEpochProperty, GlobalBatchIsTheSameSetForEveryWorldSize) {
  size_t checked = 0;
  for (uint32_t l : {4u, 8u, 12u, 16u, 32u, 64u}) {
    for (uint64_t per_shard : {1u, 3u, 7u}) {
      const uint64_t n = l * per_shard;
      Manifest m = make_manifest({n / 2, n / 3, n - n / 2 - n / 3});
      ItemIndex index(m);
      LogicalShards shards(n, l);
      for (bool shuffle : {false, true}) {
        for (uint64_t seed : {3u, 11u}) {
          for (uint32_t epoch : {0u, 2u}) {
            for (uint32_t global_batch : {4u, 8u, 24u}) {
              for (bool drop_last : {false, true}) {
                for (uint32_t chunk : {2u, 0u}) {
                  PlanSpec spec;
                  spec.logical_shards = l;
                  spec.chunk_items = chunk;
                  spec.seed = seed;
                  spec.shuffle = shuffle;
                  spec.drop_last = drop_last;
                  spec.distributed_strategy = "strided";
                  const uint32_t chunk_items = chunk ? chunk : default_chunk_items(m, l);
                  Walker walk{shards, chunk_items, shuffle, m.seekable()};
                  // Step -> sorted items of the global batch, for one world size.
                  auto global_batches = [&](uint32_t r) {
                    std::vector<std::vector<uint64_t>> out;
                    auto plan = plan_epoch(m, index, shards, spec, Topology{r, r + 1},
                                           global_batch / r, epoch);
                    EXPECT_TRUE(plan.is_ok()) << plan.status().to_string();
                    if (!plan.is_ok()) return out;
                    out.resize(plan->steps);
                    for (uint32_t rank = 0; rank < r; ++rank) {
                      auto items = walk.rank_items(*plan, rank);
                      for (uint64_t s = 0; s < plan->steps; ++s)
                        for (uint64_t p = plan->batch_begin(rank, s);
                             p < plan->batch_begin(rank, s + 1); ++p)
                          out[s].push_back(items[p]);
                    }
                    for (auto& batch : out) std::sort(batch.begin(), batch.end());
                    return out;
                  };
                  const auto reference = global_batches(1);
                  for (uint32_t r : {2u, 4u}) {
                    if (l % r != 0 || global_batch % r != 0) continue;
                    ASSERT_EQ(global_batches(r), reference)
                        << "L=" << l << " N=" << n << " R=" << r << " global batch " << global_batch
                        << " shuffle=" << shuffle << " seed=" << seed << " epoch=" << epoch
                        << " drop_last=" << drop_last << " chunk=" << chunk;
                    ++checked;
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 1000u);
}

TEST(PlanEpochProperty, WorkerOrderIsTheRankOrderRestrictedToItsShards) {
  static const std::vector<Shape> shapes = make_shapes();
  size_t checked = 0;
  for (const auto& shape : shapes) {
    const uint64_t n = shape.manifest.num_samples();
    for (uint32_t l : kShardCounts) {
      LogicalShards shards(n, l);
      for (uint32_t r : kRanks) {
        if (l < r) continue;
        for (uint32_t w : kWorkers) {
          for (const char* worker_strategy : {"strided", "contiguous"}) {
            for (bool shuffle : {false, true}) {
              for (bool drop_last : {false, true}) {
                PlanSpec spec;
                spec.logical_shards = l;
                spec.seed = 21;
                spec.shuffle = shuffle;
                spec.drop_last = drop_last;
                spec.distributed_strategy = drop_last ? "contiguous" : "strided";
                spec.worker_strategy = worker_strategy;
                auto plan =
                    plan_epoch(shape.manifest, shape.index, shards, spec, Topology{r, w}, 3, 1);
                if (!plan.is_ok() && (n < r || l > n) &&
                    plan.status().message().find("gets no item") != std::string::npos)
                  continue;
                ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
                Walker walk{shards, 4, shuffle, shape.manifest.seekable()};
                for (uint32_t rank = 0; rank < r; ++rank) {
                  const auto& rp = plan->ranks[rank];
                  const auto seqs = walk.sequences(*plan, rank);
                  const auto order = interleave(seqs, rp.take);
                  size_t total = 0;
                  for (uint32_t worker = 0; worker < w; ++worker) {
                    std::vector<std::vector<uint64_t>> own_seqs;
                    std::vector<uint64_t> own_take;
                    for (size_t k = 0; k < rp.shards.size(); ++k) {
                      if (rp.worker_of[k] != worker) continue;
                      own_seqs.push_back(seqs[k]);
                      own_take.push_back(rp.take[k]);
                    }
                    std::vector<uint64_t> worker_order, restricted;
                    for (const auto& [k, item] : interleave(own_seqs, own_take))
                      worker_order.push_back(item);
                    for (const auto& [k, item] : order)
                      if (rp.worker_of[k] == worker) restricted.push_back(item);
                    ASSERT_EQ(worker_order, restricted)
                        << shape.name << " L=" << l << " R=" << r << " W=" << w << " rank=" << rank
                        << " worker=" << worker << " " << worker_strategy;
                    total += worker_order.size();
                  }
                  ASSERT_EQ(total, rp.items);
                  ++checked;
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 1000u);
}

TEST(InterleaveCounts, AgreesWithSteppingACursorAtEveryPrefix) {
  std::mt19937_64 rng(12345);
  for (int trial = 0; trial < 400; ++trial) {
    std::vector<uint64_t> sizes(rng() % 9);
    for (auto& s : sizes) s = rng() % 4 == 0 ? 0 : rng() % 13;
    const uint64_t total = std::accumulate(sizes.begin(), sizes.end(), uint64_t{0});
    InterleaveCursor cursor(sizes);
    std::vector<uint64_t> counts(sizes.size(), 0);
    for (uint64_t p = 0; p <= total + 2; ++p) {
      ASSERT_EQ(interleave_counts(sizes, p), counts) << "trial " << trial << " prefix " << p;
      if (p < total) {
        ASSERT_FALSE(cursor.done());
        uint32_t k = cursor.next();
        ASSERT_LT(k, sizes.size());
        ++counts[k];
        ASSERT_LE(counts[k], sizes[k]);
      } else {
        ASSERT_TRUE(cursor.done());
      }
    }
    ASSERT_EQ(counts, sizes);
  }
}

TEST(InterleaveCounts, HandlesLargeSizesWithoutWalking) {
  const std::vector<uint64_t> sizes = {uint64_t{1} << 40, 3, 0, uint64_t{1} << 41};
  EXPECT_EQ(interleave_counts(sizes, 10), (std::vector<uint64_t>{4, 3, 0, 3}));
  const uint64_t p = (uint64_t{1} << 40) * 2 + 3 + 5;
  EXPECT_EQ(interleave_counts(sizes, p),
            (std::vector<uint64_t>{uint64_t{1} << 40, 3, 0, (uint64_t{1} << 40) + 5}));
}

TEST(InterleaveCursor, IsRoundRobinInListOrderAndSkipsEmptySequences) {
  InterleaveCursor cursor({2, 0, 1, 3});
  std::vector<uint32_t> got;
  while (!cursor.done()) got.push_back(cursor.next());
  EXPECT_EQ(got, (std::vector<uint32_t>{0, 2, 3, 0, 3, 3}));
  EXPECT_TRUE(InterleaveCursor({}).done());
  EXPECT_TRUE(InterleaveCursor({0, 0}).done());
}

TEST(LogicalShards, AreBalancedContiguousRangesCoveringAllItems) {
  for (uint64_t n = 0; n <= 50; ++n) {
    for (uint32_t l = 1; l <= 60; ++l) {
      LogicalShards shards(n, l);
      ASSERT_EQ(shards.begin(0), 0u);
      ASSERT_EQ(shards.end(l - 1), n);
      for (uint32_t j = 0; j < l; ++j) {
        if (j > 0) {
          ASSERT_EQ(shards.begin(j), shards.end(j - 1));
        }
        ASSERT_GE(shards.size(j), n / l) << n << " " << l;
        ASSERT_LE(shards.size(j), ceil_div(n, l)) << n << " " << l;
      }
    }
  }
}

TEST(ItemIndex, LocatesEveryItemAcrossEmptySources) {
  Manifest m = make_manifest({0, 3, 0, 0, 2, 1, 0});
  ItemIndex index(m);
  ASSERT_EQ(index.num_items(), 6u);
  ASSERT_EQ(index.num_sources(), 7u);
  const std::vector<std::pair<uint32_t, uint64_t>> want = {{1, 0}, {1, 1}, {1, 2},
                                                           {4, 0}, {4, 1}, {5, 0}};
  for (uint64_t g = 0; g < 6; ++g) {
    auto loc = index.locate(g);
    EXPECT_EQ(loc.source, want[g].first) << g;
    EXPECT_EQ(loc.sample, want[g].second) << g;
    EXPECT_EQ(index.source_begin(loc.source) + loc.sample, g);
    EXPECT_LT(g, index.source_end(loc.source));
  }
  EXPECT_EQ(ItemIndex().num_items(), 0u);
}

TEST(ShardSequence, CoversItsShardExactlyOnceInBoundedChunks) {
  for (uint64_t n : {0u, 1u, 10u, 97u}) {
    for (uint32_t l : {1u, 3u, 8u}) {
      LogicalShards shards(n, l);
      for (uint32_t chunk : {0u, 1u, 4u, 1000u}) {
        for (bool shuffle : {false, true}) {
          for (bool permute : {false, true}) {
            for (uint32_t j = 0; j < l; ++j) {
              ShardSequence seq(shards, j, chunk, shuffle, permute, 77);
              std::vector<uint64_t> items;
              uint64_t prev_begin = 0;
              for (size_t c = 0; c < seq.num_chunks(); ++c) {
                ASSERT_LE(seq.chunk_end(c) - seq.chunk_begin(c), std::max(1u, chunk));
                ASSERT_LT(seq.chunk_begin(c), seq.chunk_end(c));
                if (!(shuffle && permute) && c > 0) {
                  ASSERT_GT(seq.chunk_begin(c), prev_begin);
                }
                prev_begin = seq.chunk_begin(c);
                auto perm = seq.chunk_permutation(c);
                ASSERT_EQ(perm.size(), seq.chunk_end(c) - seq.chunk_begin(c));
                for (size_t i = 0; i < perm.size(); ++i) {
                  if (!shuffle) {
                    ASSERT_EQ(perm[i], i);
                  }
                  items.push_back(seq.chunk_begin(c) + perm[i]);
                }
              }
              auto sorted = items;
              std::sort(sorted.begin(), sorted.end());
              std::vector<uint64_t> want(shards.size(j));
              std::iota(want.begin(), want.end(), shards.begin(j));
              ASSERT_EQ(sorted, want);
              if (!shuffle) {
                ASSERT_EQ(items, want);
              }
            }
          }
        }
      }
    }
  }
}

TEST(SeededPermutation, IsADeterministicPermutation) {
  for (uint32_t n : {0u, 1u, 2u, 7u, 100u}) {
    auto p = seeded_permutation(n, 42);
    EXPECT_EQ(p, seeded_permutation(n, 42));
    auto sorted = p;
    std::sort(sorted.begin(), sorted.end());
    std::vector<uint32_t> want(n);
    std::iota(want.begin(), want.end(), 0);
    EXPECT_EQ(sorted, want);
  }
  EXPECT_NE(seeded_permutation(100, 1), seeded_permutation(100, 2));
}

}  // namespace
}  // namespace shardyard
