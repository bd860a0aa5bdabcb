// Tests of actors/state/worker_frames.h: every control frame between a rank and its worker
// processes round-trips, and damage is refused (tests/fuzz/worker_frame_fuzz.cc goes on).
#include "actors/state/worker_frames.h"

#include <gtest/gtest.h>

namespace shardyard::actors {
namespace {

WorkerJob sample_job() {
  WorkerJob j;
  j.fingerprint = 0xfeedbeef;
  j.plan.logical_shards = 64;
  j.plan.chunk_items = 32;
  j.plan.seed = 17;
  j.plan.shuffle = true;
  j.plan.worker_strategy = "contiguous";
  j.pipeline = "map/count:field=seq";
  j.topology = Topology{4, 3};
  j.batch_size = 256;
  j.exact_order = false;
  j.dispatch = "broadcast";
  j.prefetch_shards = 2;
  j.route_key_field = "month";
  j.max_sample_bytes = 1 << 20;
  j.packet_items = 128;
  j.packet_bytes = 4 << 20;
  j.windows.record_bytes = 64;
  j.windows.length = 168;
  j.windows.stride = 24;
  j.windows.stitch = true;
  j.sources = {"/data/2023-01.bin", "/data/2023-02.bin"};
  j.rank = 2;
  j.worker = 1;
  return j;
}

TEST(WorkerFramesTest, AJobRoundTrips) {
  const WorkerJob j = sample_job();
  auto back = decode_job(encode_job(j));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(encode_job(*back), encode_job(j));
  EXPECT_EQ(back->plan.worker_strategy, "contiguous");
  EXPECT_EQ(back->windows, j.windows);
  EXPECT_EQ(back->sources, j.sources);
  EXPECT_EQ(back->rank, 2u);
  EXPECT_EQ(back->worker, 1u);
}

TEST(WorkerFramesTest, AUnitRoundTripsWithWhatATakeOverNeeds) {
  UnitOrder o;
  o.unit.rank = 1;
  o.unit.worker = 3;
  o.unit.epoch = 2;
  o.unit.epoch_key = 99;
  o.unit.shards = {3, 9};
  o.unit.take = {100, 80};
  o.unit.consumed = {7, 0};
  o.unit.channel = "r1/e2/w3";
  o.unit.stage_states = {std::string("\0state", 6)};
  o.unit.route = "r1/e2/route";
  o.skip_below = 1024;
  o.window = 3072;
  auto back = decode_unit(encode_unit(o));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->unit.shards, o.unit.shards);
  EXPECT_EQ(back->unit.consumed, o.unit.consumed);
  EXPECT_EQ(back->unit.stage_states, o.unit.stage_states);
  EXPECT_EQ(back->skip_below, 1024u);
  EXPECT_EQ(back->window, 3072u);
  EXPECT_EQ(encode_unit(*back), encode_unit(o));
}

TEST(WorkerFramesTest, ADoneCarriesTheUnitsOutcome) {
  auto ok = decode_done(encode_done(UnitStats{512, 2 << 20}));
  ASSERT_TRUE(ok.is_ok());
  EXPECT_EQ(ok->items, 512u);
  EXPECT_EQ(ok->bytes, uint64_t{2} << 20);
  auto failed = decode_done(encode_done(invalid_argument("stage failed on item 'k'")));
  ASSERT_FALSE(failed.is_ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(failed.status().message(), "stage failed on item 'k'");
}

TEST(WorkerFramesTest, DamageIsRefused) {
  const std::string job = encode_job(sample_job());
  for (size_t cut = 0; cut < job.size(); cut += 7)
    EXPECT_FALSE(decode_job(job.substr(0, cut)).is_ok()) << "cut at " << cut;
  EXPECT_FALSE(decode_job(job + "x").is_ok());
  std::string other = job;
  other[0] = 9;  // another version
  EXPECT_EQ(decode_job(other).status().code(), StatusCode::kCorrupt);
  // A unit that claims more shards than its bytes hold allocates nothing.
  UnitOrder o;
  std::string unit = encode_unit(o);
  unit[20] = '\xff';
  unit[21] = '\xff';
  EXPECT_FALSE(decode_unit(unit).is_ok());
  EXPECT_EQ(decode_done("short").status().code(), StatusCode::kCorrupt);
  EXPECT_FALSE(done_well_formed(std::string(16, '\0') + encode_status(Status::ok()) + "x"));
  EXPECT_FALSE(status_well_formed(std::string("\0\0\0\0\1\0\0\0x", 9)))
      << "OK with a message is not a status";
}

}  // namespace
}  // namespace shardyard::actors
