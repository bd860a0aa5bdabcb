// The role state classes without any actor system.
#include <gtest/gtest.h>

#include <set>

#include "../testdata.h"
#include "actors/state/coordinator_state.h"
#include "actors/state/dispatcher_state.h"
#include "io/format/manifest_scan.h"

namespace shardyard::actors {
namespace {

JobInfo job_info() {
  JobInfo j;
  j.fingerprint = 42;
  j.world_size = 2;
  j.workers = 3;
  j.seed = 5;
  return j;
}

// A rank's join as the loader sends it: the job as the rank built it.
JoinRequest join_of(uint32_t rank, const JobInfo& job = job_info()) {
  JoinRequest r;
  r.rank = rank;
  r.workers = job.workers;
  r.fingerprint = job.fingerprint;
  r.job = job;
  return r;
}

TEST(CoordinatorStateTest, AdmitsMatchingRanksAndCompletesTheWorldWithTheLast) {
  CoordinatorState c(job_info());
  auto first = c.join(join_of(0));
  ASSERT_TRUE(first.is_ok());
  EXPECT_FALSE(first->world_complete);
  EXPECT_FALSE(c.join(join_of(2)).is_ok());  // outside the world: refused, the job goes on
  EXPECT_TRUE(c.failure().is_ok());
  auto second = c.join(join_of(1));
  ASSERT_TRUE(second.is_ok());
  EXPECT_TRUE(second->world_complete);
  EXPECT_EQ(second->job.fingerprint, 42u);
}

TEST(CoordinatorStateTest, ARankOfAnotherProtocolVersionIsRefused) {
  CoordinatorState c(job_info());
  JoinRequest r = join_of(0);
  r.protocol_version = kProtocolVersion + 1;
  auto other_version = c.join(r);
  ASSERT_FALSE(other_version.is_ok());
  EXPECT_NE(other_version.status().message().find(
                "speaks protocol version " + std::to_string(kProtocolVersion + 1) +
                "; this coordinator speaks version " + std::to_string(kProtocolVersion)),
            std::string::npos)
      << other_version.status().message();
}

TEST(CoordinatorStateTest, ARankOfAnotherDatasetStopsTheJob) {
  CoordinatorState c(job_info());
  ASSERT_TRUE(c.join(join_of(0)).is_ok());
  JobInfo other = job_info();
  other.fingerprint = 43;
  auto refused = c.join(join_of(1, other));
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("dataset"), std::string::npos);
  EXPECT_FALSE(c.failure().is_ok());
  EXPECT_FALSE(c.epoch_key(0).is_ok());  // every later request fails with it
  EXPECT_EQ(c.epoch_key(0).status().message(), refused.status().message());
}

TEST(CoordinatorStateTest, ACoordinatorOfItsOwnTakesTheJobFromTheFirstRank) {
  auto c = CoordinatorState::for_world(2, 0);
  EXPECT_FALSE(c.has_job());
  ASSERT_TRUE(c.join(join_of(1)).is_ok());
  EXPECT_TRUE(c.has_job());
  JobInfo other = job_info();
  other.seed = 6;
  auto refused = c.join(join_of(0, other));
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("rank 0 does not agree with the job on the seed: "
                                            "the job has 5, rank 0 has 6"),
            std::string::npos)
      << refused.status().message();
}

TEST(CoordinatorStateTest, AWorldOfAnotherSizeOrAnotherRestartIsRefused) {
  auto c = CoordinatorState::for_world(3, 1);
  JoinRequest r = join_of(0);  // describes a world of 2
  r.restart_count = 1;
  EXPECT_FALSE(c.join(r).is_ok());
  auto d = CoordinatorState::for_world(2, 1);
  JoinRequest stale = join_of(0);
  stale.restart_count = 0;
  auto refused = d.join(stale);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(d.failure().is_ok());  // another restart's rank does not stop this one
}

