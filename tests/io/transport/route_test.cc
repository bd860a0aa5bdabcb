// Tests of io/transport/data_plane.h's Route (the in-process dispatcher -> workers hop of an
// epoch): where round robin, on request and broadcast put what the dispatcher sends, the loader's
// credit (wait_consumed / consumed), cancel, finish with an error, and the end of an epoch.
//
// As in data_plane_test.cc, no assertion depends on timing: a check that a blocked call
// "has not returned yet" can only pass spuriously on a slow machine, never fail spuriously.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "io/transport/data_plane.h"

namespace shardyard::io {
namespace {

Item at(uint64_t position) {
  Item it;
  it.id = 1000 + position;
  it.position = position;
  return it;
}

void pause() { std::this_thread::sleep_for(std::chrono::milliseconds(50)); }

// Receives (without waiting) everything queued for `worker`.
std::vector<uint64_t> drain(Route& route, uint32_t worker) {
  std::vector<uint64_t> got;
  for (;;) {
    auto d = route.receive(worker, false);
    EXPECT_TRUE(d.is_ok()) << d.status().to_string();
    if (!d.is_ok() || d->kind != Delivery::Kind::kItems || d->items.empty()) return got;
    for (const auto& it : d->items) got.push_back(it.position);
  }
}

TEST(InprocRoute, OpenAttachAndOptions) {
  auto plane = inproc_data_plane();
  auto route = plane->open_route("r0/e0/route", Dispatch::kRoundRobin, 3, 0);
  ASSERT_NE(route, nullptr);
  EXPECT_EQ(plane->attach_route("r0/e0/route"), route);
  EXPECT_EQ(plane->attach_route("nope"), nullptr);
  EXPECT_EQ(route->mode(), Dispatch::kRoundRobin);
  EXPECT_EQ(route->window(), 1u) << "a window of 0 means 1";
  EXPECT_EQ(route->consumed_position(), 0u);
  route.reset();
  EXPECT_EQ(plane->attach_route("r0/e0/route"), nullptr) << "the loader dropped it";
}

TEST(InprocRoute, RoundRobinPutsPositionPAtWorkerPModW) {
  for (uint32_t workers : {1u, 2u, 3u, 5u}) {
    auto route = inproc_data_plane()->open_route("r", Dispatch::kRoundRobin, workers, 1024);
    for (uint64_t p = 0; p < 37; ++p) ASSERT_TRUE(route->send(at(p)).is_ok());
    EXPECT_EQ(route->depth(), 37u);
    std::set<uint64_t> all;
    for (uint32_t w = 0; w < workers; ++w) {
      auto got = drain(*route, w);
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i] % workers, w) << "W=" << workers;
        if (i > 0) {
          EXPECT_LT(got[i - 1], got[i]) << "in order";
        }
        all.insert(got[i]);
      }
    }
    EXPECT_EQ(all.size(), 37u) << "W=" << workers;
    EXPECT_EQ(route->depth(), 0u);
  }
}

TEST(InprocRoute, OnRequestAnyWorkerTakesAFairShare) {
  const uint32_t workers = 4;
  auto route = inproc_data_plane()->open_route("r", Dispatch::kOnRequest, workers, 1024);
  for (uint64_t p = 0; p < 40; ++p) ASSERT_TRUE(route->send(at(p)).is_ok());
  // A quarter of what is queued (at least one, at most 16), in position order.
  auto d = route->receive(3, false);
  ASSERT_TRUE(d.is_ok());
  ASSERT_EQ(d->items.size(), 10u);
  for (uint64_t i = 0; i < 10; ++i) EXPECT_EQ(d->items[i].position, i);
  d = route->receive(0, false);  // any worker: the next items
  ASSERT_TRUE(d.is_ok());
  ASSERT_EQ(d->items.size(), 7u);  // 30 / 4
  EXPECT_EQ(d->items.front().position, 10u);
  // One worker alone empties the queue, at least one item at a time.
  std::vector<uint64_t> rest = drain(*route, 2);
  ASSERT_EQ(rest.size(), 23u);
  for (size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(rest[i], 17 + i);
  // Many queued: at most 16 per receive.
  for (uint64_t p = 40; p < 240; ++p) ASSERT_TRUE(route->send(at(p)).is_ok());
  d = route->receive(1, false);
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->items.size(), 16u);
}

