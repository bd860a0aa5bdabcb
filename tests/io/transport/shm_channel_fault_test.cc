// Faults of io/transport/shm_channel.h between real processes: a producer SIGKILLed at
// random moments or in the middle of a packet, a loader killed under a pushing producer,
// damaged frames and descriptors, a silent producer, a shm folder too small for the arena.
// After each, the loader has a clear error and nothing is left: no descriptor, no file and
// no used byte in the shm folder (the fixture checks).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <thread>

#include "channel_harness.h"
#include "io/transport/item_codec.h"

namespace shardyard::io::testing {
namespace {

using ShmChannelTest = ShmTest;  // checks that nothing is left behind

Status pop_until_error(Channel& ch, uint64_t* popped) {
  for (*popped = 0;; ++*popped) {
    Packet p;
    auto more = ch.pop(&p);
    if (!more.is_ok()) return more.status();
    if (!*more) return Status::ok();
  }
}

// The worker process is the exec'd helper, killed at a random moment of its stream.
TEST_F(ShmChannelTest, AProducerKilledMidStreamIsAnErrorNamingIt) {
  std::mt19937_64 rng(29);
  const StreamSpec spec{29, 24, 16 << 10};
  for (int round = 0; round < 6; ++round) {
    Ends ends = make_ends();
    Child child =
        spawn(SY_SHM_PEER, {"produce", "29", "0", "24", "16384"},
              {{"SHARDYARD_TEST_SOCKET_FD", std::to_string(ends.worker.fd())}}, {ends.worker.fd()});
    ASSERT_GT(child.pid(), 0);
    ends.worker = UnixSocket();
    const pid_t pid = child.pid();
    auto ch = open_consumer(ends, channel_options(16 << 20, 4));
    ASSERT_TRUE(ch);
    const uint64_t before_kill = rng() % 60;
    std::deque<std::pair<uint64_t, Packet>> kept;  // the last packets: held at the kill
    for (uint64_t i = 0; i < before_kill; ++i) {
      Packet p;
      auto got = ch->pop(&p);
      ASSERT_TRUE(got.is_ok() && *got) << "packet " << i << ": " << got.status().to_string();
      ASSERT_EQ(diff_packet(p, spec, i), "");
      kept.emplace_back(i, std::move(p));
      if (kept.size() > 3) kept.pop_front();
    }
    child.kill(SIGKILL);
    EXPECT_EQ(child.wait(20000), 128 + SIGKILL);
    uint64_t more = 0;
    Status s = pop_until_error(*ch, &more);
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.to_string();
    const std::string who = "producer worker 0 (pid " + std::to_string(pid) +
                            ") of channel r0/e0/w0 closed its socket before finishing";
    EXPECT_NE(s.message().find(who), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("exited or was killed"), std::string::npos);
    EXPECT_LE(more, 4u) << "at most the packets in flight arrive after the kill";
    for (const auto& [i, p] : kept) EXPECT_EQ(diff_packet(p, spec, i), "") << "after the kill";
  }
}

TEST_F(ShmChannelTest, AProducerThatDiesInTheMiddleOfAPacketDeliversNoneOfIt) {
  Ends ends = make_ends();
  Child child = fork_raw_producer(ends, [](UnixSocket& s, ShmArena& arena) {
    ArenaRing ring(arena.capacity());
    std::vector<Item> items(2);
    items[0].key = "whole";
    items[0].set_field("bin", std::string(3000, 'w'));
    items[1].key = "half";
    items[1].set_field("bin", std::string(3000, 'h'));
    send_raw_run(s, arena, ring, {items[0]}, true);   // a whole packet
    send_raw_run(s, arena, ring, {items[1]}, false);  // the first run of the next one
    ::kill(::getpid(), SIGKILL);
  });
  auto ch = open_consumer(ends, channel_options(1 << 20));
  ASSERT_TRUE(ch);
  Packet p;
  ASSERT_TRUE(*ch->pop(&p));
  ASSERT_EQ(p.items.size(), 1u);
  EXPECT_EQ(p.items[0].key, "whole");
  EXPECT_EQ(p.items[0].fields[0].view(), std::string(3000, 'w'));
  Packet q;
  Status s = ch->pop(&q).status();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("(in the middle of a packet)"), std::string::npos) << s.message();
  EXPECT_TRUE(q.items.empty());
  EXPECT_GT(ch->held_bytes(), 3000u) << "the whole packet's run is held";
  EXPECT_LT(ch->held_bytes(), 4096u) << "and nothing of the half one";
  EXPECT_EQ(child.wait(20000), 128 + SIGKILL);
}

// The loader is the child here; the test's process pushes and must not hang.
TEST_F(ShmChannelTest, ALoaderKilledEndsThePushWithAnError) {
  Ends ends = make_ends();
  Child loader = fork_child([&] {
    ends.worker = UnixSocket();
    std::vector<ShmPeer> peers;
    peers.push_back({std::move(ends.loader), "worker 0"});
    auto ch = ShmConsumer::open(std::move(peers), channel_options(1 << 20, 2));
    if (!ch.is_ok()) return 1;
    for (int i = 0; i < 3; ++i) {
      Packet p;
      if (!(*ch)->pop(&p).is_ok()) return 2;
    }
    ::kill(::getpid(), SIGKILL);
    return 3;
  });
  ends.loader = UnixSocket();
  auto producer = ShmProducer::connect(std::move(ends.worker), 10000, 20000);
  ASSERT_TRUE(producer.is_ok()) << producer.status().to_string();
  const StreamSpec spec{37, 4, 4096};
  Status s;
  uint64_t pushed = 0;
  for (; s.is_ok() && pushed < 100000; ++pushed) s = (*producer)->push(make_packet(spec, pushed));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.to_string();
  EXPECT_NE(s.message().find("the loader closed the channel"), std::string::npos) << s.message();
  EXPECT_LE(pushed, 3u + 2u + 1u) << "three popped, two in flight, the failed one";
  EXPECT_EQ((*producer)->push(make_packet(spec, 0)).code(), StatusCode::kUnavailable)
      << "the error stays";
  EXPECT_EQ(loader.wait(20000), 128 + SIGKILL);
  (*producer)->finish(Status::ok());  // harmless now
}

// Space is reused in ring order: one item the loader keeps stops the producer once it has
// gone round the ring, however much else was freed; the timeout says why, and dropping the
// item lets the stream go on.
TEST_F(ShmChannelTest, AnItemHeldForLongStallsTheRingAndTheTimeoutSaysWhy) {
  const StreamSpec spec{41, 4, 8 << 10};
  Ends ends = make_ends();
  Child child = fork_producer(ends, spec, 300);
  ShmChannelOptions o = channel_options(256 << 10, 4);
  o.wait_timeout_ms = 500;
  auto ch = open_consumer(ends, o);
  ASSERT_TRUE(ch);
  Packet first;
  ASSERT_TRUE(*ch->pop(&first));
  uint64_t next = 1;
  Status s;
  for (; next < 300; ++next) {
    Packet p;
    auto more = ch->pop(&p);
    if (!more.is_ok()) {
      s = more.status();
      break;
    }
    ASSERT_TRUE(*more);
    ASSERT_EQ(diff_packet(p, spec, next), "");
  }
  EXPECT_LT(next, 300u) << "the producer cannot go round the ring twice past a held run";
  EXPECT_NE(s.message().find("which waits for room in its shared arena while the loader holds"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(diff_packet(first, spec, 0), "");
  first = Packet{};  // drop it: the ring moves on
  uint64_t rest = 0;
  Status end = drain_and_check_from(*ch, spec, next, &rest);
  EXPECT_TRUE(end.is_ok()) << end.to_string();
  EXPECT_EQ(next + rest, 300u);
  EXPECT_EQ(child.wait(20000), kProduced);
}

struct Damage {
  const char* name;
  RawAct act;
  const char* expect;
};

// A push that fails after some runs of its packet went out (here: no room for the rest
// within the producer's wait) leaves the channel broken: a later packet's runs must never
// be taken for the rest of this one.
TEST_F(ShmChannelTest, APushThatFailsInTheMiddleOfAPacketEndsTheChannel) {
  auto packet = [] {
    Packet p;
    for (int i = 0; i < 12; ++i) {
      p.items.emplace_back();
      p.items.back().key = "k" + std::to_string(i);
      p.items.back().set_field("bin", std::string(16384, static_cast<char>('a' + i)));
    }
    return p;
  };
  Ends ends = make_ends();
  Child child = fork_with_producer(
      ends,
      [&](ShmProducer& producer) {
        if (!producer.push(packet()).is_ok()) return 60;
        if (producer.push(packet()).code() != StatusCode::kUnavailable) return 61;
        Status later = producer.push(packet());
        return later.message().find("(in the middle of a packet)") != std::string::npos
                   ? kPushFailed
                   : 62;
      },
      300);
  ShmChannelOptions o = channel_options(256 << 10, 4);
  o.max_run_bytes = 16 << 10;  // one item per run
  auto ch = open_consumer(ends, o);
  ASSERT_TRUE(ch);
  Packet held;  // takes 12 of the arena's 15 runs until the end
  ASSERT_TRUE(*ch->pop(&held));
  EXPECT_EQ(held.items.size(), 12u);
  EXPECT_EQ(child.wait(20000), kPushFailed);
  Packet p;
  Status s = ch->pop(&p).status();
  EXPECT_NE(s.message().find("(in the middle of a packet)"), std::string::npos) << s.message();
  EXPECT_EQ(held.items[11].fields[0].view(), std::string(16384, 'l'));
}

// A run at the ring's start holding one item's descriptor, with the field's offset and the
// announced item count as given (the payload is not written: the loader must not get there).
void send_one_item_run(UnixSocket& s, ShmArena& a, uint64_t field_offset, uint32_t announced) {
  Item it;
  it.key = "k";
  it.set_field("bin", std::string(100, 'x'));
  PayloadPlan plan;
  plan.field_offsets = {field_offset};
  ByteWriter d;
  encode_items(&it, 1, plan, &d);
  std::memcpy(a.writable_ring() + 128, d.out.data(), d.out.size());
  (void)s.send({kRun, encode(RunFrame{0, 1024, 128, d.out.size(), announced, 1, {}}), {}}, 5000);
}

std::vector<Damage> damages() {
  return {
      {"UnalignedRun",
       [](UnixSocket& s, ShmArena&) {
         (void)s.send({kRun, encode(RunFrame{100, 128, 64, 8, 1, 1, {}}), {}}, 5000);
       },
       "is not a run"},
      {"RunOutsideTheRing",
       [](UnixSocket& s, ShmArena& a) {
         (void)s.send({kRun, encode(RunFrame{0, a.capacity() * 2, 64, 8, 1, 1, {}}), {}}, 5000);
       },
       "is not a run"},
      {"FieldOutsideItsRun",
       [](UnixSocket& s, ShmArena& a) { send_one_item_run(s, a, 1 << 20, 1); }, "lies outside"},
      {"WrongItemCount", [](UnixSocket& s, ShmArena& a) { send_one_item_run(s, a, 0, 2); },
       "announces 2 items and holds 1"},
      {"GarbageRunBody",
       [](UnixSocket& s, ShmArena&) {
         (void)s.send({kRun, "garbage", {}}, 5000);
       },
       "run frame is malformed"},
      {"UnknownFrameType",
       [](UnixSocket& s, ShmArena&) {
         (void)s.send({99, "", {}}, 5000);
       },
       "unexpected unknown frame"},
      {"RawBytesOnTheSocket",
       [](UnixSocket& s, ShmArena&) { (void)!::send(s.fd(), "not a frame at all", 18, 0); },
       "bad magic"},
  };
}

TEST_F(ShmChannelTest, DamagedFramesAndDescriptorsAreErrorsNamingTheProducer) {
  for (const auto& d : damages()) {
    SCOPED_TRACE(d.name);
    Ends ends = make_ends();
    Child child = fork_raw_producer(ends, d.act);
    const pid_t pid = child.pid();
    {
      auto ch = open_consumer(ends, channel_options(1 << 20));
      ASSERT_TRUE(ch);
      Packet p;
      Status s = ch->pop(&p).status();
      EXPECT_EQ(s.code(), StatusCode::kCorrupt) << s.to_string();
      EXPECT_NE(s.message().find("producer worker 0 (pid " + std::to_string(pid) + ")"),
                std::string::npos)
          << s.message();
      EXPECT_NE(s.message().find(d.expect), std::string::npos) << s.message();
      EXPECT_EQ(ch->pop(&p).status().message(), s.message()) << "the channel stays failed";
    }
    EXPECT_EQ(child.wait(20000), 0) << "the raw producer saw the loader close";
  }
}

TEST_F(ShmChannelTest, ASilentProducerTimesOutNamingIt) {
  // Silent, and silent while its header counts packets sent: the loader reads frames
  // without a poll first when the header counts a packet sent and not popped, and a count
  // that no frame follows must still end at the timeout, not spin.
  const RawAct acts[] = {[](UnixSocket&, ShmArena&) {},
                         [](UnixSocket&, ShmArena& arena) { arena.header().sent.store(3); }};
  for (const auto& act : acts) {
    Ends ends = make_ends();
    Child child = fork_raw_producer(ends, act);
    ShmChannelOptions o = channel_options(1 << 20);
    o.wait_timeout_ms = 300;
    auto ch = open_consumer(ends, o);
    ASSERT_TRUE(ch);
    Packet p;
    Status s = ch->pop(&p).status();
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.to_string();
    EXPECT_NE(s.message().find("channel r0/e0/w0: no packet for 300 ms from producer worker 0 "
                               "(pid " +
                               std::to_string(child.pid()) + ")"),
              std::string::npos)
        << s.message();
    ch.reset();
    EXPECT_EQ(child.wait(20000), 0);
  }
}

TEST_F(ShmChannelTest, AProducerWithoutALoaderGivesUpAtItsHandshakeTimeout) {
  Ends ends = make_ends();
  auto silent = ShmProducer::connect(std::move(ends.worker), 100);
  EXPECT_EQ(silent.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(silent.status().message().find("no hello from the loader within 100 ms"),
            std::string::npos);
  Ends other = make_ends();
  ASSERT_TRUE(other.loader.send({kRun, encode(RunFrame{}), {}}, 1000).is_ok());
  auto wrong = ShmProducer::connect(std::move(other.worker), 1000);
  EXPECT_EQ(wrong.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(wrong.status().message().find("not a hello"), std::string::npos);
}

TEST_F(ShmChannelTest, ATinyShmFolderIsAClearErrorWhenTheLoaderOpens) {
  TmpfsMount tiny(4 << 20);
  if (!tiny.ok()) GTEST_SKIP() << tiny.error();
  ::setenv("SHARDYARD_SHM_DIR", tiny.dir().c_str(), 1);
  Ends ends = make_ends();
  ShmChannelOptions o = channel_options(16 << 20);
  o.segment.dir.clear();  // from the environment, as a user sets it
  std::vector<ShmPeer> peers;
  peers.push_back({std::move(ends.loader), "worker 0"});
  auto ch = ShmConsumer::open(std::move(peers), o);
  ::unsetenv("SHARDYARD_SHM_DIR");
  ASSERT_FALSE(ch.is_ok());
  const std::string m = ch.status().message();
  EXPECT_EQ(ch.status().code(), StatusCode::kIoError);
  for (const char* part :
       {"shared arena of channel r0/e0/w0 for producer worker 0", "4.0 MiB free of 4.0 MiB",
        "16.0 MiB are needed",
        "docker run --shm-size=", "mount -o remount,size=", "SHARDYARD_SHM_DIR", "--shm-arena-mib"})
    EXPECT_NE(m.find(part), std::string::npos) << "missing \"" << part << "\" in: " << m;
  EXPECT_TRUE(list_dir(tiny.dir()).empty());
  EXPECT_EQ(used_bytes(tiny.dir()), 0u);
}

}  // namespace
}  // namespace shardyard::io::testing
