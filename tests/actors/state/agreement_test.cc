// Tests of actors/state/agreement.h: a rank that describes another job is refused with the
// field and both values.
#include "actors/state/agreement.h"

#include <gtest/gtest.h>

#include <functional>

namespace shardyard::actors {
namespace {

JobInfo job() {
  JobInfo j;
  j.fingerprint = 42;
  j.num_items = 1000;
  j.logical_shards = 16;
  j.chunk_items = 64;
  j.seed = 17;
  j.shuffle = true;
  j.distributed_strategy = "strided";
  j.worker_strategy = "strided";
  j.world_size = 4;
  j.workers = 2;
  j.batch_size = 32;
  j.pipeline = "map/decode";
  j.dispatch = "none";
  return j;
}

TEST(AgreementTest, TheSameJobAgrees) { EXPECT_TRUE(check_agreement(job(), job(), 1).is_ok()); }

TEST(AgreementTest, EveryFieldThatDiffersIsNamedWithBothValues) {
  struct Case {
    std::function<void(JobInfo&)> change;
    std::string expected;
  };
  const Case cases[] = {
      {[](JobInfo& j) { j.seed = 18; }, "on the seed: the job has 17, rank 3 has 18"},
      {[](JobInfo& j) { j.fingerprint = 7; },
       "on the dataset (manifest fingerprint): the job has 42"},
      {[](JobInfo& j) { j.logical_shards = 8; },
       "logical shards (L): the job has 16, rank 3 has 8"},
      {[](JobInfo& j) { j.shuffle = false; }, "on shuffle: the job has on, rank 3 has off"},
      {[](JobInfo& j) { j.drop_last = true; }, "on drop_last"},
      {[](JobInfo& j) { j.distributed_strategy = "contiguous"; },
       "the distributed strategy: the job has 'strided', rank 3 has 'contiguous'"},
      {[](JobInfo& j) { j.worker_strategy = "contiguous"; }, "the worker strategy"},
      {[](JobInfo& j) { j.batch_size = 64; }, "the batch size: the job has 32, rank 3 has 64"},
      {[](JobInfo& j) { j.exact_order = false; },
       "the order: the job has exact, rank 3 has as_completed"},
      {[](JobInfo& j) { j.pipeline = "map/decode map/crop"; },
       "the pipeline spec: the job has 'map/decode', rank 3 has 'map/decode map/crop'"},
      {[](JobInfo& j) { j.dispatch = "broadcast"; }, "the dispatch mode"},
      {[](JobInfo& j) { j.workers = 3; }, "workers per rank: the job has 2, rank 3 has 3"},
      {[](JobInfo& j) { j.world_size = 5; }, "the world size"},
      {[](JobInfo& j) { j.chunk_items = 1; }, "the shuffle block"},
      {[](JobInfo& j) { j.windows = "24:1 over 8-byte records"; }, "the windows"},
  };
  for (const auto& c : cases) {
    JobInfo theirs = job();
    c.change(theirs);
    Status st = check_agreement(job(), theirs, 3);
    ASSERT_FALSE(st.is_ok()) << c.expected;
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(c.expected), std::string::npos) << st.message();
    EXPECT_EQ(st.message().rfind("rank 3 does not agree with the job", 0), 0u) << st.message();
  }
}

}  // namespace
}  // namespace shardyard::actors
