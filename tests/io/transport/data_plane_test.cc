// Tests of io/transport/data_plane.h (in-process channels): backpressure, ends, errors, cancel.
//
// No assertion depends on timing: a check that a blocked call "has not returned yet" can
// only pass spuriously on a slow machine, never fail spuriously.
#include "io/transport/data_plane.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

namespace shardyard::io {
namespace {

Packet packet(uint64_t id) {
  Packet p;
  p.items.emplace_back();
  p.items.back().id = id;
  return p;
}

void pause() { std::this_thread::sleep_for(std::chrono::milliseconds(50)); }

TEST(InprocChannel, DeliversPacketsInOrderThenEnds) {
  auto plane = inproc_data_plane();
  EXPECT_STREQ(plane->kind(), "inproc");
  auto ch = plane->open_channel("rank0", 1, 8);
  for (uint64_t i = 0; i < 5; ++i) ASSERT_TRUE(ch->push(packet(i)).is_ok());
  EXPECT_EQ(ch->depth(), 5u);
  ch->finish(Status::ok());
  for (uint64_t i = 0; i < 5; ++i) {
    Packet p;
    auto more = ch->pop(&p);
    ASSERT_TRUE(more.is_ok());
    ASSERT_TRUE(*more);
    EXPECT_EQ(p.items.at(0).id, i);
  }
  Packet p;
  auto more = ch->pop(&p);
  ASSERT_TRUE(more.is_ok());
  EXPECT_FALSE(*more) << "the end after every producer finished";
  EXPECT_EQ(ch->depth(), 0u);
}

TEST(InprocChannel, PushBlocksAtCapacityUntilAPop) {
  auto ch = inproc_data_plane()->open_channel("c", 1, 2);
  ASSERT_TRUE(ch->push(packet(0)).is_ok());
  ASSERT_TRUE(ch->push(packet(1)).is_ok());
  std::atomic<bool> pushed{false};
  Status third;
  std::thread producer([&] {
    third = ch->push(packet(2));
    pushed = true;
  });
  pause();
  EXPECT_FALSE(pushed) << "push returned while the channel was full";
  EXPECT_EQ(ch->depth(), 2u);
  Packet p;
  ASSERT_TRUE(ch->pop(&p).is_ok());
  EXPECT_EQ(p.items.at(0).id, 0u);
  producer.join();
  EXPECT_TRUE(pushed);
  EXPECT_TRUE(third.is_ok());
  EXPECT_EQ(ch->depth(), 2u);
}

TEST(InprocChannel, CountsTheBytesOfQueuedPackets) {
  auto ch = inproc_data_plane()->open_channel("bytes", 1, 4);
  Packet a = packet(0), b = packet(1);
  a.bytes = 100;
  b.bytes = 50;
  ASSERT_TRUE(ch->push(std::move(a)).is_ok());
  ASSERT_TRUE(ch->push(std::move(b)).is_ok());
  EXPECT_EQ(ch->queued_bytes(), 150u);
  Packet p;
  ASSERT_TRUE(ch->pop(&p).is_ok());
  EXPECT_EQ(ch->queued_bytes(), 50u);
  ch->cancel();
  EXPECT_EQ(ch->queued_bytes(), 0u) << "a cancelled channel holds nothing";
}

TEST(InprocChannel, ZeroCapacityMeansOne) {
  auto ch = inproc_data_plane()->open_channel("c", 1, 0);
  ASSERT_TRUE(ch->push(packet(0)).is_ok());
  EXPECT_EQ(ch->depth(), 1u);
}

TEST(InprocChannel, PopBlocksWhileEmptyUntilAPush) {
  auto ch = inproc_data_plane()->open_channel("c", 1, 4);
  std::atomic<bool> popped{false};
  Packet got;
  std::thread consumer([&] {
    auto more = ch->pop(&got);
    EXPECT_TRUE(more.is_ok() && *more);
    popped = true;
  });
  pause();
  EXPECT_FALSE(popped);
  ASSERT_TRUE(ch->push(packet(9)).is_ok());
  consumer.join();
  EXPECT_EQ(got.items.at(0).id, 9u);
}

TEST(InprocChannel, FinishWithAnErrorReachesTheConsumer) {
  auto ch = inproc_data_plane()->open_channel("c", 2, 4);
  std::thread consumer_waiting([&] {
    Packet p;
    auto r = ch->pop(&p);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
    EXPECT_EQ(r.status().message(), "/data/a.tar at byte 512: bad checksum");
  });
  pause();
  ch->finish(corrupt("/data/a.tar at byte 512: bad checksum"));
  ch->finish(io_error("a later error"));  // the first error wins
  consumer_waiting.join();
  Packet p;
  auto again = ch->pop(&p);
  ASSERT_FALSE(again.is_ok());
  EXPECT_EQ(again.status().code(), StatusCode::kCorrupt);
}

TEST(InprocChannel, CancelUnblocksABlockedProducerWithCancelled) {
  auto ch = inproc_data_plane()->open_channel("c", 1, 1);
  ASSERT_TRUE(ch->push(packet(0)).is_ok());
  Status blocked;
  std::atomic<bool> returned{false};
  std::thread producer([&] {
    blocked = ch->push(packet(1));
    returned = true;
  });
  pause();
  EXPECT_FALSE(returned);
  ch->cancel();
  producer.join();
  EXPECT_EQ(blocked.code(), StatusCode::kCancelled);
  EXPECT_EQ(ch->push(packet(2)).code(), StatusCode::kCancelled) << "later pushes too";
  Packet p;
  auto r = ch->pop(&p);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCancelled);
  EXPECT_EQ(ch->depth(), 0u) << "cancel drops what was queued";
}

TEST(InprocChannel, CancelUnblocksABlockedConsumer) {
  auto ch = inproc_data_plane()->open_channel("c", 1, 1);
  Status result;
  std::thread consumer([&] {
    Packet p;
    result = ch->pop(&p).status();
  });
  pause();
  ch->cancel();
  consumer.join();
  EXPECT_EQ(result.code(), StatusCode::kCancelled);
}

TEST(InprocChannel, EndsOnlyWhenEveryProducerFinished) {
  auto ch = inproc_data_plane()->open_channel("c", 2, 4);
  ch->finish(Status::ok());
  std::atomic<bool> ended{false};
  std::thread consumer([&] {
    Packet p;
    auto more = ch->pop(&p);
    EXPECT_TRUE(more.is_ok());
    EXPECT_FALSE(more.is_ok() && *more);
    ended = true;
  });
  pause();
  EXPECT_FALSE(ended) << "ended with one of two producers still running";
  ch->finish(Status::ok());
  consumer.join();
  EXPECT_TRUE(ended);
  ch->finish(Status::ok());  // an extra finish changes nothing
  Packet p;
  auto more = ch->pop(&p);
  ASSERT_TRUE(more.is_ok());
  EXPECT_FALSE(*more);
}

TEST(InprocDataPlane, ProducersAttachToAnOpenChannelByName) {
  auto plane = inproc_data_plane();
  EXPECT_EQ(plane->attach("rank0/loader"), nullptr) << "nothing opened yet";
  auto ch = plane->open_channel("rank0/loader", 1, 4);
  auto other = plane->open_channel("rank1/loader", 1, 4);
  auto producer = plane->attach("rank0/loader");
  ASSERT_EQ(producer, ch);
  EXPECT_EQ(plane->attach("rank1/loader"), other);
  ASSERT_TRUE(producer->push(packet(5)).is_ok());
  producer->finish(Status::ok());
  Packet p;
  ASSERT_TRUE(ch->pop(&p).is_ok());
  EXPECT_EQ(p.items.at(0).id, 5u);
  // The channel lives while its consumer holds it.
  producer.reset();
  ch.reset();
  EXPECT_EQ(plane->attach("rank0/loader"), nullptr);
  EXPECT_NE(plane->attach("rank1/loader"), nullptr);
}

TEST(InprocChannel, ManyProducersDeliverEveryPacketExactlyOnce) {
  constexpr int kProducers = 4, kPackets = 500;
  auto ch = inproc_data_plane()->open_channel("c", kProducers, 3);
  std::vector<std::thread> producers;
  for (int t = 0; t < kProducers; ++t) {
    producers.emplace_back([&, t] {
      for (int i = 0; i < kPackets; ++i)
        ASSERT_TRUE(ch->push(packet(static_cast<uint64_t>(t * kPackets + i))).is_ok());
      ch->finish(Status::ok());
    });
  }
  std::set<uint64_t> seen;
  std::vector<uint64_t> last(kProducers, 0);
  for (;;) {
    Packet p;
    auto more = ch->pop(&p);
    ASSERT_TRUE(more.is_ok()) << more.status().to_string();
    if (!*more) break;
    const uint64_t id = p.items.at(0).id;
    EXPECT_TRUE(seen.insert(id).second) << "packet " << id << " twice";
    const uint64_t t = id / kPackets;
    if (id % kPackets > 0) {
      EXPECT_GT(id, last[t]) << "one producer's packets stay in order";
    }
    last[t] = id;
    EXPECT_LE(ch->depth(), 3u);
  }
  for (auto& t : producers) t.join();
  EXPECT_EQ(seen.size(), static_cast<size_t>(kProducers * kPackets));
}

}  // namespace
}  // namespace shardyard::io
