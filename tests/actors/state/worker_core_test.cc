// WorkerCore (actors/state/worker_core.h): a worker's unit, produced on its own thread into a
// data-plane channel that this test's thread drains, as the loader does.
#include <gtest/gtest.h>

#include <future>

#include "actors/state/worker_core.h"
#include "state_fixture.h"

namespace shardyard::actors {
namespace {

using testing::assign;
using testing::JobSpec;
using testing::make_test_job;
using testing::shard_order;

// Pops every packet of `channel`; the items, or the error it ended with.
Result<std::vector<Item>> drain(io::Channel& channel, size_t stop_after_packets = SIZE_MAX) {
  std::vector<Item> items;
  io::Packet p;
  for (size_t n = 0; n < stop_after_packets; ++n) {
    SY_ASSIGN_OR_RETURN(bool got, channel.pop(&p));
    if (!got) break;
    for (auto& it : p.items) items.push_back(std::move(it));
  }
  return items;
}

class WorkerCoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    JobSpec spec;
    spec.topology = Topology{1, 2};
    spec.plan.shuffle = true;
    spec.plan.seed = 11;
    spec.plan.logical_shards = 5;
    spec.plan.chunk_items = 3;
    job_ = make_test_job(tmp_.path(), spec);
    ASSERT_NE(job_, nullptr);
  }
  testing::TempDir tmp_;
  std::shared_ptr<const JobData> job_;
};

TEST_F(WorkerCoreTest, ProducesItsShardsInInterleaveOrderThenEndsTheChannel) {
  const EpochAssignment a = assign(job_, 0, 1, false);
  ASSERT_EQ(a.units.size(), 2u);
  uint64_t total = 0;
  for (uint32_t w = 0; w < 2; ++w) {
    const WorkUnit& unit = a.units[w];
    auto channel = job_->data_plane->open_channel(unit.channel, 1, 2);  // backpressure
    WorkerCore core(job_, 0, w);
    auto produced = std::async(std::launch::async, [&] { return core.run(unit, *channel); });
    auto items = drain(*channel);
    auto stats = produced.get();
    ASSERT_TRUE(items.is_ok()) << items.status().to_string();
    ASSERT_TRUE(stats.is_ok()) << stats.status().to_string();
    // The expected order: the unit's interleave over each shard's epoch order.
    std::vector<std::vector<uint64_t>> orders;
    for (uint32_t s : unit.shards) orders.push_back(shard_order(*job_, s, unit.epoch_key));
    std::vector<size_t> at(unit.shards.size(), 0);
    InterleaveCursor order(unit.take, unit.consumed);
    size_t i = 0;
    uint64_t bytes = 0;
    while (!order.done()) {
      const uint32_t k = order.next();
      ASSERT_LT(i, items->size());
      EXPECT_EQ((*items)[i].id, orders[k][at[k]++]) << "worker " << w << ", item " << i;
      EXPECT_EQ((*items)[i].shard, unit.shards[k]);
      EXPECT_EQ((*items)[i].worker, w);
      bytes += (*items)[i].payload_bytes();
      ++i;
    }
    EXPECT_EQ(i, items->size());
    EXPECT_EQ(stats->items, items->size());
    EXPECT_EQ(stats->bytes, bytes);
    total += items->size();
  }
  EXPECT_EQ(total, job_->index.num_items());  // one rank: its workers hold every item
}

TEST_F(WorkerCoreTest, AUnitWithAMissingRouteFailsItsChannelWithTheName) {
  WorkUnit unit = assign(job_, 0, 0, false).units[0];
  unit.route = "r0/e0/route";  // never opened
  auto channel = job_->data_plane->open_channel(unit.channel, 1, 4);
  WorkerCore core(job_, 0, 0);
  auto r = core.run(unit, *channel);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("no route 'r0/e0/route'"), std::string::npos);
  auto items = drain(*channel);
  ASSERT_FALSE(items.is_ok());  // the loader sees the worker's error, not a short epoch
  EXPECT_EQ(items.status().message(), r.status().message());
}

TEST_F(WorkerCoreTest, ACancelledChannelStopsTheWorkerInsteadOfBlockingIt) {
  const WorkUnit unit = assign(job_, 0, 0, false).units[0];
  auto channel = job_->data_plane->open_channel(unit.channel, 1, 1);
  WorkerCore core(job_, 0, 0);
  auto produced = std::async(std::launch::async, [&] { return core.run(unit, *channel); });
  ASSERT_TRUE(drain(*channel, 1).is_ok());  // one packet, then the consumer gives up
  channel->cancel();
  auto r = produced.get();
  // A unit whose items fit in one packet may have ended before the cancel.
  if (!r.is_ok()) {
    EXPECT_EQ(r.status().code(), StatusCode::kCancelled);
  }
}

}  // namespace
}  // namespace shardyard::actors