TEST(InprocRoute, OnRequestWaitingWorkersShareTheItemsExactlyOnce) {
  const uint32_t workers = 3;
  auto route = inproc_data_plane()->open_route("r", Dispatch::kOnRequest, workers, 1024);
  std::vector<std::vector<uint64_t>> got(workers);
  std::vector<std::thread> threads;
  for (uint32_t w = 0; w < workers; ++w)
    threads.emplace_back([&, w] {
      for (;;) {
        auto d = route->receive(w, true);
        if (!d.is_ok() || d->kind == Delivery::Kind::kEnd) return;
        for (const auto& it : d->items) got[w].push_back(it.position);
      }
    });
  for (uint64_t p = 0; p < 3000; ++p) {
    ASSERT_TRUE(route->send(at(p)).is_ok());
    if (p % 100 == 0) std::this_thread::yield();
  }
  route->finish(Status::ok());
  for (auto& t : threads) t.join();
  std::multiset<uint64_t> all;
  for (const auto& g : got) all.insert(g.begin(), g.end());
  ASSERT_EQ(all.size(), 3000u);
  EXPECT_EQ(std::set<uint64_t>(all.begin(), all.end()).size(), 3000u) << "none twice";
}

TEST(InprocRoute, BroadcastGivesEveryWorkerTheSameSharedShard) {
  const uint32_t workers = 4;
  auto route = inproc_data_plane()->open_route("r", Dispatch::kBroadcast, workers, 1024);
  auto shard = std::make_shared<SharedShard>();
  shard->shard = 7;
  shard->first_position = 100;
  for (uint64_t i = 0; i < 5; ++i) shard->items.push_back(at(100 + i));
  const SharedShard* address = shard.get();
  auto second = std::make_shared<SharedShard>();
  second->shard = 2;
  ASSERT_TRUE(route->send_shard(shard).is_ok());
  ASSERT_TRUE(route->send_shard(second).is_ok());
  shard.reset();
  route->finish(Status::ok());
  for (uint32_t w = 0; w < workers; ++w) {
    auto d = route->receive(w, false);
    ASSERT_TRUE(d.is_ok());
    ASSERT_EQ(d->kind, Delivery::Kind::kShard);
    EXPECT_EQ(d->shard.get(), address) << "worker " << w << ": one copy, not one per worker";
    EXPECT_EQ(d->shard->items.size(), 5u);
    d = route->receive(w, true);
    ASSERT_TRUE(d.is_ok());
    ASSERT_EQ(d->kind, Delivery::Kind::kShard);
    EXPECT_EQ(d->shard.get(), second.get()) << "shards arrive in the order sent";
    d = route->receive(w, true);
    ASSERT_TRUE(d.is_ok());
    EXPECT_EQ(d->kind, Delivery::Kind::kEnd);
  }
}

TEST(InprocRoute, ReceiveWithoutWaitingOnAnEmptyRouteIsEmptyItems) {
  auto route = inproc_data_plane()->open_route("r", Dispatch::kRoundRobin, 2, 16);
  auto d = route->receive(0, false);
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->kind, Delivery::Kind::kItems);
  EXPECT_TRUE(d->items.empty());
}

TEST(InprocRoute, ReceiveWaitsForASend) {
  auto route = inproc_data_plane()->open_route("r", Dispatch::kRoundRobin, 2, 16);
  std::atomic<bool> received{false};
  Result<Delivery> d = Delivery{};
  std::thread worker([&] {
    d = route->receive(1, true);
    received = true;
  });
  pause();
  EXPECT_FALSE(received);
  ASSERT_TRUE(route->send(at(0)).is_ok());  // worker 0's: worker 1 keeps waiting
  pause();
  EXPECT_FALSE(received) << "woke for another worker's item";
  ASSERT_TRUE(route->send(at(1)).is_ok());
  worker.join();
  ASSERT_TRUE(d.is_ok());
  ASSERT_EQ(d->items.size(), 1u);
  EXPECT_EQ(d->items[0].position, 1u);
}

TEST(InprocRoute, WaitConsumedBlocksUntilTheLoaderCredits) {
  auto route = inproc_data_plane()->open_route("r", Dispatch::kRoundRobin, 2, 8);
  ASSERT_TRUE(route->wait_consumed(0).is_ok()) << "nothing to wait for";
  std::atomic<bool> done{false};
  Status st = internal_error("not returned");
  std::thread dispatcher([&] {
    st = route->wait_consumed(10);
    done = true;
  });
  pause();
  EXPECT_FALSE(done);
  route->consumed(5);
  EXPECT_EQ(route->consumed_position(), 5u);
  pause();
  EXPECT_FALSE(done) << "returned before position 10 was consumed";
  route->consumed(3);  // an older credit changes nothing
  EXPECT_EQ(route->consumed_position(), 5u);
  route->consumed(10);
  dispatcher.join();
  EXPECT_TRUE(done);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_EQ(route->consumed_position(), 10u);
  EXPECT_TRUE(route->wait_consumed(7).is_ok());
}

