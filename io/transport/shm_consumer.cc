// ShmConsumer: the loader's side of a shared-memory channel (io/transport/shm_channel.h).
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <mutex>

#include "io/transport/item_codec.h"
#include "io/transport/shm_arena.h"
#include "io/transport/shm_channel.h"
#include "io/transport/shm_frames.h"

namespace shardyard::io {

namespace {

using Clock = std::chrono::steady_clock;

// One producer: its arena, its socket, the runs its popped items still hold. Items keep it
// alive through their run's lease, so it may outlive the channel.
struct Link {
  ~Link() {
    // The producer finished: it writes no more, and no item of the arena is left.
    if (pool && finished_cleanly) pool->give_back(std::move(arena));
    // The data arena too, once the producer dropped every span of it (no chunk of it is
    // left in the producer either, so positions may start again from 0).
    if (data_pool && finished_cleanly && data->header().producer_spans.load() == 0)
      data_pool->give_back(std::move(data));
  }
  std::string name;
  std::string channel;
  std::shared_ptr<ShmArena> arena;
  std::shared_ptr<ArenaPool> pool;       // where the arena goes back; may be null
  std::shared_ptr<ShmArena> data;        // the data arena; may be null
  std::shared_ptr<ArenaPool> data_pool;  // where it goes back; may be null
  UnixSocket socket;                     // receive: the popping thread; send_now: any thread
  std::mutex mu;
  ArenaReleases releases{1};  // guarded by mu
  // Used by the popping thread only.
  uint64_t pid = 0;
  bool finished = false;
  bool finished_cleanly = false;  // its finish frame came, between packets
  Packet partial;                 // runs of a packet whose last run has not come yet
  uint64_t popped = 0;

  std::string who() const {
    return "producer " + name + (pid != 0 ? " (pid " + std::to_string(pid) + ")" : "") +
           " of channel " + channel;
  }
  // Wakes the producer if it waits for a count the header now shows.
  void credit() {
    if (arena->header().producer_waiting.load() != 0) (void)socket.send_now({kCredit, {}, {}});
  }
  // Applies `change` to `releases` and publishes the released position when it moved,
  // then wakes the producer. Under the lock: two changes on two threads must not publish
  // out of order.
  template <typename Change>
  Status update_releases(Change change) {
    {
      std::lock_guard<std::mutex> lock(mu);
      const uint64_t before = releases.released();
      SY_RETURN_IF_ERROR(change());
      const uint64_t now = releases.released();
      if (now == before) return Status::ok();
      arena->header().released.store(now);
    }
    credit();
    return Status::ok();
  }
  void release(uint64_t start) {
    (void)update_releases([&] {
      releases.release(start);
      return Status::ok();
    });
  }
};

// The owner of the items of one run: frees the run when the last of them is dropped, and
// counts it dropped for each data arena span it names.
struct RunLease {
  RunLease(std::shared_ptr<Link> l, uint64_t s, std::vector<uint32_t> slots)
      : link(std::move(l)), start(s), arena_slots(std::move(slots)) {}
  ~RunLease() {
    if (!arena_slots.empty()) {
      ArenaHeader& h = link->data->header();
      for (uint32_t slot : arena_slots) h.span_drops[slot].fetch_add(1, std::memory_order_release);
    }
    link->release(start);
  }
  std::shared_ptr<Link> link;
  uint64_t start;
  std::vector<uint32_t> arena_slots;
};

}  // namespace

struct ShmConsumer::Impl {
  ShmChannelOptions options;
  std::vector<std::shared_ptr<Link>> links;
  UniqueFd wake;  // eventfd: cancel() and finish() make it readable
  std::atomic<bool> cancelled{false};
  mutable std::mutex mu;
  Status error;                                // guarded by mu: the first error
  std::deque<std::pair<Link*, Packet>> ready;  // popping thread only
  size_t next = 0;                             // popping thread: where the next round starts

  void fail(Status s) {
    std::lock_guard<std::mutex> lock(mu);
    if (error.is_ok()) error = std::move(s);
  }

  Status take_run(const std::shared_ptr<Link>& l, const RunFrame& r) {
    Packet& p = l->partial;
    if (r.bytes > 0) {
      // A run that wrapped to the ring's start moves the released position past the skipped
      // bytes at the end: it is published now, or the producer counts them as held until
      // this run is dropped, and may wait for it while the loader waits for the producer's
      // next run.
      Status added = l->update_releases([&] { return l->releases.add(r.start, r.bytes); });
      if (!added.is_ok()) return corrupt(l->who() + ": " + added.message());
      if (!r.arena_slots.empty() && !l->data)
        return corrupt(l->who() + ": a run names spans of a data arena it was not given");
      auto lease = std::make_shared<RunLease>(l, r.start, r.arena_slots);
      const uint8_t* base = l->arena->ring() + r.start % l->arena->capacity();
      const size_t before = p.items.size();
      const ArenaView data{l->data ? l->data->ring() : nullptr, l->data ? l->data->capacity() : 0};
      SY_RETURN_IF_ERROR(decode_items(
          std::string_view(reinterpret_cast<const char*>(base) + r.descriptor_offset,
                           r.descriptor_bytes),
          base, r.descriptor_offset, &p.items, l->who() + ", run at " + std::to_string(r.start),
          options.files ? &options.files : nullptr, &data));
      if (p.items.size() - before != r.items)
        return corrupt(l->who() + ": a run announces " + std::to_string(r.items) +
                       " items and holds " + std::to_string(p.items.size() - before));
      // An item whose fields all lie in its file holds that mapping, not the run.
      for (size_t i = before; i < p.items.size(); ++i)
        if (p.items[i].owner == nullptr) p.items[i].owner = lease;
    }
    if (r.flags & RunFrame::kLastRun) {
      ready.emplace_back(l.get(), std::move(p));
      p = Packet{};
    }
    return Status::ok();
  }

