// A Channel (io/transport/data_plane.h) between processes of one node: workers in their own
// processes push packets, the loader pops them, and item bytes cross once through shared
// memory (docs/shared-memory.md).
//
// The loader opens the channel (ShmConsumer::open) over one socket per producer (a Unix
// socket pair whose other end the worker process holds, io/transport/unix_socket.h): it
// creates one arena per producer (io/transport/shm_arena.h) and sends it as a descriptor.
// A worker connects (ShmProducer::connect) on its end. push() copies each item's field
// bytes once into the arena (fields that share bytes share the copy) with the item's
// descriptor (io/transport/item_codec.h: key, fields, id, shard, position, worker, stage
// states) and sends a small run frame; fields the producer read into its data arena
// (chunk_allocator(), with ShmChannelOptions::data_bytes) are named there, not copied.
// pop() returns Items whose fields are views into the loader's read-only mappings of the
// arenas and whose `owner` frees the run (and counts the data arena's spans it names as
// dropped) when the last item of it is dropped, on any thread, crediting the producer. A packet
// larger than max_run_bytes travels as several runs and is popped whole.
//
// Backpressure: push() waits while the producer has `packets_in_flight` packets sent and
// not popped, or while its arena has no room for the next run; both waits end at once when
// the loader cancels or goes away, and fail after wait_timeout_ms. finish(status) travels
// to the loader, whose pop() returns the first error ahead of queued packets. A producer
// that exits or is killed without finish() is an error naming it and its pid; a damaged
// frame or descriptor is kCorrupt; neither can touch the loader's other data, and both
// fail the channel for good. A pop() that waited wait_timeout_ms for nothing returns
// kUnavailable (saying when the producer waits for room the loader's items hold) and may
// be called again. A push() that fails after some runs of its packet went out fails every
// later push too.
//
// Thread-safety: as Channel. ShmConsumer: one thread pops, cancel(), finish() and depth()
// from anywhere, popped items dropped on any thread, also after the channel is gone.
// ShmProducer: push() and finish() serialise on a lock; cancel() and depth() from anywhere.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "io/transport/data_plane.h"
#include "io/transport/item_codec.h"
#include "io/transport/shm_arena.h"
#include "io/transport/shm_segment.h"
#include "io/transport/unix_socket.h"

namespace shardyard::io {

struct ShmChannelOptions {
  std::string name = "shm";            // the channel's name in messages ("r0/e1/w2")
  uint64_t arena_bytes = 64ull << 20;  // ring bytes per producer (rounded up to 4 KiB)
  uint32_t packets_in_flight = 4;      // per producer: sent and not yet popped, at most
  uint64_t max_run_bytes = 0;          // largest run (payload + descriptors); 0: arena / 4
  int wait_timeout_ms = 600000;        // longest push() or pop() wait, > 0
  SegmentOptions segment;              // where arenas live; names the size option
  // The loader's side: maps ranges of source files, so that producers may name fields of at
  // least file_field_bytes by file range instead of copying them (io/transport/item_codec.h,
  // "File ranges"). Unset: every field is copied.
  FileRanges files;
  uint64_t file_field_bytes = 64u << 10;
  // The loader's side, with one producer: takes the arena from this pool and gives it back
  // when it may be reused (io/transport/shm_arena.h ArenaPool). Unset: a new arena per
  // channel, freed with it.
  std::shared_ptr<ArenaPool> arenas;
  // Ring bytes of a second arena per producer, the data arena, where the producer reads
  // the bytes of its items before it pushes them (ShmProducer::chunk_allocator()); 0: none.
  // With one producer it comes from `data_arenas` when set, given back when the producer
  // finished and dropped every span of it. It only saves copies: where it cannot be made
  // (no room in the folder), the channel goes on without it.
  uint64_t data_bytes = 0;
  std::shared_ptr<ArenaPool> data_arenas;
};

// One producer as the loader sees it.
struct ShmPeer {
  UnixSocket socket;
  std::string name;  // "worker 3": names it in messages
};

class ShmConsumer : public Channel {
 public:
  static Result<std::shared_ptr<ShmConsumer>> open(std::vector<ShmPeer> producers,
                                                   const ShmChannelOptions& options);
  ~ShmConsumer() override;
  // Consumer side: push() is kInvalidArgument; finish(error) fails the channel with an
  // error learnt elsewhere (finish(OK) does nothing).
  Status push(Packet packet) override;
  void finish(Status status) override;
  Result<bool> pop(Packet* out) override;
  void cancel() override;
  size_t depth() const override;
  // Arena bytes held by popped or queued items not yet dropped, over all producers.
  uint64_t held_bytes() const;
  // For the monitor: held_bytes(), what the channel's arenas keep in use.
  uint64_t queued_bytes() const override { return held_bytes(); }

  struct Impl;

 private:
  explicit ShmConsumer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class ShmProducer : public Channel {
 public:
  // Waits at most handshake_timeout_ms for the loader's hello on `socket`, maps the arena
  // (through `arenas` when given: a loader with an ArenaPool sends the same arena again),
  // answers with this process's pid.
  static Result<std::shared_ptr<ShmProducer>> connect(UnixSocket socket, int handshake_timeout_ms,
                                                      int wait_timeout_ms = 600000,
                                                      AttachedArenas* arenas = nullptr);
  ~ShmProducer() override;
  Status push(Packet packet) override;
  void finish(Status status) override;
  // Producer side: pop() is kInvalidArgument; cancel() ends this side's waits (a push
  // blocked now or later returns kCancelled); depth() is packets sent and not yet popped.
  Result<bool> pop(Packet* out) override;
  void cancel() override;
  size_t depth() const override;
  // The loader's side counts the bytes in use (ShmConsumer::queued_bytes()); here 0.
  uint64_t queued_bytes() const override { return 0; }
  // The data arena's allocator (a reader's chunks land where the loader reads them), or
  // null when the loader sent none.
  std::shared_ptr<ChunkAllocator> chunk_allocator() override;
  // When the loader takes file ranges: unread fields cross as such (item_codec.h).
  bool takes_unread_fields() const override;
  const std::string& channel_name() const;

  struct Impl;

 private:
  explicit ShmProducer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardyard::io
