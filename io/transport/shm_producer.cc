// ShmProducer: the worker's side of a shared-memory channel (io/transport/shm_channel.h).
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <chrono>
#include <cstring>
#include <mutex>

#include "io/transport/item_codec.h"
#include "io/transport/shm_arena.h"
#include "io/transport/shm_channel.h"
#include "io/transport/shm_frames.h"

namespace shardyard::io {

using Clock = std::chrono::steady_clock;

struct ShmProducer::Impl {
  UnixSocket socket;
  std::shared_ptr<ShmArena> arena;
  std::shared_ptr<ArenaChunks> chunks;  // the data arena's; null without one
  HelloFrame hello;
  int wait_timeout_ms = 0;
  UniqueFd wake;  // eventfd: cancel() makes it readable
  std::atomic<bool> cancelled{false};

  std::mutex mu;          // serialises push() and finish()
  ArenaRing ring{1};      // guarded by mu
  bool finished = false;  // guarded by mu
  Status broken;          // guarded by mu: the loader is gone or spoke nonsense
  uint64_t sent = 0;      // guarded by mu
  PayloadPlan plan;       // guarded by mu (scratch)
  std::vector<std::pair<size_t, size_t>> runs;  // guarded by mu (scratch)
  uint64_t descriptor_bytes = 0;  // guarded by mu: those of the run lay_out_run() laid out

  std::string name() const { return "channel " + hello.channel + " (" + hello.producer + ")"; }
  ArenaHeader& header() const { return arena->header(); }

  // Reads what the loader sent without waiting: credits (nothing to do, the counts are in
  // the header), a cancel, the end of the socket, or nonsense.
  Status drain() {
    for (;;) {
      Frame f;
      auto got = socket.receive(&f, 0);
      if (!got.is_ok()) return broken = corrupt(name() + ": " + got.status().message());
      if (*got == UnixSocket::Received::kTimeout) return Status::ok();
      if (*got == UnixSocket::Received::kClosed)
        return broken =
                   unavailable(name() + ": the loader closed the channel (it stopped or died)");
      if (f.type == kCancel) {
        cancelled = true;
      } else if (f.type != kCredit) {
        return broken = corrupt(name() + ": the loader sent an unexpected " +
                                std::string(frame_type_name(f.type)) + " frame");
      }
    }
  }

  bool is_cancelled() const {
    return cancelled.load() || header().cancelled.load(std::memory_order_acquire) != 0;
  }

  // Waits until ready() holds, reading the loader's frames; `what` says what was awaited.
  template <typename Ready>
  Status wait_until(Ready ready, const std::string& what) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(wait_timeout_ms);
    for (;;) {
      SY_ASSIGN_OR_RETURN(bool ok, ready());
      if (ok) return Status::ok();
      // Announce the wait, then look again: the loader stores its counts before it reads
      // the flag, so either it sees the flag and sends a credit, or we see its counts.
      header().producer_waiting.store(1);
      auto again = ready();
      if (!again.is_ok() || *again) {
        header().producer_waiting.store(0);
        if (!again.is_ok()) return again.status();
        return Status::ok();
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) {
        header().producer_waiting.store(0);
        return unavailable(name() + ": " + what + " for " + std::to_string(wait_timeout_ms) +
                           " ms");
      }
      pollfd p[2] = {{socket.fd(), POLLIN, 0}, {wake.get(), POLLIN, 0}};
      ::poll(p, 2, static_cast<int>(std::min<int64_t>(left, 100)));
      header().producer_waiting.store(0);
      SY_RETURN_IF_ERROR(drain());
      if (is_cancelled()) return cancelled_status();
    }
  }

  Status cancelled_status() const {
    return shardyard::cancelled(name() + ": the channel was cancelled");
  }

  const void* chunks_id() const { return chunks ? chunks->id() : nullptr; }

  uint64_t run_upper_bound(const Item& item) const {
    return payload_upper_bound(item, kArenaAlign, hello.file_field_bytes, chunks_id()) +
           encoded_item_bytes(item, hello.file_field_bytes > 0) + kArenaAlign;
  }

  // The exact size of the packet's runs (fields that share bytes share them) against the
  // arena's capacity: a packet that can never fit is an error now, not a wait that times out.
  Status check_fits(const std::vector<Item>& items) {
    uint64_t total = 0;
    for (const auto& [i, j] : runs) {
      plan_payload(items.data() + i, j - i, kArenaAlign, &plan, hello.file_field_bytes,
                   chunks_id());
      uint64_t descriptors = 8;
      for (size_t k = i; k < j; ++k)
        descriptors += encoded_item_bytes(items[k], hello.file_field_bytes > 0);
      total += align_arena(align_arena(plan.bytes) + descriptors);
    }
    if (total <= ring.capacity()) return Status::ok();
    return invalid_argument(
        name() + ": a packet of " + std::to_string(items.size()) + " items (first key '" +
        items[0].key + "') needs " + format_bytes(total) + " of the shared arena, which holds " +
        format_bytes(ring.capacity()) + "; raise the arena size or make packets smaller");
  }

