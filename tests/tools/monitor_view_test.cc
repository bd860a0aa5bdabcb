// Tests of tools/monitor_view.h: the load of an actor over an interval, the bottleneck rule
// branch by branch, and the view's layout at a given terminal size.
#include "monitor_view.h"

#include <gtest/gtest.h>

namespace shardyard::tools {
namespace {

using actors::ActorSnapshot;
using actors::JobStatus;

ActorSnapshot actor(const char* role, uint32_t rank, uint32_t worker, double in, double out,
                    double uptime = 10, uint64_t items = 0) {
  ActorSnapshot a;
  a.role = role;
  a.rank = rank;
  a.worker = worker;
  a.state = "running";
  a.input_wait_s = in;
  a.output_wait_s = out;
  a.uptime_s = uptime;
  a.items = items;
  return a;
}

// A 1-rank job: its loader waits `loader_in` of 10 s, its two workers wait in/out.
JobStatus job(double loader_in, double worker_in, double worker_out, const char* dispatch = "none",
              double dispatcher_in = 0) {
  JobStatus s;
  s.dispatch = dispatch;
  s.actors.push_back(actor("coordinator", 0, 0, 0, 0));
  s.actors.push_back(actor("dispatcher", 0, 0, dispatcher_in, 0));
  for (uint32_t w = 0; w < 2; ++w) s.actors.push_back(actor("worker", 0, w, worker_in, worker_out));
  s.actors.push_back(actor("loader", 0, 0, loader_in, 0));
  actors::RankStatus r;
  r.epoch_open = true;
  r.steps = 10;
  r.shards = {0, 1, 2, 3};
  r.take = {5, 5, 5, 5};
  r.consumed = {5, 2, 0, 0};
  s.ranks.push_back(r);
  return s;
}

TEST(MonitorView, LoadIsOverTheIntervalWhenThereIsAnEarlierStatus) {
  ActorSnapshot before = actor("worker", 0, 0, 1, 0, 10, 100);
  ActorSnapshot now = actor("worker", 0, 0, 3, 1, 14, 500);
  ActorLoad l = actor_load(now, &before);
  EXPECT_DOUBLE_EQ(l.input, 0.5);
  EXPECT_DOUBLE_EQ(l.output, 0.25);
  EXPECT_DOUBLE_EQ(l.items_per_s, 100);
  ActorLoad since_start = actor_load(now, nullptr);
  EXPECT_DOUBLE_EQ(since_start.input, 3.0 / 14);
}

TEST(MonitorView, BottleneckRuleBranchByBranch) {
  EXPECT_EQ(find_bottleneck(job(0.5, 0, 9), nullptr).stage, "trainer");
  EXPECT_EQ(find_bottleneck(job(8, 0, 6), nullptr).stage, "loader");
  EXPECT_EQ(find_bottleneck(job(8, 7, 0), nullptr).stage, "input");
  EXPECT_EQ(find_bottleneck(job(8, 1, 1), nullptr).stage, "workers");
  Bottleneck routed = find_bottleneck(job(8, 7, 0, "round_robin", 9), nullptr);
  EXPECT_EQ(routed.stage, "dispatcher");
  EXPECT_NE(routed.reason.find("reads"), std::string::npos) << routed.reason;
  JobStatus idle = job(8, 1, 1);
  idle.ranks[0].epoch_open = false;
  EXPECT_EQ(find_bottleneck(idle, nullptr).stage, "none");
  // Over an interval: the trainer waited 9 of the last 10 s, not 9.5 of 20.
  JobStatus before = job(0.5, 0, 0);
  JobStatus now = job(9.5, 0, 0);
  for (auto& a : now.actors) a.uptime_s = 20;
  EXPECT_EQ(find_bottleneck(now, &before).stage, "workers");
  EXPECT_NE(find_bottleneck(now, &before).reason.find("90%"), std::string::npos);
}

TEST(MonitorView, FitsTheWidthAndSummarisesRowsThatDoNotFit) {
  ViewOptions o;
  o.width = 60;
  o.height = 10;
  o.source = "127.0.0.1:1";
  auto lines = render_view(job(8, 1, 1), nullptr, o);
  bool summarised = false, bar = false;
  for (const auto& l : lines) {
    EXPECT_LE(l.size(), 60u) << l;
    summarised = summarised || l.find("more actors") != std::string::npos;
    bar = bar || l.find("[#+..]") != std::string::npos;
  }
  EXPECT_TRUE(summarised);
  EXPECT_TRUE(bar) << "one cell per shard: done, partial, unseen, unseen";
  EXPECT_EQ(lines.back().find("  "), 0u) << "the bottleneck wraps, indented";
  o.height = 0;
  o.width = 200;
  lines = render_view(job(8, 1, 1), nullptr, o);
  size_t rows = 0;
  for (const auto& l : lines) rows += l.rfind("worker ", 0) == 0;
  EXPECT_EQ(rows, 2u);
}

}  // namespace
}  // namespace shardyard::tools
