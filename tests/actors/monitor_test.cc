// The monitoring endpoints of a real in-process job (actors/monitor.h): every actor in
// GET /status while an epoch runs, the rank's cursor and shards, GET /metrics, and a server
// that stops with the cluster. A sleep stage keeps the workers busy; nothing is timed.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <thread>

#include "actors/loader.h"
#include "actors/state/job_status.h"
#include "io/serve/http.h"
#include "testdata.h"

namespace shardyard {
namespace {

class MonitorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pattern_ = testing::make_dataset(tmp_.path() + "/d", 4, 30, 128, 5);
    ASSERT_FALSE(pattern_.empty());
    opt_.sources = {pattern_};
    opt_.world_size = 2;
    opt_.workers = 3;
    opt_.batch_size = 4;
    opt_.prefetch_packets = 1;
    opt_.cache_dir = tmp_.path() + "/cache";
    opt_.metrics_port = 0;
    opt_.pipeline.map("sleep", {{"us", "2000"}});
  }
  Result<actors::JobStatus> status(uint16_t port) {
    SY_ASSIGN_OR_RETURN(auto r, io::http_get("127.0.0.1", port, "/status", 10000));
    if (r.status != 200) return internal_error("status " + std::to_string(r.status));
    return actors::parse_status_json(r.body);
  }
  testing::TempDir tmp_;
  std::string pattern_;
  LoaderOptions opt_;
};

TEST_F(MonitorTest, StatusListsEveryActorAndTheRankWhileAnEpochRuns) {
  auto cluster = Cluster::start(opt_, {0, 1});
  ASSERT_TRUE(cluster.is_ok()) << cluster.status().to_string();
  const uint16_t port = (*cluster)->monitor_port();
  ASSERT_GT(port, 0);
  auto loader = (*cluster)->loader(0);
  ASSERT_TRUE(loader.is_ok());
  ASSERT_TRUE((*loader)->start_epoch(0).is_ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*loader)->next().is_ok());

  auto s = status(port);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  std::map<std::string, int> roles;
  for (const auto& a : s->actors) {
    ++roles[a.role];
    EXPECT_FALSE(a.node.empty());
    EXPECT_GT(a.pid, 0u);
    EXPECT_GE(a.input_wait_s, 0);
    EXPECT_GE(a.output_wait_s, 0);
  }
  EXPECT_EQ(
      roles,
      (std::map<std::string, int>{
          {"coordinator", 1}, {"dispatcher", 2}, {"worker", 6}, {"loader", 2}, {"checkpoint", 2}}));
  EXPECT_EQ(s->actors.at(0).role, "coordinator");
  EXPECT_EQ(s->actors.at(0).state, "running");
  ASSERT_EQ(s->ranks.size(), 2u);
  const auto& r0 = s->ranks[0];
  EXPECT_TRUE(r0.epoch_open);
  EXPECT_GT(r0.steps, 0u);
  EXPECT_EQ(r0.shards.size(), r0.take.size());
  EXPECT_FALSE(r0.shards.empty());
  EXPECT_EQ(r0.queues.size(), 3u) << "one channel per worker in exact order";
  EXPECT_FALSE(s->ranks[1].epoch_open) << "rank 1's trainer never started";
  uint64_t worker_items = 0;
  for (const auto& a : s->actors)
    if (a.role == "worker" && a.rank == 0) worker_items += a.items;
  EXPECT_GE(worker_items, 12u) << "the three batches taken came from the workers";
  for (const auto& a : s->actors)
    if (a.role == "loader" && a.rank == 0) {
      EXPECT_EQ(a.steps, 3u);
      EXPECT_EQ(a.items, 12u);
      EXPECT_EQ(a.queue_capacity, opt_.prefetch_batches);
    }

  auto metrics = io::http_get("127.0.0.1", port, "/metrics", 10000);
  ASSERT_TRUE(metrics.is_ok());
  EXPECT_EQ(metrics->status, 200);
  EXPECT_EQ(metrics->content_type, "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(metrics->body.find("shardyard_batches_total{rank=\"0\","), std::string::npos);
  EXPECT_NE(metrics->body.find("shardyard_queue_depth{rank=\"0\",queue=\"w2\","),
            std::string::npos);
  auto missing = io::http_get("127.0.0.1", port, "/nothing", 10000);
  ASSERT_TRUE(missing.is_ok());
  EXPECT_EQ(missing->status, 404);

  // The same without HTTP, and the in-process snapshot (workers answer though busy).
  EXPECT_NE((*cluster)->status_json().find("\"schema\":\"shardyard.status/1\""), std::string::npos);
  EXPECT_NE((*cluster)->metrics_text().find("# TYPE shardyard_items_total counter"),
            std::string::npos);
  EXPECT_EQ((*cluster)->snapshot().size(), 13u);

  loader->reset();
  ASSERT_TRUE((*cluster)->shutdown().is_ok());
  auto gone = io::http_get("127.0.0.1", port, "/status", 2000);
  ASSERT_FALSE(gone.is_ok()) << "the endpoints stop with the cluster";
  EXPECT_EQ(gone.status().code(), StatusCode::kUnavailable);
}

