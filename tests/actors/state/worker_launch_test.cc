// WorkerLaunch's arena sizes (actors/state/worker_process.h), and where a job's batches read
// their bytes (JobData::collates_from_files), without an actor system: both come from a real
// manifest.
#include <gtest/gtest.h>

#include "actors/state/worker_process.h"
#include "state_fixture.h"

namespace shardyard::actors {
namespace {

using testing::JobSpec;
using testing::make_test_job;
using testing::TempDir;

constexpr uint64_t kMiB = 1ull << 20;

// `shards` tar shards of `samples` samples of `bytes` each (the fixture's other defaults).
JobSpec sized(int shards, int samples, int bytes) {
  JobSpec spec;
  spec.shards = shards;
  spec.samples = samples;
  spec.bytes = bytes;
  return spec;
}

TEST(WorkerLaunchTest, SmallSamplesCrossInTheDataArenaAndTheRingHoldsTheirDescriptors) {
  TempDir dir;
  const JobSpec spec = sized(4, 25, 4000);  // read whole, chunk by chunk: into the data arena
  auto job = make_test_job(dir.path() + "/d", spec);
  ASSERT_NE(job, nullptr);
  auto launch = WorkerLaunch::create(*job, WorkerProcessOptions{});
  ASSERT_TRUE(launch.is_ok()) << launch.status().to_string();
  // Read in order, a few items at a time: the smallest data arena, 1 MiB.
  ASSERT_LT(job->read_items, job->plan.chunk_items);
  EXPECT_EQ((*launch)->data_bytes(), kMiB);
  // Descriptors and room for two packets copied whole (a chunk the data arena had no room
  // for), not the 8 MiB a ring that copies every sample needs.
  const uint64_t whole_packet = (job->packet_items + 1) * (4000 + 256);
  EXPECT_GE((*launch)->arena_bytes(), std::max(kMiB, 2 * whole_packet));
  EXPECT_LT((*launch)->arena_bytes(), 8 * kMiB);
}

// Chunks read a few items at a time leave the data arena soon, and a larger ring only
// writes into colder memory; chunks read whole for a shuffle stay until the shuffle buffer
// has taken their items, and the ring is sized to hold them.
TEST(WorkerLaunchTest, TheDataArenaHoldsWholeChunksOfAShuffleAndFewOfAnOrderedRead) {
  TempDir dir;
  JobSpec spec = sized(8, 300, 4000);
  auto ordered = make_test_job(dir.path() + "/d", spec);
  spec.plan.shuffle = true;
  auto shuffled = make_test_job(dir.path() + "/s", spec);
  ASSERT_NE(ordered, nullptr);
  ASSERT_NE(shuffled, nullptr);
  ASSERT_LT(ordered->read_items, ordered->plan.chunk_items);
  ASSERT_EQ(shuffled->read_items, shuffled->plan.chunk_items);
  auto a = WorkerLaunch::create(*ordered, WorkerProcessOptions{});
  auto b = WorkerLaunch::create(*shuffled, WorkerProcessOptions{});
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  const uint64_t per_worker = shuffled->shards.count() / 2;
  const uint64_t sample = 4000 + 3 * 512;  // a sample's members with their headers, at least
  EXPECT_GE((*b)->data_bytes(), 2 * shuffled->plan.chunk_items * sample * (per_worker + 2));
  EXPECT_GE((*a)->data_bytes(), kMiB);
  EXPECT_LT((*a)->data_bytes(), (*b)->data_bytes() / 4);
}

TEST(WorkerLaunchTest, LargeSamplesCrossAsFileRangesWithoutADataArena) {
  TempDir dir;
  // Past the reader's mapping threshold: mapped, named by file range.
  const JobSpec spec = sized(2, 4, 300000);
  auto job = make_test_job(dir.path() + "/d", spec);
  ASSERT_NE(job, nullptr);
  auto launch = WorkerLaunch::create(*job, WorkerProcessOptions{});
  ASSERT_TRUE(launch.is_ok()) << launch.status().to_string();
  EXPECT_EQ((*launch)->data_bytes(), 0u);
  EXPECT_GE((*launch)->arena_bytes(), 8 * kMiB);
}

TEST(WorkerLaunchTest, AnArenaSizeGivenByTheUserIsKept) {
  TempDir dir;
  auto job = make_test_job(dir.path() + "/d", JobSpec{});
  ASSERT_NE(job, nullptr);
  WorkerProcessOptions o;
  o.arena_bytes = 3 * kMiB;
  auto launch = WorkerLaunch::create(*job, o);
  ASSERT_TRUE(launch.is_ok()) << launch.status().to_string();
  EXPECT_EQ((*launch)->arena_bytes(), 3 * kMiB);
}

// Samples long enough to be read into the batch make the collators read the job's bytes
// (they then build ahead from the start: actors/loader.cc); small ones, or a job that does
// not read into the batch, do not.
TEST(JobDataTest, CollatesFromFilesWhereLargeMembersAreReadIntoTheBatch) {
  TempDir dir;
  auto job = make_test_job(dir.path() + "/large", sized(2, 3, 100000));
  ASSERT_NE(job, nullptr);
  ASSERT_GT(job->unread_field_bytes, 0u);
  EXPECT_TRUE(job->collates_from_files());
  auto small = make_test_job(dir.path() + "/small", JobSpec{});
  ASSERT_NE(small, nullptr);
  EXPECT_FALSE(small->collates_from_files());
  auto off = std::make_shared<JobData>(*job);
  off->unread_field_bytes = 0;
  EXPECT_FALSE(off->collates_from_files());
}

}  // namespace
}  // namespace shardyard::actors
