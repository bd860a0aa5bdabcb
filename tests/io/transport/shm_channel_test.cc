// Tests of io/transport/shm_channel.h between real processes: a producer forked (or
// started with exec) pushes, this process pops. Round trips checked byte for byte,
// backpressure by packets and by bytes, releases in any order and on any thread, cancel,
// errors that travel, several producers, one arena reused by consecutive channels. Faults:
// shm_channel_fault_test.cc.
//
// No assertion depends on timing: "the producer has not pushed more" after a pause can
// only pass spuriously on a slow machine, never fail spuriously.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <random>
#include <thread>

#include "channel_harness.h"

namespace shardyard::io::testing {
namespace {

using ShmChannelTest = ShmTest;  // checks that nothing is left behind

void pause_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

TEST_F(ShmChannelTest, RoundTripsManyPacketsOfRandomSizes) {
  const StreamSpec spec{7, 24, 64 << 10};
  Ends ends = make_ends();
  Child child = fork_producer(ends, spec, 300);
  auto ch = open_consumer(ends, channel_options(8 << 20));
  ASSERT_TRUE(ch);
  uint64_t popped = 0;
  Status s = drain_and_check(*ch, spec, &popped);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(popped, 300u);
  EXPECT_EQ(child.wait(20000), kProduced);
  EXPECT_EQ(ch->held_bytes(), 0u);
  EXPECT_EQ(ch->depth(), 0u);
  Packet p;
  auto end = ch->pop(&p);
  ASSERT_TRUE(end.is_ok());
  EXPECT_FALSE(*end) << "the end stays the end";
}

// The path of a worker process: fork + exec, the socket's number in the environment.
TEST_F(ShmChannelTest, AnExecedProducerRoundTrips) {
  const StreamSpec spec{11, 16, 200000};
  Ends ends = make_ends();
  Child child =
      spawn(SY_SHM_PEER, {"produce", "11", "200", "16", "200000"},
            {{"SHARDYARD_TEST_SOCKET_FD", std::to_string(ends.worker.fd())}}, {ends.worker.fd()});
  ASSERT_GT(child.pid(), 0);
  ends.worker = UnixSocket();
  auto ch = open_consumer(ends, channel_options(16 << 20));
  ASSERT_TRUE(ch);
  uint64_t popped = 0;
  Status s = drain_and_check(*ch, spec, &popped);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(popped, 200u);
  EXPECT_EQ(child.wait(20000), 0);
}

TEST_F(ShmChannelTest, PacketsLargerThanARunArriveWhole) {
  const StreamSpec spec{3, 24, 16 << 10};
  Ends ends = make_ends();
  Child child = fork_producer(ends, spec, 100);
  ShmChannelOptions o = channel_options(2 << 20);
  o.max_run_bytes = 16 << 10;  // most packets take several runs
  auto ch = open_consumer(ends, o);
  ASSERT_TRUE(ch);
  uint64_t popped = 0;
  Status s = drain_and_check(*ch, spec, &popped);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(popped, 100u);
  EXPECT_EQ(child.wait(20000), kProduced);
}

TEST_F(ShmChannelTest, PacketsInFlightBoundTheProducer) {
  const StreamSpec spec{5, 4, 4096};
  SharedCounter pushed;
  Ends ends = make_ends();
  Child child = fork_producer(ends, spec, 50, &pushed);
  auto ch = open_consumer(ends, channel_options(4 << 20, 2));
  ASSERT_TRUE(ch);
  ASSERT_TRUE(eventually([&] { return pushed.get() >= 2; }));
  pause_ms(200);
  EXPECT_EQ(pushed.get(), 2u) << "a third push waits for a pop";
  EXPECT_EQ(ch->depth(), 2u);
  Packet p;
  ASSERT_TRUE(ch->pop(&p).is_ok());
  EXPECT_EQ(diff_packet(p, spec, 0), "");
  ASSERT_TRUE(eventually([&] { return pushed.get() >= 3; }));
  pause_ms(100);
  EXPECT_EQ(pushed.get(), 3u);
  uint64_t popped = 0;
  Status rest = drain_and_check_from(*ch, spec, 1, &popped);
  EXPECT_TRUE(rest.is_ok()) << rest.to_string();
  EXPECT_EQ(popped, 49u);
  EXPECT_EQ(child.wait(20000), kProduced);
}

// The loader keeps every item it pops: the producer stops when the arena is full, and the
// loader never holds more than the arena.
TEST_F(ShmChannelTest, ArenaBytesBoundWhatTheLoaderHolds) {
  const StreamSpec spec{9, 4, 16 << 10};
  SharedCounter pushed;
  Ends ends = make_ends();
  Child child = fork_producer(ends, spec, 200, &pushed);
  ShmChannelOptions o = channel_options(256 << 10, 64);
  o.wait_timeout_ms = 500;  // pop() gives up when the producer is stuck
  auto ch = open_consumer(ends, o);
  ASSERT_TRUE(ch);
  std::vector<Packet> held;
  for (;;) {
    Packet p;
    auto more = ch->pop(&p);
    if (!more.is_ok()) {
      EXPECT_EQ(more.status().code(), StatusCode::kUnavailable) << more.status().to_string();
      EXPECT_NE(more.status().message().find("no packet for 500 ms from producer worker 0 (pid"),
                std::string::npos)
          << more.status().message();
      break;
    }
    ASSERT_TRUE(*more) << "the producer cannot have finished: it has 200 packets";
    ASSERT_EQ(diff_packet(p, spec, held.size()), "");
    held.push_back(std::move(p));
  }
  EXPECT_LE(ch->held_bytes(), 256u << 10);
  EXPECT_GT(ch->held_bytes(), 0u);
  EXPECT_LT(pushed.get(), 200u);
  EXPECT_EQ(pushed.get(), held.size()) << "every packet sent was popped: bytes are the bound";
  const uint64_t got = held.size();
  held.clear();  // frees the arena: the producer goes on, and a timed-out pop may be retried
  uint64_t popped = 0;
  for (;; ++popped) {
    Packet p;
    auto more = ch->pop(&p);
    ASSERT_TRUE(more.is_ok()) << more.status().to_string();
    if (!*more) break;
    ASSERT_EQ(diff_packet(p, spec, got + popped), "");
  }
  EXPECT_EQ(got + popped, 200u);
  EXPECT_EQ(child.wait(20000), kProduced);
}

// Packets are dropped in random order, their items on several threads at once: space comes
// back in ring order whatever the order of the drops, and the bytes stay right.
TEST_F(ShmChannelTest, ItemsDroppedInAnyOrderOnAnyThreadFreeTheArena) {
  const StreamSpec spec{13, 8, 8 << 10};
  Ends ends = make_ends();
  Child child = fork_producer(ends, spec, 400);
  auto ch = open_consumer(ends, channel_options(512 << 10, 8));
  ASSERT_TRUE(ch);
  std::mt19937_64 rng(13);
  uint64_t next = 0;
  bool end = false;
  while (!end) {
    std::vector<Item> items;
    for (int k = 0; k < 6 && !end; ++k) {
      Packet p;
      auto more = ch->pop(&p);
      ASSERT_TRUE(more.is_ok()) << more.status().to_string();
      end = !*more;
      if (end) break;
      ASSERT_EQ(diff_packet(p, spec, next++), "");
      for (auto& it : p.items) items.push_back(std::move(it));
    }
    std::shuffle(items.begin(), items.end(), rng);
    std::vector<std::thread> threads;
    for (int t = 0; t < 3; ++t) {
      std::vector<Item> part;
      for (size_t i = t; i < items.size(); i += 3) part.push_back(std::move(items[i]));
      threads.emplace_back([part = std::move(part)]() mutable {
        while (!part.empty()) part.pop_back();
      });
    }
    for (auto& t : threads) t.join();
  }
  EXPECT_EQ(next, 400u);
  EXPECT_EQ(ch->held_bytes(), 0u);
  EXPECT_EQ(child.wait(20000), kProduced);
}

TEST_F(ShmChannelTest, ItemsOutliveTheChannel) {
  const StreamSpec spec{17, 8, 4096};
  Ends ends = make_ends();
  Child child = fork_producer(ends, spec, 40);
  std::vector<Packet> kept;
  {
    auto ch = open_consumer(ends, channel_options(4 << 20, 4));
    ASSERT_TRUE(ch);
    for (int i = 0; i < 5; ++i) {
      kept.emplace_back();
      ASSERT_TRUE(*ch->pop(&kept.back()));
    }
  }  // the loader closes the channel: the producer's next push fails
  EXPECT_EQ(child.wait(20000), kPushFailed);
  for (size_t i = 0; i < kept.size(); ++i) EXPECT_EQ(diff_packet(kept[i], spec, i), "");
  kept.clear();  // TearDown: the arena is gone with the last item
}

TEST_F(ShmChannelTest, CancelEndsTheProducersBlockedPush) {
  const StreamSpec spec{19, 2, 1024};
  SharedCounter pushed;
  Ends ends = make_ends();
  Child child = fork_producer(ends, spec, 0, &pushed);
  auto ch = open_consumer(ends, channel_options(1 << 20, 1));
  ASSERT_TRUE(ch);
  ASSERT_TRUE(eventually([&] { return pushed.get() >= 1; }));
  pause_ms(50);  // the second push is (most likely) waiting now
  ch->cancel();
  EXPECT_EQ(child.wait(20000), kPushCancelled);
  Packet p;
  EXPECT_EQ(ch->pop(&p).status().code(), StatusCode::kCancelled);
  EXPECT_EQ(pushed.get(), 1u);
}

TEST_F(ShmChannelTest, TheProducersCancelEndsItsOwnWait) {
  Ends ends = make_ends();
  Child child = fork_with_producer(ends, [&](ShmProducer& producer) {
    const StreamSpec spec{1, 1, 16};
    if (!producer.push(make_packet(spec, 0)).is_ok()) return kPushFailed;
    std::thread stop([&] {
      pause_ms(100);
      producer.cancel();
    });
    Status s = producer.push(make_packet(spec, 1));  // one packet in flight: it waits
    stop.join();
    return s.code() == StatusCode::kCancelled ? kPushCancelled : kPushFailed;
  });
  auto ch = open_consumer(ends, channel_options(1 << 20, 1));
  ASSERT_TRUE(ch);
  EXPECT_EQ(child.wait(20000), kPushCancelled);
}

TEST_F(ShmChannelTest, AFinishErrorReachesTheLoaderAfterThePacketsBeforeIt) {
  const StreamSpec spec{23, 4, 1024};
  Ends ends = make_ends();
  Child child = fork_with_producer(ends, [&](ShmProducer& producer) {
    for (int i = 0; i < 3; ++i)
      if (!producer.push(make_packet(spec, i)).is_ok()) return kPushFailed;
    producer.finish(corrupt("/data/train-000003.tar: bad header checksum at byte 1536"));
    return kProduced;
  });
  auto ch = open_consumer(ends, channel_options(1 << 20, 8));
  ASSERT_TRUE(ch);
  EXPECT_EQ(child.wait(20000), kProduced);
  uint64_t popped = 0;
  Status s = drain_and_check(*ch, spec, &popped);
  EXPECT_EQ(popped, 3u) << "packets pushed before the error arrive";
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_EQ(s.message(), "/data/train-000003.tar: bad header checksum at byte 1536");
  Packet p;
  EXPECT_EQ(ch->pop(&p).status().message(), s.message()) << "the error stays";
}

TEST_F(ShmChannelTest, SeveralProducersShareOneChannel) {
  std::vector<StreamSpec> specs{{31, 6, 8192}, {32, 6, 8192}, {33, 6, 8192}};
  std::vector<Ends> ends(3);
  std::vector<Child> children;
  for (size_t w = 0; w < 3; ++w) {
    ends[w] = make_ends();
    children.push_back(fork_producer(ends[w], specs[w], 60 + 20 * w));
  }
  std::vector<ShmPeer> peers;
  for (size_t w = 0; w < 3; ++w)
    peers.push_back({std::move(ends[w].loader), "worker " + std::to_string(w)});
  auto ch = ShmConsumer::open(std::move(peers), channel_options(1 << 20, 2));
  ASSERT_TRUE(ch.is_ok()) << ch.status().to_string();
  std::vector<uint64_t> next(3, 0);
  for (;;) {
    Packet p;
    auto more = (*ch)->pop(&p);
    ASSERT_TRUE(more.is_ok()) << more.status().to_string();
    if (!*more) break;
    int from = -1;  // each packet is the next one of exactly one producer
    for (int w = 0; w < 3; ++w)
      if (diff_packet(p, specs[w], next[w]).empty()) from = w;
    ASSERT_GE(from, 0) << "a packet that is no producer's next";
    ++next[from];
  }
  EXPECT_EQ(next, (std::vector<uint64_t>{60, 80, 100}));
  for (auto& c : children) EXPECT_EQ(c.wait(20000), kProduced);
}

// A worker's channel per unit: the loader gives each next channel the arena of the one
// before (ArenaPool), the worker process maps it once (AttachedArenas). Positions start again
// at 0 over the old bytes; every packet of every channel must still arrive as it was sent.
TEST_F(ShmChannelTest, ConsecutiveChannelsOfOneProducerReuseOneArena) {
  constexpr int kChannels = 4;
  const auto spec = [](int c) { return StreamSpec{41u + c, 8, 16 << 10}; };
  std::vector<Ends> ends(kChannels);
  for (auto& e : ends) e = make_ends();
  Child child = fork_child([&] {
    AttachedArenas attached;
    for (int c = 0; c < kChannels; ++c) {
      ends[c].loader = UnixSocket();
      auto producer = ShmProducer::connect(std::move(ends[c].worker), 10000, 20000, &attached);
      if (!producer.is_ok()) return kNoConnect;
      for (uint64_t i = 0; i < 120; ++i)
        if (!(*producer)->push(make_packet(spec(c), i)).is_ok()) return kPushFailed;
      (*producer)->finish(Status::ok());
    }
    return kProduced;
  });
  for (auto& e : ends) e.worker = UnixSocket();
  auto pool = std::make_shared<ArenaPool>();
  ShmChannelOptions o = channel_options(1 << 20);
  o.arenas = pool;
  for (int c = 0; c < kChannels; ++c) {
    auto ch = open_consumer(ends[c], o);
    ASSERT_TRUE(ch);
    EXPECT_EQ(pool->idle(), 0u) << "channel " << c << " has the arena";
    uint64_t popped = 0;
    Status s = drain_and_check(*ch, spec(c), &popped);
    EXPECT_TRUE(s.is_ok()) << "channel " << c << ": " << s.to_string();
    EXPECT_EQ(popped, 120u);
    ch.reset();
    EXPECT_EQ(pool->idle(), 1u) << "channel " << c << " gave it back";
  }
  EXPECT_EQ(pool->reused(), uint64_t{kChannels - 1});
  EXPECT_EQ(child.wait(20000), kProduced);
}

// What a worker's reader does with a data arena: the packet's field bytes read into one
// chunk of it (one span named by every run of the packet), the items owned by the chunk.
// A packet whose chunk does not fit stays as it is (its bytes are then copied).
Packet in_one_chunk(Packet p, ChunkAllocator& chunks, int* placed, int* fell_back) {
  uint64_t total = 0;
  for (const auto& it : p.items)
    for (const auto& f : it.fields) total += f.size;
  std::shared_ptr<const void> owner;
  uint8_t* at = total > 0 ? chunks.allocate(total, &owner) : nullptr;
  if (at == nullptr) {
    ++*fell_back;
    return p;
  }
  ++*placed;
  for (auto& it : p.items) {
    for (auto& f : it.fields) {
      if (f.size > 0) std::memcpy(at, f.data, f.size);
      f.data = at;
      at += f.size;
    }
    it.owner = owner;
    it.owners.clear();
  }
  return p;
}

// Fields a producer read into its data arena cross without a copy into a run: the runs hold
// descriptors alone, the items read the same bytes, and a span is free again once the
// producer dropped its chunk and the loader every run naming it. Packets of some runs each,
// and chunks too large for the data arena, which fall back to the copy.
TEST_F(ShmChannelTest, FieldsReadIntoTheDataArenaCrossWithoutACopy) {
  const StreamSpec spec{51, 24, 16 << 10};
  constexpr uint64_t kPackets = 200;
  Ends ends = make_ends();
  Child child = fork_with_producer(ends, [&](ShmProducer& producer) {
    auto chunks = std::dynamic_pointer_cast<ArenaChunks>(producer.chunk_allocator());
    if (!chunks) return 30;
    int placed = 0, fell_back = 0;
    for (uint64_t i = 0; i < kPackets; ++i)
      if (!producer.push(in_one_chunk(make_packet(spec, i), *chunks, &placed, &fell_back)).is_ok())
        return kPushFailed;
    producer.finish(Status::ok());
    if (placed < 50 || fell_back == 0) return 31;
    // Every span comes free once the loader has dropped the items.
    if (!eventually([&] { return chunks->spans() == 0; })) return 32;
    return chunks->arena().header().producer_spans.load() == 0 ? kProduced : 33;
  });
  ShmChannelOptions o = channel_options(4 << 20);
  o.max_run_bytes = 64 << 10;  // large packets take several runs, each naming the chunk
  o.data_bytes = 1 << 20;      // chunks over 256 KiB do not fit
  auto ch = open_consumer(ends, o);
  ASSERT_TRUE(ch);
  uint64_t popped = 0, light = 0;
  for (uint64_t i = 0; i < kPackets; ++i) {
    Packet p;
    auto more = ch->pop(&p);
    ASSERT_TRUE(more.is_ok() && *more) << "packet " << i;
    ASSERT_EQ(diff_packet(p, spec, i), "") << "packet " << i;
    uint64_t payload = 0;
    for (const auto& it : p.items)
      for (const auto& f : it.fields) payload += f.size;
    // A packet read into the data arena holds descriptors only in the run arena.
    if (payload > (64u << 10) && ch->held_bytes() < payload / 4) ++light;
    ++popped;
  }
  Packet end;
  auto more = ch->pop(&end);
  ASSERT_TRUE(more.is_ok());
  EXPECT_FALSE(*more);
  EXPECT_EQ(popped, kPackets);
  EXPECT_GT(light, 20u) << "large packets should have crossed through the data arena";
  EXPECT_EQ(ch->held_bytes(), 0u);
  EXPECT_EQ(child.wait(20000), kProduced);
}

// The data arena goes back to its pool with the channel, as the run arena does, once the
// producer finished with no chunk of it left; the next channel reuses both.
TEST_F(ShmChannelTest, ConsecutiveChannelsReuseTheDataArenaToo) {
  constexpr int kChannels = 3;
  const auto spec = [](int c) { return StreamSpec{61u + c, 8, 8 << 10}; };
  std::vector<Ends> ends(kChannels);
  for (auto& e : ends) e = make_ends();
  Child child = fork_child([&] {
    AttachedArenas attached(4);
    for (int c = 0; c < kChannels; ++c) {
      ends[c].loader = UnixSocket();
      auto producer = ShmProducer::connect(std::move(ends[c].worker), 10000, 20000, &attached);
      if (!producer.is_ok()) return kNoConnect;
      auto chunks = (*producer)->chunk_allocator();
      if (!chunks) return 30;
      int placed = 0, fell_back = 0;
      for (uint64_t i = 0; i < 60; ++i)
        if (!(*producer)
                 ->push(in_one_chunk(make_packet(spec(c), i), *chunks, &placed, &fell_back))
                 .is_ok())
          return kPushFailed;
      (*producer)->finish(Status::ok());
      if (placed == 0) return 31;
    }
    return kProduced;
  });
  for (auto& e : ends) e.worker = UnixSocket();
  ShmChannelOptions o = channel_options(1 << 20);
  o.arenas = std::make_shared<ArenaPool>();
  o.data_arenas = std::make_shared<ArenaPool>();
  o.data_bytes = 2 << 20;
  for (int c = 0; c < kChannels; ++c) {
    auto ch = open_consumer(ends[c], o);
    ASSERT_TRUE(ch);
    uint64_t popped = 0;
    Status s = drain_and_check(*ch, spec(c), &popped);
    EXPECT_TRUE(s.is_ok()) << "channel " << c << ": " << s.to_string();
    EXPECT_EQ(popped, 60u);
    ch.reset();
    // The producer drops its chunks as its pushes return, before it finishes.
    EXPECT_EQ(o.data_arenas->idle(), 1u) << "channel " << c << " gave its data arena back";
  }
  EXPECT_EQ(o.data_arenas->reused(), uint64_t{kChannels - 1});
  EXPECT_EQ(child.wait(20000), kProduced);
}

// Items popped from a channel still point into its arena: it goes back to the pool only
// with the last of them.
TEST_F(ShmChannelTest, HeldItemsKeepTheArenaOutOfThePool) {
  const StreamSpec spec{45, 4, 4096};
  Ends ends = make_ends();
  Child child = fork_producer(ends, spec, 30);
  auto pool = std::make_shared<ArenaPool>();
  ShmChannelOptions o = channel_options(1 << 20);
  o.arenas = pool;
  auto ch = open_consumer(ends, o);
  ASSERT_TRUE(ch);
  Packet kept;
  ASSERT_TRUE(*ch->pop(&kept));
  uint64_t popped = 0;
  ASSERT_TRUE(drain_and_check_from(*ch, spec, 1, &popped).is_ok());
  ch.reset();
  EXPECT_EQ(pool->idle(), 0u) << "an item still points into it";
  EXPECT_EQ(diff_packet(kept, spec, 0), "");
  kept = Packet();
  EXPECT_EQ(pool->idle(), 1u);
  EXPECT_EQ(child.wait(20000), kProduced);
}

// A producer killed while it writes may leave a run half written, and nothing says where
// its writes stopped: its arena is freed, never reused.
TEST_F(ShmChannelTest, TheArenaOfAProducerThatDiedIsNotReused) {
  const StreamSpec spec{47, 4, 4096};
  SharedCounter pushed;
  Ends ends = make_ends();
  Child child = fork_producer(ends, spec, 0, &pushed);
  auto pool = std::make_shared<ArenaPool>();
  ShmChannelOptions o = channel_options(1 << 20, 2);
  o.arenas = pool;
  auto ch = open_consumer(ends, o);
  ASSERT_TRUE(ch);
  ASSERT_TRUE(eventually([&] { return pushed.get() >= 2; }));
  child.kill(SIGKILL);
  EXPECT_EQ(child.wait(20000), 128 + SIGKILL);
  uint64_t popped = 0;
  Status s = drain_and_check(*ch, spec, &popped);
  EXPECT_FALSE(s.is_ok()) << "the producer closed without finishing";
  ch.reset();
  EXPECT_EQ(pool->idle(), 0u);
}

TEST_F(ShmChannelTest, EmptyPacketsAndItemsWithoutBytesTravel) {
  Ends ends = make_ends();
  Child child = fork_with_producer(ends, [&](ShmProducer& producer) {
    Packet empty, bare;
    bare.items.emplace_back();
    bare.items.back().key = "no-fields";
    bare.items.back().set_field("zero", "");
    if (!producer.push(std::move(empty)).is_ok()) return kPushFailed;
    if (!producer.push(std::move(bare)).is_ok()) return kPushFailed;
    producer.finish(Status::ok());
    return kProduced;
  });
  auto ch = open_consumer(ends, channel_options(1 << 20));
  ASSERT_TRUE(ch);
  Packet p;
  ASSERT_TRUE(*ch->pop(&p));
  EXPECT_TRUE(p.items.empty());
  ASSERT_TRUE(*ch->pop(&p));
  ASSERT_EQ(p.items.size(), 1u);
  EXPECT_EQ(p.items[0].key, "no-fields");
  ASSERT_EQ(p.items[0].fields.size(), 1u);
  EXPECT_EQ(p.items[0].fields[0].size, 0u);
  EXPECT_FALSE(*ch->pop(&p));
  EXPECT_EQ(child.wait(20000), kProduced);
}

// A source file's bytes as both processes know them (the producer's "mapping" of it, the
// loader's FileRanges), and items whose large fields view them.
const std::string& source_bytes() {
  static const std::string bytes = [] {
    std::string b(4 << 20, '\0');
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<char>((i * 2654435761u) >> 24);
    return b;
  }();
  return bytes;
}

Packet file_packet(int first, int n) {
  const auto* base = reinterpret_cast<const uint8_t*>(source_bytes().data());
  auto owner = file_bytes_owner(FileBytes{nullptr, base, source_bytes().size(), 5, 0, {}});
  Packet p;
  for (int i = first; i < first + n; ++i) {
    Item it;
    it.key = "f" + std::to_string(i);
    it.owner = owner;
    it.set_field_view("big", base + 300000 * i, 200000);
    it.set_field_view("cls", base + 300000 * i + 200000, 10);
    p.items.push_back(std::move(it));
  }
  return p;
}

TEST_F(ShmChannelTest, LargeFieldsOfAFileCrossAsRangesTheLoaderMaps) {
  for (const bool loader_maps : {true, false}) {
    Ends ends = make_ends();
    Child child = fork_with_producer(ends, [&](ShmProducer& producer) {
      for (int k = 0; k < 12; k += 4)
        if (!producer.push(file_packet(k, 4)).is_ok()) return kPushFailed;
      producer.finish(Status::ok());
      return kProduced;
    });
    // An arena far too small for the fields: only their descriptors and `cls` go there.
    ShmChannelOptions o = channel_options(loader_maps ? 64 << 10 : 4 << 20);
    int mapped = 0;
    if (loader_maps)
      o.files = [&](uint32_t source, uint64_t offset, uint64_t size) -> Result<FileView> {
        ++mapped;
        if (source != 5 || offset + size > source_bytes().size()) return corrupt("bad range");
        const auto* at = reinterpret_cast<const uint8_t*>(source_bytes().data()) + offset;
        return FileView{at, std::make_shared<int>(0), nullptr};
      };
    auto ch = open_consumer(ends, o);
    ASSERT_TRUE(ch);
    std::vector<Item> got;
    for (;;) {
      Packet p;
      auto more = ch->pop(&p);
      ASSERT_TRUE(more.is_ok()) << more.status().to_string();
      if (!*more) break;
      for (auto& it : p.items) got.push_back(std::move(it));
    }
    ASSERT_EQ(got.size(), 12u);
    const Packet want = file_packet(0, 12);
    const auto* base = reinterpret_cast<const uint8_t*>(source_bytes().data());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].key, want.items[i].key);
      EXPECT_EQ(got[i].field("big")->view(), want.items[i].field("big")->view());
      EXPECT_EQ(got[i].field("cls")->view(), want.items[i].field("cls")->view());
      const bool viewed = got[i].field("big")->data == base + 300000 * i;
      EXPECT_EQ(viewed, loader_maps) << "a view of the loader's own bytes, or a copy";
    }
    EXPECT_EQ(mapped, loader_maps ? 12 : 0);
    got.clear();
    EXPECT_EQ(ch->held_bytes(), 0u);
    EXPECT_EQ(child.wait(20000), kProduced);
  }
}