TEST_F(MonitorTest, CursorAndShardsReachTheEndOfTheEpoch) {
  opt_.world_size = 1;
  opt_.pipeline = Spec();
  auto loader = Loader::open(opt_);
  ASSERT_TRUE(loader.is_ok()) << loader.status().to_string();
  ASSERT_TRUE((*loader)->start_epoch(0).is_ok());
  uint64_t items = 0;
  for (;;) {
    auto b = (*loader)->next();
    ASSERT_TRUE(b.is_ok());
    if (!b->has_value()) break;
    items += (*b)->size();
  }
  auto s = status((*loader)->cluster().monitor_port());
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  const auto& r = s->ranks.at(0);
  EXPECT_EQ(r.items, items);
  EXPECT_EQ(r.step, r.steps);
  EXPECT_EQ(r.consumed, r.take) << "every logical shard done";
}

TEST_F(MonitorTest, ABusyPortOrABadPortFailsTheStart) {
  auto first = Cluster::start(opt_, {0, 1});
  ASSERT_TRUE(first.is_ok());
  opt_.metrics_port = (*first)->monitor_port();
  auto second = Cluster::start(opt_, {0, 1});
  ASSERT_FALSE(second.is_ok());
  EXPECT_NE(second.status().message().find(std::to_string(opt_.metrics_port)), std::string::npos)
      << second.status().message();
  opt_.metrics_port = 70000;
  EXPECT_EQ(Cluster::start(opt_, {0, 1}).status().code(), StatusCode::kInvalidArgument);
  opt_.metrics_port = -1;
  auto off = Cluster::start(opt_, {0, 1});
  ASSERT_TRUE(off.is_ok());
  EXPECT_EQ((*off)->monitor_port(), 0) << "not served unless asked";
}

TEST_F(MonitorTest, TheEnvironmentSetsThePort) {
  LoaderOptions o;
  ::setenv("SHARDYARD_METRICS_PORT", "9555", 1);
  ::setenv("SHARDYARD_METRICS_ADDRESS", "127.0.0.2", 1);
  EXPECT_TRUE(o.monitor_from_env().is_ok());
  EXPECT_EQ(o.metrics_port, 9555);
  EXPECT_EQ(o.metrics_address, "127.0.0.2");
  ::setenv("SHARDYARD_METRICS_PORT", "http", 1);
  Status bad = o.monitor_from_env();
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("SHARDYARD_METRICS_PORT"), std::string::npos);
  ::unsetenv("SHARDYARD_METRICS_PORT");
  ::unsetenv("SHARDYARD_METRICS_ADDRESS");
}

}  // namespace
}  // namespace shardyard