  // Reads the frames link `l` has sent, up to the end of one packet.
  Status take_frames(const std::shared_ptr<Link>& l) {
    for (;;) {
      Frame f;
      auto got = l->socket.receive(&f, 0);
      if (!got.is_ok()) return corrupt(l->who() + ": " + got.status().message());
      if (*got == UnixSocket::Received::kTimeout) return Status::ok();
      if (*got == UnixSocket::Received::kClosed) {
        l->finished = true;
        const bool mid = !l->partial.items.empty();
        l->partial = Packet{};
        return unavailable(l->who() + " closed its socket before finishing" +
                           (mid ? " (in the middle of a packet)" : "") +
                           ": the process exited or was killed");
      }
      if (f.type == kHelloAck) {
        auto ack = decode_hello_ack(f.body);
        if (!ack.is_ok()) return corrupt(l->who() + ": " + ack.status().message());
        l->pid = ack->pid;
      } else if (f.type == kRun) {
        auto run = decode_run(f.body);
        if (!run.is_ok()) return corrupt(l->who() + ": " + run.status().message());
        const size_t queued = ready.size();
        SY_RETURN_IF_ERROR(take_run(l, *run));
        if (ready.size() > queued) return Status::ok();
      } else if (f.type == kFinish) {
        auto fin = decode_finish(f.body);
        if (!fin.is_ok()) return corrupt(l->who() + ": " + fin.status().message());
        l->finished = true;
        if (!l->partial.items.empty())
          return corrupt(l->who() + " finished in the middle of a packet");
        l->finished_cleanly = true;
        return finish_status(*fin);
      } else {
        return corrupt(l->who() + " sent an unexpected " + std::string(frame_type_name(f.type)) +
                       " frame");
      }
    }
  }

  // Names a producer that sent nothing for long, and why when the arena says it: a
  // producer waiting for room while the loader holds items cannot go on until they go.
  static std::string stuck(Link& l) {
    uint64_t held;
    {
      std::lock_guard<std::mutex> lock(l.mu);
      held = l.releases.held_bytes();
    }
    std::string why = l.who();
    if (l.arena->header().producer_waiting.load() != 0 && held > 0)
      why += ", which waits for room in its shared arena while the loader holds " +
             format_bytes(held) + " of its " + format_bytes(l.arena->capacity()) +
             " in items not yet dropped (drop items sooner, or raise the arena size)";
    return why;
  }

  Result<bool> pop(Packet* out) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(options.wait_timeout_ms);
    std::vector<pollfd> fds;
    std::vector<std::shared_ptr<Link>> polled;
    for (;;) {
      if (cancelled) return shardyard::cancelled("channel " + options.name + " cancelled");
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!error.is_ok()) return error;
      }
      if (!ready.empty()) {
        Link* l = ready.front().first;
        *out = std::move(ready.front().second);
        ready.pop_front();
        l->arena->header().popped.store(++l->popped);
        l->credit();
        return true;
      }
      // A producer that counts a packet sent and not popped has sent its frames already:
      // they are read without a poll first (a system call per packet). A count that
      // frames do not follow (a broken producer) falls through to the poll and its timeout.
      bool took = false;
      for (size_t i = 0; i < links.size() && !took; ++i) {
        const auto& l = links[(next + i) % links.size()];
        if (l->finished || l->arena->header().sent.load() <= l->popped) continue;
        Status s = take_frames(l);
        if (!s.is_ok()) fail(std::move(s));
        took = !s.is_ok() || !ready.empty();
      }
      if (took) {
        next = (next + 1) % links.size();
        continue;
      }
      fds.clear();
      polled.clear();
      for (size_t i = 0; i < links.size(); ++i) {
        const auto& l = links[(next + i) % links.size()];
        if (l->finished) continue;
        fds.push_back({l->socket.fd(), POLLIN, 0});
        polled.push_back(l);
      }
      next = (next + 1) % links.size();
      if (polled.empty()) return false;
      fds.push_back({wake.get(), POLLIN, 0});
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) {
        std::string names;
        for (const auto& l : polled) names += (names.empty() ? "" : ", ") + stuck(*l);
        return unavailable("channel " + options.name + ": no packet for " +
                           std::to_string(options.wait_timeout_ms) + " ms from " + names);
      }
      if (::poll(fds.data(), fds.size(), static_cast<int>(left)) <= 0) continue;
      for (size_t i = 0; i < polled.size(); ++i) {
        if (fds[i].revents == 0) continue;
        Status s = take_frames(polled[i]);
        if (!s.is_ok()) fail(std::move(s));
      }
    }
  }
};

