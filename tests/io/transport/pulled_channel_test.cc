// Tests of io/transport/pulled_channel.h: a forked producer pushes into a shared-memory
// channel, which the consumer of an in-process channel pulls on its own thread; the test's
// thread takes it back as a worker's runner does. Every packet arrives once and in order,
// counted where it was pulled; the end, a producer's death and a refused packet reach the
// thread that takes the channel back.
//
// No assertion depends on timing.
#include "io/transport/pulled_channel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <thread>

#include "channel_harness.h"

namespace shardyard::io::testing {
namespace {

using PulledChannelTest = ShmTest;  // checks that nothing is left behind

// A producer forked to push `packets` packets of `spec` (0: until a push fails), its
// channel pulled through an in-process channel `ch`; the source counts the packets it
// hands over in `handed`, as a runner does, and refuses packet `refuse` (counting from 1;
// 0: none).
struct Pulled {
  Pulled(const StreamSpec& spec, uint64_t packets, const ShmChannelOptions& options,
         uint64_t refuse = 0)
      : ends(make_ends()), child(fork_producer(ends, spec, packets)) {
    shm = open_consumer(ends, options);
    if (!shm) return;
    source = std::make_shared<PulledChannel>(*shm, [this, refuse](const Packet&) {
      return ++handed == refuse ? corrupt("packet " + std::to_string(refuse) + " is not ours")
                                : Status::ok();
    });
    ch = inproc_data_plane()->open_channel("c", 1, 4);
    set = source->usable() && ch->set_source(source);
  }
  Ends ends;
  Child child;
  std::shared_ptr<ShmConsumer> shm;
  std::shared_ptr<PulledChannel> source;
  std::shared_ptr<Channel> ch;
  bool set = false;
  std::atomic<uint64_t> handed{0};
};

// Pops `ch` on a thread of its own until its end or an error, counting the packets.
std::thread pop_all(Channel& ch, uint64_t* got) {
  return std::thread([&ch, got] {
    for (;;) {
      Packet q;
      auto more = ch.pop(&q);
      if (!more.is_ok() || !*more) return;
      ++*got;
    }
  });
}

TEST_F(PulledChannelTest, TheConsumerPullsEveryPacketAndTheEndWakesTheWaiter) {
  const StreamSpec spec{5, 24, 16 << 10};
  Pulled t(spec, 60, channel_options(8 << 20));
  ASSERT_TRUE(t.set);
  uint64_t popped = 0;
  Status checked;
  std::thread consumer([&] {
    // Every packet pulled, then the source's end: the channel waits for its finish().
    for (uint64_t i = 0; i < 60; ++i) {
      Packet p;
      auto more = t.ch->pop(&p);
      if (!more.is_ok() || !*more) return;
      const std::string diff = diff_packet(p, spec, i);
      if (!diff.empty()) {
        checked = corrupt(diff);
        return;
      }
      ++popped;
    }
    Packet p;
    auto end = t.ch->pop(&p);
    if (!end.is_ok() || *end) checked = internal_error("no end after the finish()");
  });
  t.source->wait(-1);  // the producer's finish, seen by a pull
  Status pop_error, refused;
  EXPECT_TRUE(t.source->take_back(&pop_error, &refused)) << "a pull saw the end";
  EXPECT_TRUE(pop_error.is_ok()) << pop_error.to_string();
  EXPECT_TRUE(refused.is_ok());
  t.ch->finish(Status::ok());
  consumer.join();
  EXPECT_TRUE(checked.is_ok()) << checked.to_string();
  EXPECT_EQ(popped, 60u);
  EXPECT_EQ(t.handed, 60u);
  EXPECT_EQ(t.child.wait(20000), kProduced);
}

TEST_F(PulledChannelTest, TakenBackMidStreamTheRestComesOnceAndInOrder) {
  const StreamSpec spec{9, 16, 8 << 10};
  Pulled t(spec, 80, channel_options(8 << 20));
  ASSERT_TRUE(t.set);
  uint64_t pulled = 0;
  for (; pulled < 25; ++pulled) {  // pulled on this thread, as the loader would
    Packet p;
    auto more = t.ch->pop(&p);
    ASSERT_TRUE(more.is_ok() && *more);
    ASSERT_EQ(diff_packet(p, spec, pulled), "");
  }
  ASSERT_TRUE(t.ch->set_source(nullptr));
  Status pop_error, refused;
  EXPECT_FALSE(t.source->take_back(&pop_error, &refused)) << "taken back before the end";
  EXPECT_EQ(t.handed, 25u);
  Packet p;
  auto after = t.source->pull(&p);
  ASSERT_TRUE(after.is_ok());
  EXPECT_FALSE(*after) << "a source taken back gives nothing more";
  uint64_t rest = 0;
  Status s = drain_and_check_from(*t.shm, spec, 25, &rest);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(rest, 55u);
  EXPECT_EQ(t.handed, 25u) << "what the caller pops itself is its own to count";
  EXPECT_EQ(t.child.wait(20000), kProduced);
}

TEST_F(PulledChannelTest, AProducerKilledEndsThePullWithItsName) {
  // Pushes until a push fails, at most 2 packets in flight.
  Pulled t({3, 8, 4 << 10}, 0, channel_options(4 << 20, 2));
  ASSERT_TRUE(t.set);
  Packet p;
  auto first = t.ch->pop(&p);
  ASSERT_TRUE(first.is_ok() && *first);
  t.child.kill(SIGKILL);
  EXPECT_EQ(t.child.wait(20000), 128 + SIGKILL);
  // Pulls go on until the packets sent before the death are out; then the end.
  uint64_t got = 0;
  std::thread consumer = pop_all(*t.ch, &got);
  t.source->wait(-1);
  Status pop_error, refused;
  EXPECT_TRUE(t.source->take_back(&pop_error, &refused));
  EXPECT_EQ(pop_error.code(), StatusCode::kUnavailable) << pop_error.to_string();
  EXPECT_NE(pop_error.message().find("worker 0"), std::string::npos) << pop_error.to_string();
  t.ch->cancel();
  consumer.join();
}

TEST_F(PulledChannelTest, ARefusedPacketEndsTheChannelAndIsNotHandedOn) {
  Pulled t({4, 8, 4 << 10}, 10, channel_options(4 << 20), /*refuse=*/3);
  ASSERT_TRUE(t.set);
  uint64_t got = 0;
  std::thread consumer = pop_all(*t.ch, &got);
  t.source->wait(-1);
  Status pop_error, refused;
  EXPECT_TRUE(t.source->take_back(&pop_error, &refused));
  EXPECT_EQ(refused.code(), StatusCode::kCorrupt);
  t.ch->finish(refused);
  consumer.join();
  EXPECT_EQ(got, 2u) << "the refused packet did not reach the consumer";
  t.shm->cancel();
  (void)t.child.wait(20000);
}

}  // namespace
}  // namespace shardyard::io::testing