TEST(CoordinatorStateTest, TwoProcessesWithOneRankStopTheJob) {
  CoordinatorState c(job_info());
  ASSERT_TRUE(c.join(join_of(0)).is_ok());
  auto twice = c.join(join_of(0));
  ASSERT_FALSE(twice.is_ok());
  EXPECT_NE(twice.status().message().find("joined twice"), std::string::npos);
}

TEST(CoordinatorStateTest, ALostRankStopsTheJobUnlessItLeftFirst) {
  CoordinatorState c(job_info());
  ASSERT_TRUE(c.join(join_of(0)).is_ok());
  ASSERT_TRUE(c.join(join_of(1)).is_ok());
  c.leave(RankLeave{0, true, ""});
  c.rank_lost(0, "its connection closed");  // left first: a normal end
  EXPECT_TRUE(c.failure().is_ok());
  EXPECT_FALSE(c.all_left());
  c.rank_lost(1, "its connection closed");
  ASSERT_FALSE(c.failure().is_ok());
  EXPECT_NE(c.failure().message().find("rank 1 was lost: its connection closed"),
            std::string::npos);
}

TEST(CoordinatorStateTest, ARankThatLeavesWithAnErrorStopsTheJob) {
  CoordinatorState c(job_info());
  ASSERT_TRUE(c.join(join_of(0)).is_ok());
  ASSERT_TRUE(c.join(join_of(1)).is_ok());
  c.leave(RankLeave{1, false, "corrupt shard x.tar"});
  ASSERT_FALSE(c.failure().is_ok());
  EXPECT_NE(c.failure().message().find("rank 1 stopped with an error: corrupt shard x.tar"),
            std::string::npos);
  CoordinatorState d(job_info());
  d.leave(RankLeave{0, true, ""});
  d.leave(RankLeave{1, true, ""});
  EXPECT_TRUE(d.all_left());
}

TEST(CoordinatorStateTest, HandsOutOneKeyPerEpochAndTracksCompletion) {
  CoordinatorState c(job_info());
  EXPECT_EQ(c.epoch_key(3)->key, c.epoch_key(3)->key);
  EXPECT_NE(c.epoch_key(3)->key, c.epoch_key(4)->key);
  EXPECT_EQ(c.epoch_key(3)->key, shardyard::epoch_key(5, 3));
  c.rank_done(RankEpochDone{0, 1, 10, 100});
  EXPECT_FALSE(c.epoch_complete(1));
  c.rank_done(RankEpochDone{1, 1, 10, 100});
  EXPECT_TRUE(c.epoch_complete(1));
}

RankSaved saved(uint32_t rank, uint64_t generation) {
  return RankSaved{rank, "/ck", generation, 0, 5, 9, 0, false, "f", 1, 2, {}};
}

