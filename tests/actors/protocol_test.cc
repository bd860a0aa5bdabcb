// Every protocol message survives CAF's binary serializer with all its fields, so nothing
// process-local hides in a message and every type is registered.
#include "actors/protocol.h"

#include "actors/status_protocol.h"

#include <gtest/gtest.h>

#include <limits>

namespace shardyard::actors {
namespace {

class ProtocolTest : public ::testing::Test {
 protected:
  ProtocolTest() {
    register_protocol(cfg_);
    cfg_.set("logger.verbosity", caf::atom("quiet"));
    sys_ = std::make_unique<caf::actor_system>(cfg_);
  }
  // Serializes `in` as a type-erased caf::message (as the middleman does between
  // processes) and reads it back.
  template <class T>
  T round_trip(const T& in) {
    std::vector<char> buf;
    caf::binary_serializer sink(*sys_, buf);
    caf::message msg = caf::make_message(in);
    EXPECT_FALSE(sink(msg));
    caf::message out;
    caf::binary_deserializer source(*sys_, buf);
    EXPECT_FALSE(source(out));
    EXPECT_TRUE(out.match_elements<T>()) << "type not registered or lost: " << typeid(T).name();
    return out.match_elements<T>() ? out.get_as<T>(0) : T{};
  }
  caf::actor_system_config cfg_;
  std::unique_ptr<caf::actor_system> sys_;
};

TEST_F(ProtocolTest, JobInfoRoundTrips) {
  JobInfo j{0x1234567890abcdefULL,
            999,
            64,
            256,
            17,
            true,
            true,
            "strided",
            "contiguous",
            8,
            4,
            256,
            false,
            "once/dedupe map/decode",
            "round_robin",
            "24:1 over 8-byte records"};
  auto o = round_trip(j);
  EXPECT_EQ(o.fingerprint, j.fingerprint);
  EXPECT_EQ(o.num_items, 999u);
  EXPECT_EQ(o.logical_shards, 64u);
  EXPECT_EQ(o.chunk_items, 256u);
  EXPECT_EQ(o.seed, 17u);
  EXPECT_TRUE(o.shuffle);
  EXPECT_TRUE(o.drop_last);
  EXPECT_EQ(o.pipeline, "once/dedupe map/decode");
  EXPECT_EQ(o.dispatch, "round_robin");
  EXPECT_EQ(o.windows, "24:1 over 8-byte records");
  EXPECT_EQ(o.distributed_strategy, "strided");
  EXPECT_EQ(o.worker_strategy, "contiguous");
  EXPECT_EQ(o.world_size, 8u);
  EXPECT_EQ(o.workers, 4u);
  EXPECT_EQ(o.batch_size, 256u);
  EXPECT_FALSE(o.exact_order);
}

TEST_F(ProtocolTest, ControlMessagesRoundTrip) {
  JoinRequest join;
  join.rank = 3;
  join.workers = 5;
  join.fingerprint = 77;
  join.job.pipeline = "map/decode";
  join.job.seed = 17;
  join.restart_count = 2;
  auto jr = round_trip(join);
  EXPECT_EQ(jr.rank, 3u);
  EXPECT_EQ(jr.workers, 5u);
  EXPECT_EQ(jr.fingerprint, 77u);
  EXPECT_EQ(jr.job.pipeline, "map/decode");
  EXPECT_EQ(jr.job.seed, 17u);
  EXPECT_EQ(jr.restart_count, 2u);
  auto hello = round_trip(Hello{kProtocolVersion, 4, std::string(32, 'n')});
  EXPECT_EQ(hello.protocol_version, kProtocolVersion);
  EXPECT_EQ(hello.client_nonce, std::string(32, 'n'));
  EXPECT_EQ(round_trip(RankLeave{2, false, "why"}).error, "why");
  EXPECT_EQ(round_trip(JobAborted{"rank 2 was lost"}).reason, "rank 2 was lost");
  EXPECT_EQ(round_trip(EpochKeyRequest{9}).epoch, 9u);
  auto k = round_trip(EpochKey{4, 0xfeedULL});
  EXPECT_EQ(k.epoch, 4u);
  EXPECT_EQ(k.key, 0xfeedULL);
  auto es = round_trip(EpochStart{1, 2, {"r1/e2/w0", "r1/e2/w1"}, "r1/e2/route"});
  EXPECT_EQ(es.route, "r1/e2/route");
  EXPECT_EQ(es.rank, 1u);
  EXPECT_EQ(es.epoch, 2u);
  EXPECT_EQ(es.channels, (std::vector<std::string>{"r1/e2/w0", "r1/e2/w1"}));
  auto t = round_trip(
      EpochTicket{2, 10, 600, {5, 1, 9}, {60, 61, 62}, {3, 0, 4}, {0, 1, 0}, 4, 2, 7, 500});
  EXPECT_EQ(t.steps, 10u);
  EXPECT_EQ(t.items, 600u);
  EXPECT_EQ(t.shards, (std::vector<uint32_t>{5, 1, 9}));
  EXPECT_EQ(t.take, (std::vector<uint64_t>{60, 61, 62}));
  EXPECT_EQ(t.worker_of, (std::vector<uint32_t>{0, 1, 0}));
  EXPECT_EQ(t.consumed, (std::vector<uint64_t>{3, 0, 4}));
  EXPECT_EQ(t.first_step, 4u);
  EXPECT_EQ(t.layout_step0, 2u);
  EXPECT_EQ(t.layout_offset, 7u);
  EXPECT_EQ(t.layout_items, 500u);
  auto u = round_trip(
      WorkUnit{1, 2, 3, 0xabcULL, {7, 8}, {10, 11}, {1, 2}, "r1/e3/w2", {"s0", "s1"}, true, "rt"});
  EXPECT_EQ(u.route, "rt");
  EXPECT_EQ(u.consumed, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(u.stage_states, (std::vector<std::string>{"s0", "s1"}));
  EXPECT_TRUE(u.rescaled);
  EXPECT_EQ(u.worker, 2u);
  EXPECT_EQ(u.epoch_key, 0xabcULL);
  EXPECT_EQ(u.shards, (std::vector<uint32_t>{7, 8}));
  EXPECT_EQ(u.take, (std::vector<uint64_t>{10, 11}));
  EXPECT_EQ(u.channel, "r1/e3/w2");
  auto d = round_trip(WorkerDone{1, 2, 3, 100, 4096, false, "corrupt: x.tar at byte 512"});
  EXPECT_EQ(d.items, 100u);
  EXPECT_EQ(d.bytes, 4096u);
  EXPECT_FALSE(d.ok);
  EXPECT_EQ(d.error, "corrupt: x.tar at byte 512");
  auto rd = round_trip(RankEpochDone{1, 2, 30, 900});
  EXPECT_EQ(rd.steps, 30u);
  EXPECT_EQ(rd.items, 900u);
  auto sr = round_trip(StepReport{1, 2, 3, 4});
  EXPECT_EQ(sr.step, 3u);
  EXPECT_EQ(sr.items, 4u);
  round_trip(SnapshotRequest{});
  auto snap = round_trip(ActorSnapshot{"worker", 1, 2, "running", 3, 4, 5, 6, "detail", "n1", 42,
                                       2.5, 3, 4, 1.25, 0.5, 9});
  EXPECT_EQ(snap.role, "worker");
  EXPECT_EQ(snap.state, "running");
  EXPECT_EQ(snap.steps, 6u);
  EXPECT_EQ(snap.detail, "detail");
  EXPECT_EQ(snap.node, "n1");
  EXPECT_EQ(snap.pid, 42u);
  EXPECT_EQ(snap.items_per_s, 2.5);
  EXPECT_EQ(snap.queue_capacity, 4u);
  EXPECT_EQ(snap.input_wait_s, 1.25);
  EXPECT_EQ(snap.output_wait_s, 0.5);
  EXPECT_EQ(snap.uptime_s, 9);
  EXPECT_EQ(round_trip(ShutdownRequest{"bye"}).reason, "bye");
  auto ack = round_trip(ShutdownAck{"dispatcher", 3, 0});
  EXPECT_EQ(ack.role, "dispatcher");
  EXPECT_EQ(ack.rank, 3u);
}

TEST_F(ProtocolTest, RankReportRoundTripsWithItsMetricSamples) {
  // What a rank process will send its coordinator for the monitor, in one message.
  round_trip(RankReportRequest{});
  RankReport in;
  RankStatus r;
  r.rank = 3;
  r.node = "n2";
  r.pid = 77;
  r.epoch = 1;
  r.epoch_open = true;
  r.step = 5;
  r.steps = 9;
  r.items = 40;
  r.shards = {3, 7};
  r.take = {20, 21};
  r.consumed = {20, 0};
  r.queues = {QueueStatus{"r3/e1/w0", 2, 4, 4096}};
  r.checkpoint_saves = 2;
  r.checkpoint_generation = 6;
  r.checkpoint_generations = {5, 6};
  r.actors = {ActorSnapshot{"worker", 3, 0, "waiting_output", 1, 40, 800, 0, "", "n2", 77}};
  in.ranks = {r};
  MetricsRegistry reg(MetricLabels{{"node", "n2"}});
  reg.counter("shardyard_items_total", "items", {{"rank", "3"}}).add(40);
  reg.histogram("shardyard_step_seconds", "step", {0.1, 1}, {{"rank", "3"}}).observe(0.5);
  in.metrics = reg.collect();
  RankReport out = round_trip(in);
  ASSERT_EQ(out.ranks.size(), 1u);
  EXPECT_EQ(out.ranks[0].consumed, (std::vector<uint64_t>{20, 0}));
  EXPECT_EQ(out.ranks[0].queues.at(0).bytes, 4096u);
  EXPECT_EQ(out.ranks[0].checkpoint_generations, (std::vector<uint64_t>{5, 6}));
  EXPECT_EQ(out.ranks[0].actors.at(0).state, "waiting_output");
  ASSERT_EQ(out.metrics.families.size(), 2u);
  EXPECT_EQ(out.metrics.families[1].type, MetricType::kHistogram);
  EXPECT_EQ(out.metrics.families[1].points.at(0).buckets, (std::vector<uint64_t>{0, 1, 0}));
  EXPECT_EQ(out.metrics.families[0].points.at(0).labels,
            (MetricLabels{{"rank", "3"}, {"node", "n2"}}));
}

TEST_F(ProtocolTest, CheckpointMessagesRoundTrip) {
  auto sv = round_trip(
      SaveRequest{"/ck", 2, 5, 9, 1, false, {4, 0}, {10, 11}, {3, 2}, 6, 15, {"w0", ""}, "d", "l"});
  EXPECT_EQ(sv.dispatcher_state, "d");
  EXPECT_EQ(sv.loader_state, "l");
  EXPECT_EQ(sv.dir, "/ck");
  EXPECT_EQ(sv.step, 5u);
  EXPECT_EQ(sv.consumed, (std::vector<uint64_t>{3, 2}));
  EXPECT_EQ(sv.layout_items, 15u);
  EXPECT_EQ(sv.worker_states, (std::vector<std::string>{"w0", ""}));
  auto done = round_trip(SaveDone{7, 99, "cut"});
  EXPECT_EQ(done.generation, 7u);
  EXPECT_EQ(done.state, "cut");
  auto b = round_trip(CheckpointBegin{1, "/ck", 2, 5, 8});
  EXPECT_EQ(b.proposed_generation, 8u);
  EXPECT_EQ(round_trip(CheckpointGeneration{8}).generation, 8u);
  auto rs = round_trip(
      RankSaved{1, "/ck", 8, 2, 5, 9, 0, false, "rank-00001.g000008.ckpt", 120, 0xabcdefULL, "b"});
  EXPECT_EQ(rs.file, "rank-00001.g000008.ckpt");
  EXPECT_EQ(rs.checksum, 0xabcdefULL);
  EXPECT_EQ(rs.bytes, "b");
  auto committed = round_trip(CheckpointCommitted{8, "state"});
  EXPECT_EQ(committed.generation, 8u);
  EXPECT_EQ(committed.state, "state");
  auto failed = round_trip(RankSaveFailed{1, "/ck", 8, "No space left on device"});
  EXPECT_EQ(failed.rank, 1u);
  EXPECT_EQ(failed.generation, 8u);
  EXPECT_EQ(failed.error, "No space left on device");
  auto co = round_trip(CommitOutcome{8, false, "disk full"});
  EXPECT_FALSE(co.ok);
  EXPECT_EQ(co.error, "disk full");
  EXPECT_EQ(round_trip(RestoreRequest{"/ck", {}}).dir, "/ck");
  EXPECT_EQ(round_trip(RestoreRequest{{}, "cut"}).state, "cut");
  auto off = round_trip(ResumeOffer{2, "/ck", std::string("SYCKPT\0\0", 8), {"a", "b"}});
  EXPECT_EQ(off.manifest.size(), 8u);
  EXPECT_EQ(off.rank_files.size(), 2u);
  auto g = round_trip(ResumeGrant{3,
                                  true,
                                  5,
                                  {10, 11},
                                  {3, 2},
                                  2,
                                  8,
                                  9,
                                  0,
                                  {0, 0},
                                  {21, 21},
                                  {"w0"},
                                  {"d0"},
                                  {"l0"},
                                  false,
                                  true,
                                  8});
  EXPECT_EQ(g.dispatcher_states, (std::vector<std::string>{"d0"}));
  EXPECT_EQ(g.loader_states, (std::vector<std::string>{"l0"}));
  EXPECT_EQ(g.epoch, 3u);
  EXPECT_TRUE(g.partial);
  EXPECT_EQ(g.layout_items, (std::vector<uint64_t>{21, 21}));
  EXPECT_TRUE(g.rescaled);
  EXPECT_EQ(g.generation, 8u);
  round_trip(ResumeAck{});
}

// CAF 0.17 never finishes encoding a double that is not finite; ours are made finite (0)
// before encoding, so a NaN rate or an infinite metric cannot hang a sender.
TEST_F(ProtocolTest, DoublesThatAreNotFiniteTravelAsZero) {
  ActorSnapshot a;
  a.role = "worker";
  a.items_per_s = std::numeric_limits<double>::quiet_NaN();
  a.uptime_s = std::numeric_limits<double>::infinity();
  a.input_wait_s = 1.5;
  auto o = round_trip(a);
  EXPECT_EQ(o.items_per_s, 0.0);
  EXPECT_EQ(o.uptime_s, 0.0);
  EXPECT_EQ(o.input_wait_s, 1.5);
  MetricsSnapshot m;
  MetricFamily f;
  f.name = "shardyard_x";
  f.bounds = {0.5, std::numeric_limits<double>::infinity()};
  MetricPoint p;
  p.value = -std::numeric_limits<double>::infinity();
  p.sum = 2.0;
  f.points.push_back(p);
  m.families.push_back(f);
  auto back = round_trip(m);
  ASSERT_EQ(back.families.size(), 1u);
  EXPECT_EQ(back.families[0].bounds, (std::vector<double>{0.5, 0.0}));
  EXPECT_EQ(back.families[0].points[0].value, 0.0);
  EXPECT_EQ(back.families[0].points[0].sum, 2.0);
}

}  // namespace
}  // namespace shardyard::actors
