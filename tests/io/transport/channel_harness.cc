#include "channel_harness.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <new>
#include <thread>

#include "io/transport/item_codec.h"

namespace shardyard::io::testing {

SharedCounter::SharedCounter() {
  void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  value_ = new (p) std::atomic<uint64_t>(0);
}

SharedCounter::~SharedCounter() { ::munmap(value_, 4096); }

bool eventually(const std::function<bool()>& done, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

Ends make_ends() {
  auto p = UnixSocket::pair();
  EXPECT_TRUE(p.is_ok()) << p.status().to_string();
  return Ends{std::move(p->first), std::move(p->second)};
}

Child fork_with_producer(Ends& ends, const std::function<int(ShmProducer&)>& body,
                         int wait_timeout_ms) {
  Child c = fork_child([&] {
    ends.loader = UnixSocket();
    auto producer = ShmProducer::connect(std::move(ends.worker), 10000, wait_timeout_ms);
    return producer.is_ok() ? body(**producer) : kNoConnect;
  });
  ends.worker = UnixSocket();
  return c;
}

Child fork_producer(Ends& ends, const StreamSpec& spec, uint64_t packets, SharedCounter* pushed,
                    int wait_timeout_ms) {
  return fork_with_producer(
      ends,
      [&](ShmProducer& producer) {
        for (uint64_t i = 0; packets == 0 || i < packets; ++i) {
          Status s = producer.push(make_packet(spec, i));
          if (!s.is_ok()) return s.code() == StatusCode::kCancelled ? kPushCancelled : kPushFailed;
          if (pushed) ++**pushed;
        }
        producer.finish(Status::ok());
        return kProduced;
      },
      wait_timeout_ms);
}

Child fork_raw_producer(Ends& ends, const RawAct& act) {
  Child c = fork_child([&] {
    ends.loader = UnixSocket();
    UnixSocket& s = ends.worker;
    Frame f;
    auto got = s.receive(&f, 10000);
    if (!got.is_ok() || *got != UnixSocket::Received::kFrame || f.fds.size() != 1) return 20;
    auto hello = decode_hello(f.body);
    if (!hello.is_ok()) return 21;
    auto arena = ShmArena::attach(std::move(f.fds[0]), hello->capacity, "raw");
    if (!arena.is_ok()) return 22;
    if (!s.send({kHelloAck, encode(HelloAckFrame{kShmProtocolVersion, uint64_t(::getpid())}), {}},
                5000)
             .is_ok())
      return 23;
    act(s, **arena);
    for (int i = 0; i < 200; ++i) {  // until the loader closes, at most 20 s
      auto r = s.receive(&f, 100);
      if (!r.is_ok() || *r == UnixSocket::Received::kClosed) break;
    }
    return 0;
  });
  ends.worker = UnixSocket();
  return c;
}

void send_raw_run(UnixSocket& socket, ShmArena& arena, ArenaRing& ring,
                  const std::vector<Item>& items, bool last) {
  PayloadPlan plan;
  plan_payload(items.data(), items.size(), kArenaAlign, &plan);
  ByteWriter d;
  encode_items(items.data(), items.size(), plan, &d);
  const uint64_t desc = align_arena(plan.bytes);
  ArenaRing::Span span;
  if (!ring.allocate(desc + d.out.size(), arena.header().released.load(), &span).value()) return;
  copy_payload(plan, arena.writable_ring() + span.offset);
  std::memcpy(arena.writable_ring() + span.offset + desc, d.out.data(), d.out.size());
  RunFrame run{span.start,
               span.bytes,
               desc,
               d.out.size(),
               static_cast<uint32_t>(items.size()),
               last ? RunFrame::kLastRun : uint8_t{0},
               {}};
  (void)socket.send({kRun, encode(run), {}}, 5000);
}

ShmChannelOptions channel_options(uint64_t arena_bytes, uint32_t in_flight) {
  ShmChannelOptions o;
  o.name = "r0/e0/w0";
  o.arena_bytes = arena_bytes;
  o.packets_in_flight = in_flight;
  o.wait_timeout_ms = 20000;
  o.segment.dir = test_shm_dir();
  o.segment.size_option = "--shm-arena-mib";
  return o;
}

std::shared_ptr<ShmConsumer> open_consumer(Ends& ends, const ShmChannelOptions& options) {
  std::vector<ShmPeer> peers;
  peers.push_back({std::move(ends.loader), "worker 0"});
  auto ch = ShmConsumer::open(std::move(peers), options);
  EXPECT_TRUE(ch.is_ok()) << ch.status().to_string();
  return ch.is_ok() ? *ch : nullptr;
}

Status drain_and_check(Channel& ch, const StreamSpec& spec, uint64_t* popped) {
  return drain_and_check_from(ch, spec, 0, popped);
}

Status drain_and_check_from(Channel& ch, const StreamSpec& spec, uint64_t first, uint64_t* popped) {
  for (*popped = 0;; ++*popped) {
    Packet p;
    auto more = ch.pop(&p);
    if (!more.is_ok()) return more.status();
    if (!*more) return Status::ok();
    const std::string diff = diff_packet(p, spec, first + *popped);
    if (!diff.empty()) return internal_error(diff);
  }
}

void ShmTest::SetUp() {
  dir_ = test_shm_dir();
  names_ = list_dir(dir_);
  used_ = used_bytes(dir_);
  fds_ = count_open_fds();
}

void ShmTest::TearDown() {
  EXPECT_EQ(count_open_fds(), fds_) << "descriptors leaked";
  EXPECT_EQ(list_dir(dir_), names_) << "files left in " << dir_;
  if (dir_ != "/dev/shm") {
    EXPECT_EQ(used_bytes(dir_), used_) << "shared memory not given back";
  }
}

}  // namespace shardyard::io::testing
