// RankMerger and RankCursor (actors/state/merger.h): the output of a rank's workers, each on
// its own thread, merged into the rank's batches, in exact order or as completed.
#include "actors/state/merger.h"

#include <gtest/gtest.h>

#include <future>
#include <map>

#include "state_fixture.h"

namespace shardyard::actors {
namespace {

using testing::assign;
using testing::JobSpec;
using testing::make_test_job;

struct EpochRun {
  std::vector<std::vector<std::string>> batches;  // keys, by step
  std::vector<uint64_t> consumed;                 // the cursor after the last step
  Status status;
};

// One epoch of rank 0 with `workers` workers: workers on threads, the merger on this one.
EpochRun run_epoch(const std::shared_ptr<const JobData>& job, bool exact) {
  const uint32_t w_count = job->topology.workers;
  EpochAssignment a = assign(job, 0, 0, !exact);
  std::vector<std::shared_ptr<io::Channel>> channels;
  if (exact) {
    for (uint32_t w = 0; w < w_count; ++w)
      channels.push_back(job->data_plane->open_channel(a.units[w].channel, 1, 2));
  } else {
    channels.push_back(job->data_plane->open_channel("all", w_count, 2 * w_count));
  }
  std::vector<std::future<Result<UnitStats>>> workers;
  for (uint32_t w = 0; w < w_count; ++w)
    workers.push_back(std::async(std::launch::async, [&, w] {
      WorkerCore core(job, 0, w);
      auto ch = job->data_plane->attach(a.units[w].channel);
      return core.run(a.units[w], *ch);
    }));
  RankCursor cursor(a.ticket, w_count, {});
  RankMerger merger(job, 0, a.ticket, channels, exact);
  EpochRun run;
  for (;;) {
    StepProgress progress;
    auto b = merger.next(&progress);
    if (!b.is_ok()) {
      run.status = b.status();
      break;
    }
    if (!b->has_value()) break;
    EXPECT_EQ((*b)->step(), run.batches.size());
    EXPECT_EQ(progress.shard_index.size(), (*b)->size());
    cursor.apply(progress);
    run.batches.push_back((*b)->keys());
  }
  for (auto& w : workers) EXPECT_TRUE(w.get().is_ok());
  run.consumed = cursor.consumed();
  EXPECT_EQ(merger.steps(), run.batches.size());
  return run;
}

class RankMergerTest : public ::testing::Test {
 protected:
  std::shared_ptr<const JobData> job(uint32_t workers, bool exact = true) {
    JobSpec spec;
    spec.shards = 5;
    spec.samples = 13;
    spec.topology = Topology{1, workers};
    spec.batch_size = 6;
    spec.exact_order = exact;
    spec.plan.shuffle = true;
    spec.plan.seed = 5;
    spec.plan.logical_shards = 6;
    spec.plan.chunk_items = 4;
    return make_test_job(tmp_.path() + "/" + std::to_string(++n_), spec);
  }
  testing::TempDir tmp_;
  int n_ = 0;
};

TEST_F(RankMergerTest, ExactOrderGivesTheSameBatchesWhateverTheNumberOfWorkers) {
  EpochRun one = run_epoch(job(1), true);
  ASSERT_TRUE(one.status.is_ok()) << one.status.to_string();
  ASSERT_EQ(one.batches.size(), (65u + 5) / 6);
  std::set<std::string> keys;
  for (size_t s = 0; s < one.batches.size(); ++s) {
    EXPECT_EQ(one.batches[s].size(), s + 1 < one.batches.size() ? 6u : 65u - 6 * s);
    for (const auto& k : one.batches[s]) EXPECT_TRUE(keys.insert(k).second) << k << " twice";
  }
  EXPECT_EQ(keys.size(), 65u);
  for (uint32_t w : {2u, 3u}) {
    EpochRun many = run_epoch(job(w), true);
    ASSERT_TRUE(many.status.is_ok()) << many.status.to_string();
    EXPECT_EQ(many.batches, one.batches) << w << " workers";
  }
  // The cursor counts every item of every shard as consumed.
  uint64_t consumed = 0;
  for (uint64_t c : one.consumed) consumed += c;
  EXPECT_EQ(consumed, 65u);
}

TEST_F(RankMergerTest, AsCompletedDeliversEveryItemOnce) {
  EpochRun run = run_epoch(job(3, false), false);
  ASSERT_TRUE(run.status.is_ok()) << run.status.to_string();
  std::multiset<std::string> keys;
  for (const auto& b : run.batches) keys.insert(b.begin(), b.end());
  EXPECT_EQ(keys.size(), 65u);
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()).size(), 65u);
}

TEST_F(RankMergerTest, CancelUnblocksAMergerWaitingForItsWorkers) {
  auto j = job(2);
  EpochAssignment a = assign(j, 0, 0, false);
  std::vector<std::shared_ptr<io::Channel>> channels;
  for (uint32_t w = 0; w < 2; ++w)
    channels.push_back(j->data_plane->open_channel(a.units[w].channel, 1, 2));
  RankMerger merger(j, 0, a.ticket, channels, true);
  // No worker runs: next() blocks until another thread cancels.
  auto waiting = std::async(std::launch::async, [&] { return merger.next(); });
  EXPECT_EQ(waiting.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  merger.cancel();
  auto b = waiting.get();
  ASSERT_FALSE(b.is_ok());
  EXPECT_EQ(b.status().code(), StatusCode::kCancelled);
}

}  // namespace
}  // namespace shardyard::actors