  // Lays items[0..n) out as one run (plan, descriptor_bytes); returns the run's arena bytes.
  uint64_t lay_out_run(const Item* items, size_t n) {
    plan_payload(items, n, kArenaAlign, &plan, hello.file_field_bytes, chunks_id());
    descriptor_bytes = encoded_items_bytes(items, n, plan);
    return align_arena(align_arena(plan.bytes) + descriptor_bytes);
  }

  // Places the run lay_out_run() laid out for items[0..n) and sends its frame.
  Status send_run(const Item* items, size_t n, bool last) {
    const uint64_t descriptor_offset = align_arena(plan.bytes);
    const uint64_t bytes = align_arena(descriptor_offset + descriptor_bytes);
    if (bytes > ring.capacity())
      return invalid_argument(name() + ": item '" + items[0].key + "' needs " +
                              format_bytes(bytes) + " of the shared arena, which holds " +
                              format_bytes(ring.capacity()) + "; raise the arena size");
    ArenaRing::Span span;
    SY_RETURN_IF_ERROR(wait_until(
        [&]() -> Result<bool> { return ring.allocate(bytes, header().released.load(), &span); },
        "no room in the shared arena (" + format_bytes(bytes) + " wanted; " +
            format_bytes(ring.head() - header().released.load()) + " of " +
            format_bytes(ring.capacity()) +
            " still held by the loader: it holds items for long or the arena is too small)"));
    arena->map_ahead(span.offset + span.bytes);
    uint8_t* at = arena->writable_ring() + span.offset;
    copy_payload(plan, at);
    [[maybe_unused]] const char* end =
        write_items(items, n, plan, reinterpret_cast<char*>(at + descriptor_offset));
    assert(end == reinterpret_cast<char*>(at + descriptor_offset + descriptor_bytes));
    RunFrame run{span.start,
                 span.bytes,
                 descriptor_offset,
                 descriptor_bytes,
                 static_cast<uint32_t>(n),
                 last ? RunFrame::kLastRun : uint8_t{0},
                 plan.arena_slots};
    // Counted before the loader can drop the run, so a span is never freed under it.
    if (!plan.arena_slots.empty()) chunks->named(plan.arena_slots);
    return send({kRun, encode(run), {}});
  }

  Status send(const Frame& f) {
    Status s = socket.send(f, wait_timeout_ms);
    if (s.is_ok()) return s;
    // A loader that died can fail the send before its end of the socket is read: look, so
    // that it is named the same way whichever call noticed first.
    (void)drain();
    if (broken.is_ok()) broken = unavailable(name() + ": " + s.message());
    return broken;
  }

  // A packet too large for one run, in runs of consecutive items of at most max_run_bytes
  // (an item alone may take more).
  Status send_split(const std::vector<Item>& items) {
    runs.clear();
    uint64_t total = 0;
    for (size_t i = 0; i < items.size();) {
      uint64_t bytes = 0;
      size_t j = i;
      while (j < items.size()) {
        const uint64_t more = run_upper_bound(items[j]);
        if (j > i && bytes + more > hello.max_run_bytes) break;
        bytes += more;
        ++j;
      }
      runs.emplace_back(i, j);
      total += bytes;
      i = j;
    }
    // The loader pops a packet once all its runs are in: the arena must hold them at once.
    if (total > ring.capacity()) SY_RETURN_IF_ERROR(check_fits(items));
    for (const auto& [i, j] : runs) {
      lay_out_run(items.data() + i, j - i);
      Status s = send_run(items.data() + i, j - i, j == items.size());
      if (s.is_ok()) continue;
      // Runs of this packet went out: the next packet's runs must not be taken for its
      // rest, so nothing more goes out on this channel.
      if (i > 0 && broken.is_ok())
        broken = Status(s.code(), s.message() + " (in the middle of a packet)");
      return s;
    }
    return Status::ok();
  }

