// Tests of io/transport/data_plane.h (in-process channels): backpressure, ends, errors, cancel.
//
// No assertion depends on timing: a check that a blocked call "has not returned yet" can
// only pass spuriously on a slow machine, never fail spuriously.
#include "io/transport/data_plane.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
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

// What a pop() under way on another thread returns when the channel is cancelled.
Status cancel_while_popping(Channel& ch) {
  Status result;
  std::thread consumer([&] {
    Packet p;
    result = ch.pop(&p).status();
  });
  pause();
  ch.cancel();
  consumer.join();
  return result;
}

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
  EXPECT_EQ(cancel_while_popping(*ch).code(), StatusCode::kCancelled);
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

// A source of the packets `ids`; at their end it ends at once, or (blocking) waits for
// cancel() first. Records the threads that pulled.
class ListSource : public PacketSource {
 public:
  explicit ListSource(std::vector<uint64_t> ids, bool blocking = false)
      : ids_(std::move(ids)), blocking_(blocking) {}
  Result<bool> pull(Packet* out) override {
    std::unique_lock<std::mutex> lock(mu_);
    threads_.insert(std::this_thread::get_id());
    ++pulls_;
    if (next_ < ids_.size()) {
      *out = packet(ids_[next_++]);
      return true;
    }
    if (blocking_)
      while (!cancelled_) cv_.wait(lock);
    return false;
  }
  void cancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    cv_.notify_all();
  }
  size_t depth() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return ids_.size() - next_;
  }
  uint64_t queued_bytes() const override { return 100 * depth(); }
  std::set<std::thread::id> threads() const {
    std::lock_guard<std::mutex> lock(mu_);
    return threads_;
  }
  int pulls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return pulls_;
  }
  bool cancelled() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_;
  }

 private:
  const std::vector<uint64_t> ids_;
  const bool blocking_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  size_t next_ = 0;
  int pulls_ = 0;
  bool cancelled_ = false;
  std::set<std::thread::id> threads_;
};

uint64_t pop_id(Channel& ch) {
  Packet p;
  auto more = ch.pop(&p);
  EXPECT_TRUE(more.is_ok() && *more);
  return more.is_ok() && *more ? p.items.at(0).id : UINT64_MAX;
}

TEST(InprocChannel, TheConsumerPullsFromASourceOnItsOwnThreadAfterWhatIsQueued) {
  auto ch = inproc_data_plane()->open_channel("c", 1, 4);
  ASSERT_TRUE(ch->push(packet(1)).is_ok());
  auto source = std::make_shared<ListSource>(std::vector<uint64_t>{2, 3});
  ASSERT_TRUE(ch->set_source(source));
  EXPECT_EQ(ch->depth(), 3u) << "one queued, two in the source";
  EXPECT_EQ(ch->queued_bytes(), 200u) << "the source's bytes (the packet pushed counts none)";
  std::vector<uint64_t> got;
  std::thread consumer([&] {
    for (int i = 0; i < 3; ++i) got.push_back(pop_id(*ch));
  });
  const auto consumer_id = consumer.get_id();
  consumer.join();
  EXPECT_EQ(got, (std::vector<uint64_t>{1, 2, 3})) << "the queued packet first";
  EXPECT_EQ(source->threads(), std::set<std::thread::id>{consumer_id});
  EXPECT_EQ(ch->depth(), 0u);
}

TEST(InprocChannel, AfterItsSourceEndsTheConsumerWaitsForAPushAndTheEnd) {
  auto ch = inproc_data_plane()->open_channel("c", 1, 4);
  auto source = std::make_shared<ListSource>(std::vector<uint64_t>{1});
  ASSERT_TRUE(ch->set_source(source));
  std::vector<uint64_t> got;
  std::atomic<bool> ended{false};
  std::thread consumer([&] {
    got.push_back(pop_id(*ch));
    got.push_back(pop_id(*ch));  // the source ends here: it waits for the push
    Packet p;
    auto more = ch->pop(&p);
    EXPECT_TRUE(more.is_ok() && !*more);
    ended = true;
  });
  pause();
  EXPECT_FALSE(ended);
  const int pulls = source->pulls();
  EXPECT_EQ(pulls, 2) << "one packet, then its end; an ended source is not pulled again";
  ASSERT_TRUE(ch->push(packet(2)).is_ok());
  ch->finish(Status::ok());
  consumer.join();
  EXPECT_EQ(got, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(source->pulls(), pulls);
  EXPECT_FALSE(source->cancelled());
}

TEST(InprocChannel, ANewSourceWakesAConsumerThatWaits) {
  auto ch = inproc_data_plane()->open_channel("c", 1, 4);
  uint64_t got = 0;
  std::thread consumer([&] { got = pop_id(*ch); });
  pause();
  ASSERT_TRUE(ch->set_source(std::make_shared<ListSource>(std::vector<uint64_t>{7})));
  consumer.join();
  EXPECT_EQ(got, 7u);
  ASSERT_TRUE(ch->set_source(nullptr));
  EXPECT_EQ(ch->depth(), 0u);
}

TEST(InprocChannel, AChannelOfSeveralProducersTakesNoSource) {
  auto ch = inproc_data_plane()->open_channel("c", 2, 4);
  auto source = std::make_shared<ListSource>(std::vector<uint64_t>{1});
  EXPECT_FALSE(ch->set_source(source)) << "a pull would hold up the other producer's packets";
  ASSERT_TRUE(ch->push(packet(2)).is_ok());
  EXPECT_EQ(pop_id(*ch), 2u);
  EXPECT_EQ(source->pulls(), 0);
}

TEST(InprocChannel, CancelEndsAPullThatWaitsAndCancelsALaterSource) {
  auto ch = inproc_data_plane()->open_channel("c", 1, 4);
  auto source = std::make_shared<ListSource>(std::vector<uint64_t>{}, /*blocking=*/true);
  ASSERT_TRUE(ch->set_source(source));
  EXPECT_EQ(cancel_while_popping(*ch).code(), StatusCode::kCancelled);
  EXPECT_TRUE(source->cancelled());
  auto later = std::make_shared<ListSource>(std::vector<uint64_t>{1});
  ASSERT_TRUE(ch->set_source(later));
  EXPECT_TRUE(later->cancelled()) << "a source set on a cancelled channel";
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