TEST(InprocRoute, CancelUnblocksEveryoneWithCancelled) {
  const uint32_t workers = 3;
  auto route = inproc_data_plane()->open_route("r", Dispatch::kBroadcast, workers, 8);
  ASSERT_TRUE(route->send_shard(std::make_shared<SharedShard>()).is_ok());
  std::vector<Status> worker_status(workers, internal_error("not returned"));
  std::vector<std::thread> threads;
  // Every worker takes the queued shard, then blocks for the next delivery.
  for (uint32_t w = 0; w < workers; ++w)
    threads.emplace_back([&, w] {
      for (;;) {
        auto d = route->receive(w, true);
        if (!d.is_ok()) {
          worker_status[w] = d.status();
          return;
        }
        if (d->kind == Delivery::Kind::kEnd) {
          worker_status[w] = Status::ok();
          return;
        }
      }
    });
  Status producer = internal_error("not returned");
  std::thread dispatcher([&] { producer = route->wait_consumed(100); });
  pause();
  route->cancel();
  for (auto& t : threads) t.join();
  dispatcher.join();
  for (uint32_t w = 0; w < workers; ++w)
    EXPECT_EQ(worker_status[w].code(), StatusCode::kCancelled) << "worker " << w;
  EXPECT_EQ(producer.code(), StatusCode::kCancelled);
  EXPECT_EQ(route->send(at(0)).code(), StatusCode::kCancelled);
  EXPECT_EQ(route->send_shard(std::make_shared<SharedShard>()).code(), StatusCode::kCancelled);
  EXPECT_EQ(route->wait_consumed(1).code(), StatusCode::kCancelled);
  EXPECT_EQ(route->receive(0, false).status().code(), StatusCode::kCancelled);
  EXPECT_EQ(route->depth(), 0u) << "cancel drops what was queued";
}

TEST(InprocRoute, FinishWithAnErrorReachesEveryReceiver) {
  const uint32_t workers = 2;
  auto route = inproc_data_plane()->open_route("r", Dispatch::kOnRequest, workers, 8);
  std::vector<Status> got(workers, Status::ok());
  std::vector<std::thread> threads;
  for (uint32_t w = 0; w < workers; ++w)
    threads.emplace_back([&, w] { got[w] = route->receive(w, true).status(); });
  pause();
  route->finish(corrupt("shard-000003.tar: bad header at byte 1536"));
  route->finish(io_error("a later error is not the one reported"));
  for (auto& t : threads) t.join();
  for (uint32_t w = 0; w < workers; ++w) {
    EXPECT_EQ(got[w].code(), StatusCode::kCorrupt) << "worker " << w;
    EXPECT_NE(got[w].message().find("shard-000003.tar"), std::string::npos);
  }
  // Queued items do not hide the error either: the epoch failed.
  auto rr = inproc_data_plane()->open_route("r", Dispatch::kRoundRobin, 1, 8);
  ASSERT_TRUE(rr->send(at(0)).is_ok());
  rr->finish(corrupt("boom"));
  EXPECT_EQ(rr->receive(0, false).status().code(), StatusCode::kCorrupt);
}

TEST(InprocRoute, EndOfEpochComesAfterTheQueueIsDrained) {
  for (auto mode : {Dispatch::kRoundRobin, Dispatch::kOnRequest}) {
    auto route = inproc_data_plane()->open_route("r", mode, 2, 64);
    for (uint64_t p = 0; p < 6; ++p) ASSERT_TRUE(route->send(at(p)).is_ok());
    route->finish(Status::ok());
    std::multiset<uint64_t> got;
    for (uint32_t w = 0; w < 2; ++w) {
      for (;;) {
        auto d = route->receive(w, true);
        ASSERT_TRUE(d.is_ok()) << dispatch_name(mode);
        if (d->kind == Delivery::Kind::kEnd) break;
        ASSERT_EQ(d->kind, Delivery::Kind::kItems);
        ASSERT_FALSE(d->items.empty()) << "a waiting receive never returns nothing";
        for (const auto& it : d->items) got.insert(it.position);
      }
      auto again = route->receive(w, false);
      ASSERT_TRUE(again.is_ok());
      EXPECT_EQ(again->kind, Delivery::Kind::kEnd) << "the end stays the end";
    }
    EXPECT_EQ(got.size(), 6u) << dispatch_name(mode);
    EXPECT_EQ(std::set<uint64_t>(got.begin(), got.end()).size(), 6u);
  }
}

}  // namespace
}  // namespace shardyard::io