  Status push(Packet& packet) {
    std::lock_guard<std::mutex> lock(mu);
    if (finished) return invalid_argument(name() + ": push() after finish()");
    if (!broken.is_ok()) return broken;
    // The loader's frames are read where the producer waits (wait_until) and where a send
    // fails: a cancel also shows in the header, and credits only wake a waiting producer,
    // so a read per packet here would be a system call that finds nothing.
    if (is_cancelled()) return cancelled_status();
    SY_RETURN_IF_ERROR(wait_until(
        [&]() -> Result<bool> {
          const uint64_t popped = header().popped.load();
          if (popped > sent)
            return corrupt(name() + ": the loader counts " + std::to_string(popped) +
                           " packets popped of " + std::to_string(sent) + " sent");
          return sent - popped < hello.packets_in_flight;
        },
        "the loader took no packet"));
    const auto& items = packet.items;
    if (items.empty()) {
      SY_RETURN_IF_ERROR(send({kRun, encode(RunFrame{0, 0, 0, 0, 0, RunFrame::kLastRun, {}}), {}}));
    } else if (lay_out_run(items.data(), items.size()) <= hello.max_run_bytes) {
      // Most packets are one run: laid out whole first, split only when too large.
      SY_RETURN_IF_ERROR(send_run(items.data(), items.size(), true));
    } else {
      SY_RETURN_IF_ERROR(send_split(items));
    }
    header().sent.store(++sent);
    return Status::ok();
  }
};

ShmProducer::ShmProducer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ShmProducer::~ShmProducer() = default;

Result<std::shared_ptr<ShmProducer>> ShmProducer::connect(UnixSocket socket,
                                                          int handshake_timeout_ms,
                                                          int wait_timeout_ms,
                                                          AttachedArenas* arenas) {
  if (wait_timeout_ms <= 0) return invalid_argument("wait_timeout_ms must be positive");
  Frame f;
  SY_ASSIGN_OR_RETURN(auto got, socket.receive(&f, handshake_timeout_ms));
  if (got == UnixSocket::Received::kTimeout)
    return unavailable("no hello from the loader within " + std::to_string(handshake_timeout_ms) +
                       " ms");
  if (got == UnixSocket::Received::kClosed)
    return unavailable("the loader closed the socket before its hello");
  if (f.type != kHello)
    return corrupt(std::string("the loader's first frame is a ") + frame_type_name(f.type) +
                   " frame, not a hello with the arena");
  SY_ASSIGN_OR_RETURN(HelloFrame hello, decode_hello(f.body));
  const size_t fds = hello.data_capacity > 0 ? 2 : 1;
  if (f.fds.size() != fds)
    return corrupt("the loader's hello comes with " + std::to_string(f.fds.size()) +
                   " descriptors, not " + std::to_string(fds));
  auto impl = std::make_unique<Impl>();
  auto attach = [&](UniqueFd fd, uint64_t capacity, const std::string& what) {
    return arenas != nullptr ? arenas->attach(std::move(fd), capacity, what)
                             : ShmArena::attach(std::move(fd), capacity, what);
  };
  const std::string what = "arena of channel " + hello.channel;
  SY_ASSIGN_OR_RETURN(impl->arena, attach(std::move(f.fds[0]), hello.capacity, what));
  if (hello.data_capacity > 0) {
    SY_ASSIGN_OR_RETURN(auto data,
                        attach(std::move(f.fds[1]), hello.data_capacity, "data " + what));
    impl->chunks = ArenaChunks::create(std::move(data));
  }
  const int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) return io_error(what + ": cannot create an eventfd: " + std::strerror(errno));
  impl->wake.reset(wake);
  impl->ring = ArenaRing(hello.capacity);
  impl->hello = std::move(hello);
  impl->wait_timeout_ms = wait_timeout_ms;
  impl->socket = std::move(socket);
  SY_RETURN_IF_ERROR(
      impl->send({kHelloAck,
                  encode(HelloAckFrame{kShmProtocolVersion, static_cast<uint64_t>(::getpid())}),
                  {}}));
  return std::shared_ptr<ShmProducer>(new ShmProducer(std::move(impl)));
}

Status ShmProducer::push(Packet packet) { return impl_->push(packet); }

void ShmProducer::finish(Status status) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->finished) return;
  impl_->finished = true;
  if (impl_->broken.is_ok()) (void)impl_->send({kFinish, encode(finish_frame(status)), {}});
}

Result<bool> ShmProducer::pop(Packet*) {
  return invalid_argument(impl_->name() + ": pop() on the producer's side");
}

void ShmProducer::cancel() {
  impl_->cancelled = true;
  const uint64_t one = 1;
  (void)!::write(impl_->wake.get(), &one, sizeof one);
}

size_t ShmProducer::depth() const {
  const uint64_t sent = impl_->header().sent.load(), popped = impl_->header().popped.load();
  return sent > popped ? static_cast<size_t>(sent - popped) : 0;
}

const std::string& ShmProducer::channel_name() const { return impl_->hello.channel; }

std::shared_ptr<ChunkAllocator> ShmProducer::chunk_allocator() { return impl_->chunks; }

bool ShmProducer::takes_unread_fields() const { return impl_->hello.file_field_bytes > 0; }

}  // namespace shardyard::io