ShmConsumer::ShmConsumer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ShmConsumer::~ShmConsumer() {
  // Producers still pushing learn that the loader has gone; items still held keep their
  // links (and arenas) alive until they are dropped.
  for (auto& l : impl_->links) l->socket.shutdown();
}

Result<std::shared_ptr<ShmConsumer>> ShmConsumer::open(std::vector<ShmPeer> producers,
                                                       const ShmChannelOptions& options) {
  const std::string ch = "channel " + options.name;
  if (producers.empty()) return invalid_argument(ch + ": no producers");
  if (options.wait_timeout_ms <= 0 || options.packets_in_flight == 0)
    return invalid_argument(ch + ": wait_timeout_ms and packets_in_flight must be positive");
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  const int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) return io_error(ch + ": cannot create an eventfd: " + std::strerror(errno));
  impl->wake.reset(wake);
  for (auto& peer : producers) {
    auto l = std::make_shared<Link>();
    l->name = peer.name;
    l->channel = options.name;
    l->socket = std::move(peer.socket);
    SegmentOptions seg = options.segment;
    seg.what = "shared arena of " + ch + " for producer " + peer.name;
    if (options.arenas && producers.size() == 1) {
      l->pool = options.arenas;
      SY_ASSIGN_OR_RETURN(l->arena, l->pool->take(options.arena_bytes, seg));
    } else {
      SY_ASSIGN_OR_RETURN(l->arena, ShmArena::create(options.arena_bytes, seg));
    }
    if (options.data_bytes > 0) {
      // Only for speed: where there is no room for it (a small /dev/shm), items are copied
      // into the arena as they are without one.
      seg.what = "data arena of " + ch + " for producer " + peer.name;
      const bool pooled = options.data_arenas && producers.size() == 1;
      auto data = pooled ? options.data_arenas->take(options.data_bytes, seg)
                         : ShmArena::create(options.data_bytes, seg);
      if (data.is_ok()) {
        l->data = std::move(*data);
        if (pooled) l->data_pool = options.data_arenas;
      }
    }
    const uint64_t capacity = l->arena->capacity();
    l->releases = ArenaReleases(capacity);
    HelloFrame hello;
    hello.capacity = capacity;
    hello.packets_in_flight = options.packets_in_flight;
    hello.max_run_bytes =
        options.max_run_bytes == 0 ? capacity / 4 : std::min(options.max_run_bytes, capacity);
    hello.channel = options.name;
    hello.producer = peer.name;
    hello.file_field_bytes = options.files ? std::max<uint64_t>(options.file_field_bytes, 1) : 0;
    hello.data_capacity = l->data ? l->data->capacity() : 0;
    Frame f{kHello, encode(hello), {}};
    SY_ASSIGN_OR_RETURN(UniqueFd fd, l->arena->segment().duplicate());
    f.fds.push_back(std::move(fd));
    if (l->data) {
      SY_ASSIGN_OR_RETURN(UniqueFd data_fd, l->data->segment().duplicate());
      f.fds.push_back(std::move(data_fd));
    }
    Status s = l->socket.send(f, options.wait_timeout_ms);
    if (!s.is_ok()) return unavailable(l->who() + ": cannot send the hello: " + s.message());
    impl->links.push_back(std::move(l));
  }
  return std::shared_ptr<ShmConsumer>(new ShmConsumer(std::move(impl)));
}

Status ShmConsumer::push(Packet) {
  return invalid_argument("channel " + impl_->options.name + ": push() on the loader's side");
}

void ShmConsumer::finish(Status status) {
  if (status.is_ok()) return;
  impl_->fail(std::move(status));
  const uint64_t one = 1;
  (void)!::write(impl_->wake.get(), &one, sizeof one);
}

Result<bool> ShmConsumer::pop(Packet* out) { return impl_->pop(out); }

void ShmConsumer::cancel() {
  impl_->cancelled = true;
  const uint64_t one = 1;
  (void)!::write(impl_->wake.get(), &one, sizeof one);
  for (auto& l : impl_->links) {
    l->arena->header().cancelled.store(1);
    (void)l->socket.send_now({kCancel, {}, {}});
  }
}

size_t ShmConsumer::depth() const {
  size_t n = 0;
  for (const auto& l : impl_->links) {
    const uint64_t sent = l->arena->header().sent.load(), popped = l->arena->header().popped.load();
    if (sent > popped) n += static_cast<size_t>(sent - popped);
  }
  return n;
}

uint64_t ShmConsumer::held_bytes() const {
  uint64_t n = 0;
  for (const auto& l : impl_->links) {
    std::lock_guard<std::mutex> lock(l->mu);
    n += l->releases.held_bytes();
  }
  return n;
}

}  // namespace shardyard::io