// A run that wraps to the ring's start skips the bytes at its end. The loader holds that run
// while the producer places the next one, larger than half the ring: it fits before the
// held run comes round again, so the producer must not wait for the loader to drop it
// (the loader, building a batch, may need the next run's items first). The loader publishes
// where the held run starts when it takes it, not only when it frees a run.
TEST_F(ShmChannelTest, ARunAfterAWrapFindsTheRoomTheSkippedBytesLeft) {
  constexpr uint64_t kArena = 256 << 10;
  const std::vector<size_t> sizes = {150000, 120000, 130000};  // the second one wraps
  Ends ends = make_ends();
  Child child = fork_with_producer(ends, [&](ShmProducer& producer) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      Packet p;
      p.items.emplace_back();
      p.items.back().key = "k" + std::to_string(i);
      p.items.back().set_field("bin", std::string(sizes[i], static_cast<char>('a' + i)));
      if (!producer.push(std::move(p)).is_ok()) return kPushFailed;
    }
    producer.finish(Status::ok());
    return kProduced;
  });
  ShmChannelOptions o = channel_options(kArena);
  o.wait_timeout_ms = 5000;  // a pop that waits this long means the producer is stuck
  auto ch = open_consumer(ends, o);
  ASSERT_TRUE(ch);
  std::vector<Packet> got(sizes.size());
  ASSERT_TRUE(ch->pop(&got[0]).is_ok());
  got[0] = Packet();  // frees the first run: the second one wraps to the ring's start
  ASSERT_TRUE(ch->pop(&got[1]).is_ok());  // held from here on
  auto third = ch->pop(&got[2]);
  ASSERT_TRUE(third.is_ok()) << third.status().to_string();
  ASSERT_TRUE(*third);
  for (size_t i = 1; i < sizes.size(); ++i) {
    ASSERT_EQ(got[i].items.size(), 1u);
    EXPECT_EQ(got[i].items[0].fields.at(0).view(),
              std::string(sizes[i], static_cast<char>('a' + i)));
  }
  got.clear();
  Packet end;
  auto more = ch->pop(&end);
  ASSERT_TRUE(more.is_ok()) << more.status().to_string();
  EXPECT_FALSE(*more);
  EXPECT_EQ(child.wait(20000), kProduced);
}

TEST_F(ShmChannelTest, APacketThatCanNeverFitIsAnErrorNotAWait) {
  Ends ends = make_ends();
  SharedCounter code;
  Child child = fork_with_producer(ends, [&](ShmProducer& producer) {
    Packet big;
    for (int i = 0; i < 40; ++i) {
      big.items.emplace_back();
      big.items.back().key = "big" + std::to_string(i);
      big.items.back().set_field("bin", std::string(100000, 'b'));
    }
    Status s = producer.push(std::move(big));
    *code = static_cast<uint64_t>(s.code());
    return s.message().find("needs 3.8 MiB of the shared arena, which holds 1.0 MiB") !=
                   std::string::npos
               ? kPushFailed
               : 50;
  });
  auto ch = open_consumer(ends, channel_options(1 << 20));
  ASSERT_TRUE(ch);
  EXPECT_EQ(child.wait(20000), kPushFailed);
  EXPECT_EQ(code.get(), static_cast<uint64_t>(StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace shardyard::io::testing
