// What the roles report to the monitor, without any actor system: RoleStats and its waits,
// the StatusBoard's collection of a rank (queues, shards, actors), its metrics, and the
// status JSON and back (actors/state/role_stats.h, status_board.h, job_status.h).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "actors/state/job_status.h"
#include "actors/state/status_board.h"
#include "runtime/metrics_text.h"

namespace shardyard::actors {
namespace {

TEST(RoleStatsTest, AWaitShowsInTheStateAndCountsWhileItLasts) {
  RoleStats s("worker", 1, 2);
  s.set_state(RoleState::kRunning);
  {
    WaitScope w(&s, false);
    EXPECT_EQ(s.snapshot().state, "waiting_output");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_GE(s.waited_s(false), 0.02) << "a wait in progress counts";
  }
  EXPECT_EQ(s.snapshot().state, "running") << "the state before the wait is back";
  const double waited = s.waited_s(false);
  EXPECT_GE(waited, 0.02);
  EXPECT_EQ(s.waited_s(true), 0);
  s.begin_wait(true);
  EXPECT_EQ(s.snapshot().state, "waiting_input");
  EXPECT_GT(s.end_wait(true, RoleState::kIdle).count(), 0);
  EXPECT_EQ(s.end_wait(true, RoleState::kIdle).count(), 0) << "no wait had begun";
  EXPECT_EQ(s.snapshot().state, "idle");
  WaitScope nothing(nullptr, true);  // no stats: nothing happens
}

TEST(RoleStatsTest, SnapshotCarriesCountsAndARate) {
  RoleStats s("dispatcher", 3, 0);
  s.set_epoch(4);
  s.add(100, 4096);
  s.set_detail("2 units out");
  ActorSnapshot a = s.snapshot();
  EXPECT_EQ(a.role, "dispatcher");
  EXPECT_EQ(a.rank, 3u);
  EXPECT_EQ(a.epoch, 4u);
  EXPECT_EQ(a.items, 100u);
  EXPECT_EQ(a.bytes, 4096u);
  EXPECT_EQ(a.detail, "2 units out");
  EXPECT_GT(a.items_per_s, 0) << "with no earlier sample, the rate since the start";
  EXPECT_GT(a.uptime_s, 0);
}

TEST(StatusBoardTest, CollectsARankWithItsQueuesShardsAndActors) {
  StatusBoard board;
  EXPECT_FALSE(board.node().empty());
  EXPECT_GT(board.pid(), 0u);
  auto plane = io::inproc_data_plane();
  auto w0 = plane->open_channel("r1/e0/w0", 1, 4);
  auto w1 = plane->open_channel("r1/e0/w1", 1, 4);
  io::Packet p;
  p.items.resize(3);
  p.bytes = 300;
  ASSERT_TRUE(w1->push(std::move(p)).is_ok());
  auto worker1 = board.role("worker", 1, 1);
  board.role("worker", 1, 0);
  board.role("loader", 1);
  board.role("dispatcher", 1);
  EXPECT_EQ(board.role("worker", 1, 1), worker1) << "one RoleStats per actor";
  EpochTicket t;
  t.epoch = 0;
  t.steps = 10;
  t.shards = {4, 6, 9};
  t.take = {5, 5, 5};
  RankBoard& rank = board.rank(1);
  rank.open_epoch(t, {QueueRef{"r1/e0/w0", w0, {}, 4, 0}, QueueRef{"r1/e0/w1", w1, {}, 4, 1}}, 2);
  rank.set_cursor(2, 6, {5, 1, 0});
  rank.set_ready_batches(1);
  rank.checkpoint_committed(7);
  RankStatus s = board.collect_rank(1);
  EXPECT_EQ(s.rank, 1u);
  EXPECT_TRUE(s.epoch_open);
  EXPECT_EQ(s.step, 2u);
  EXPECT_EQ(s.consumed, (std::vector<uint64_t>{5, 1, 0}));
  ASSERT_EQ(s.queues.size(), 2u);
  EXPECT_EQ(s.queues[1].depth, 1u);
  EXPECT_EQ(s.queues[1].bytes, 300u);
  EXPECT_EQ(s.checkpoint_generations, (std::vector<uint64_t>{7}));
  ASSERT_EQ(s.actors.size(), 4u);
  EXPECT_EQ(s.actors[0].role, "dispatcher") << "in the order of the data's path";
  EXPECT_EQ(s.actors[1].role, "worker");
  EXPECT_EQ(s.actors[1].worker, 1u) << "in the order they were made";
  EXPECT_EQ(s.actors[1].queue_depth, 1u) << "worker 1's own channel";
  EXPECT_EQ(s.actors[1].queue_capacity, 4u);
  EXPECT_EQ(s.actors[3].role, "loader");
  EXPECT_EQ(s.actors[3].queue_depth, 1u) << "batches ready for the trainer";
  EXPECT_EQ(s.actors[3].queue_capacity, 2u);
  EXPECT_EQ(s.actors[3].node, board.node());
  rank.close_epoch();
  EXPECT_TRUE(board.collect_rank(1).queues.empty());
  EXPECT_FALSE(board.collect_rank(1).epoch_open);
}

TEST(StatusBoardTest, MetricsHaveEverySeriesWithRankAndNodeLabels) {
  StatusBoard board;
  board.role("worker", 0, 0)->add(10, 1000);
  board.rank(0).batches.add(2);
  board.rank(0).next_wait.observe(0.01);
  const std::string text = render_prometheus(board.metrics().collect());
  const std::string node = "node=\"" + board.node() + "\"";
  for (const std::string& line :
       {"shardyard_items_total{role=\"worker\",rank=\"0\",worker=\"0\"," + node + "} 10",
        "shardyard_batches_total{rank=\"0\"," + node + "} 2",
        "shardyard_worker_restarts_total{rank=\"0\",worker=\"0\"," + node + "} 0",
        "shardyard_next_wait_seconds_count{rank=\"0\"," + node + "} 1",
        "shardyard_queue_depth{rank=\"0\",queue=\"batches\"," + node + "} 0",
        "shardyard_remote_read_retries_total{" + node + "}"})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  for (const char* family : {"shardyard_wait_seconds_total", "shardyard_epoch", "shardyard_step",
                             "shardyard_checkpoint_saves_total", "shardyard_step_seconds",
                             "shardyard_checkpoint_save_seconds", "shardyard_logical_shards"})
    EXPECT_NE(text.find(std::string("# TYPE ") + family + " "), std::string::npos) << family;
}

TEST(StatusBoardTest, CollectingWhileRolesWorkAndAreMadeIsSafe) {
  // Roles update their stats, new roles appear (registering metrics) and a monitor
  // collects, all at once: no lost count, no deadlock (and ThreadSanitizer sees no race).
  StatusBoard board;
  auto plane = io::inproc_data_plane();
  auto ch = plane->open_channel("r0/e0/w0", 1, 1000);
  EpochTicket t;
  t.shards = {0};
  t.take = {100};
  board.rank(0).open_epoch(t, {QueueRef{"r0/e0/w0", ch, {}, 1000, 0}}, 2);
  std::atomic<bool> done{false};
  std::vector<std::thread> threads;
  for (uint32_t w = 0; w < 3; ++w)
    threads.emplace_back([&, w] {
      auto stats = board.role("worker", 0, w);
      for (int i = 0; i < 2000; ++i) {
        WaitScope out(stats.get(), false);
        stats->add(1, 10);
        if (i % 100 == 0) {
          io::Packet p;
          p.bytes = 1;
          (void)ch->push(std::move(p));
        }
      }
    });
  threads.emplace_back([&] {
    for (uint32_t r = 1; r < 50; ++r) {
      board.role("worker", r, 0);
      board.rank(r).batches.add();
    }
  });
  std::thread monitor([&] {
    while (!done) {
      (void)board.collect_report();
      board.rank(0).set_cursor(1, 4, {4});
    }
  });
  for (auto& th : threads) th.join();
  done = true;
  monitor.join();
  uint64_t items = 0;
  for (const auto& a : board.collect_rank(0).actors) items += a.items;
  EXPECT_EQ(items, 6000u);
  EXPECT_EQ(board.ranks().size(), 50u);
}

TEST(JobStatusTest, JsonRoundTripsAndNamesShardProgress) {
  JobStatus job;
  job.world_size = 2;
  job.dispatch = "none";
  ActorSnapshot coordinator;
  coordinator.role = "coordinator";
  job.actors.push_back(coordinator);
  RankStatus r;
  r.rank = 1;
  r.shards = {2, 5, 8};
  r.take = {4, 4, 0};
  r.consumed = {4, 1, 0};
  r.queues = {QueueStatus{"r1/e0/w0", 1, 4, 10}};
  r.actors = {ActorSnapshot{"worker", 1, 0, "waiting_input", 0, 5, 50, 0, "bad \xff byte", "n"}};
  add_rank(&job, r);
  RankStatus r0 = r;
  r0.rank = 0;
  r0.actors[0].rank = 0;
  add_rank(&job, r0);
  add_rank(&job, r0);  // replaced, not added twice
  ASSERT_EQ(job.ranks.size(), 2u);
  EXPECT_EQ(job.ranks[0].rank, 0u) << "kept sorted by rank";
  EXPECT_EQ(job.actors.size(), 3u) << "coordinator, and one worker per rank";
  const std::string text = status_json(job);
  EXPECT_NE(text.find("\"shards_done\":2"), std::string::npos) << "consumed == take, 0 == 0";
  EXPECT_NE(text.find("\"shards_unseen\":0"), std::string::npos);
  EXPECT_NE(text.find("\"state\":\"partial\""), std::string::npos);
  auto back = parse_status_json(text);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->world_size, 2u);
  ASSERT_EQ(back->ranks.size(), 2u);
  EXPECT_EQ(back->ranks[1].consumed, (std::vector<uint64_t>{4, 1, 0}));
  EXPECT_EQ(back->ranks[1].queues.at(0).bytes, 10u);
  ASSERT_EQ(back->actors.size(), 3u);
  EXPECT_EQ(back->actors[1].state, "waiting_input");
  for (const char* bad : {"", "[]", "{}", "{\"schema\":\"shardyard.status/1\"}",
                          "{\"schema\":\"shardyard.status/1\",\"actors\":[{\"rank\":\"x\"}],"
                          "\"ranks\":[]}"})
    EXPECT_EQ(parse_status_json(bad).status().code(), StatusCode::kInvalidArgument) << bad;
}

}  // namespace
}  // namespace shardyard::actors