// A rank that cannot write its file aborts the cut for every rank: those that saved, those
// still writing and those that begin it later all get the error naming the failed rank,
// each once; then beginning the same cut again is a retry, a new cut.
TEST(CoordinatorStateTest, AFailedRankFileAbortsTheCutForEveryRank) {
  JobInfo job = job_info();
  job.world_size = 4;
  CoordinatorState c(job);
  for (uint32_t r = 0; r < 4; ++r) ASSERT_TRUE(c.join(join_of(r, job)).is_ok());
  auto g = c.begin_save(CheckpointBegin{0, "/ck", 0, 5, 3});
  ASSERT_TRUE(g.is_ok());
  ASSERT_TRUE(c.begin_save(CheckpointBegin{1, "/ck", 0, 5, 3}).is_ok());
  ASSERT_TRUE(c.begin_save(CheckpointBegin{2, "/ck", 0, 5, 3}).is_ok());
  ASSERT_TRUE(c.rank_saved(saved(0, *g), 0).is_ok());  // rank 0 waits for the commit
  // Rank 1 cannot write.
  Status error = c.save_failed(RankSaveFailed{1, "/ck", *g, "i/o error: disk full"});
  ASSERT_FALSE(error.is_ok());
  EXPECT_NE(error.message().find("rank 1"), std::string::npos) << error.message();
  EXPECT_NE(error.message().find("disk full"), std::string::npos) << error.message();
  EXPECT_FALSE(c.save_pending());
  // Rank 2 was writing: its report gets the same error, not a wait.
  auto late = c.rank_saved(saved(2, *g), 0);
  ASSERT_FALSE(late.is_ok());
  EXPECT_EQ(late.status().message(), error.message());
  // Rank 3 had not begun: it gets the error at once instead of opening a cut nobody ends.
  auto begin3 = c.begin_save(CheckpointBegin{3, "/ck", 0, 5, 3});
  ASSERT_FALSE(begin3.is_ok());
  EXPECT_EQ(begin3.status().message(), error.message());
  EXPECT_FALSE(c.save_pending());
  // Everyone heard: the same cut again is a retry with a new generation.
  auto retry = c.begin_save(CheckpointBegin{1, "/ck", 0, 5, *g + 1});
  ASSERT_TRUE(retry.is_ok());
  EXPECT_GT(*retry, *g);
  EXPECT_TRUE(c.save_pending());
  // A failure reported for a cut that is no longer pending changes nothing.
  EXPECT_TRUE(c.save_failed(RankSaveFailed{2, "/ck", *g, "late"}).is_ok());
  EXPECT_TRUE(c.save_pending());
}

TEST(DispatcherStateTest, UnitsCoverTheRankShareOncePerWorker) {
  testing::TempDir tmp;
  auto pattern = testing::make_dataset(tmp.path(), 5, 13, 100, 1);
  ASSERT_FALSE(pattern.empty());
  io::ScanReport report;
  auto m = io::build_manifest(io::local_file_system(), {pattern}, io::ScanOptions{}, &report);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  PlanSpec spec;
  spec.shuffle = true;
  spec.seed = 9;
  JobOptions jo;
  jo.manifest = std::make_shared<const Manifest>(std::move(m).value());
  jo.plan = spec;
  jo.topology = Topology{2, 3};
  jo.batch_size = 4;
  jo.fs = &io::local_file_system();
  jo.clock = &real_clock();
  jo.data_plane = io::inproc_data_plane();
  auto job = make_job(std::move(jo));
  ASSERT_TRUE(job.is_ok()) << job.status().to_string();
  std::set<uint32_t> all;
  uint64_t items = 0;
  for (uint32_t r = 0; r < 2; ++r) {
    DispatcherState d(*job, r);
    EpochStart start{r, 1, {"a", "b", "c"}, {}};
    auto a = d.start_epoch(start, EpochKey{1, shardyard::epoch_key(9, 1)});
    ASSERT_TRUE(a.is_ok()) << a.status().to_string();
    ASSERT_EQ(a->units.size(), 3u);
    for (uint32_t w = 0; w < 3; ++w) {
      EXPECT_EQ(a->units[w].worker, w);
      EXPECT_EQ(a->units[w].channel, std::string(1, static_cast<char>('a' + w)));
      for (auto s : a->units[w].shards) EXPECT_TRUE(all.insert(s).second) << "shard twice: " << s;
    }
    items += a->ticket.items;
    EXPECT_EQ(d.snapshot().state, "running");
    for (uint32_t w = 0; w < 3; ++w) d.unit_done(WorkerDone{r, w, 1, 1, 1, true, {}});
    EXPECT_EQ(d.snapshot().state, "idle");
    // A key that is not the plan's is refused (ranks must share the coordinator's seed).
    EXPECT_FALSE(d.start_epoch(start, EpochKey{1, 12345}).is_ok());
  }
  EXPECT_EQ(all.size(), (*job)->shards.count());
  EXPECT_EQ(items, 65u);
}

}  // namespace
}  // namespace shardyard::actors
