// Data plane: how items move from a rank's dispatcher to its workers (Route) and from
// workers to the rank's loader (Channel), apart from the control plane.
//
// Control messages (assignments, progress, errors) travel as CAF messages; the bytes of
// items travel through Channels of a DataPlane. A Channel is a bounded queue of packets
// (runs of items) from one or more producers to one consumer: push() blocks while the
// queue is full, which is the backpressure that bounds how far workers run ahead of the
// trainer. The in-process plane moves pointers (items keep their buffers alive); the shared
// memory and ZeroMQ planes of later releases implement the same interface with handles
// into an arena or frames on a socket.
//
// Thread-safe: any thread may push, one thread pops; cancel() and finish() from anywhere.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/buffer.h"
#include "runtime/item.h"
#include "runtime/pipeline_cut.h"
#include "runtime/status.h"

namespace shardyard::io {

struct Packet {
  std::vector<Item> items;
  uint64_t bytes = 0;  // payload bytes of the items, as the producer counted them
};

// Packets a channel's consumer takes on its own thread, when the channel has none queued,
// instead of waiting for a producer's thread to push them (Channel::set_source): a worker
// process's shared-memory channel is popped where the rank consumes, without a hop through
// a thread that pops it and pushes what it got.
class PacketSource {
 public:
  virtual ~PacketSource() = default;
  // The next packet (true), or false once the source has ended: it finished, failed or was
  // cancelled, and says so to whoever set it; the channel then waits for a push, a finish()
  // or another source (an error returned counts as the end too: the channel does not
  // report it). Blocks while the source has nothing.
  virtual Result<bool> pull(Packet* out) = 0;
  // Ends a pull() that waits, and every later one, from any thread.
  virtual void cancel() = 0;
  // For the monitor, from any thread while the source is set: packets waiting in it, and
  // the bytes it keeps in use.
  virtual size_t depth() const = 0;
  virtual uint64_t queued_bytes() const = 0;
};

class Channel {
 public:
  virtual ~Channel() = default;
  // Queues a packet, blocking while the channel is full. kCancelled once the consumer has
  // cancelled (the producer should stop).
  virtual Status push(Packet packet) = 0;
  // One producer is done: OK at a clean end, or the error that stopped it. The channel
  // ends when every producer has finished; the first error is handed to the consumer.
  virtual void finish(Status status) = 0;
  // The next packet; false at the end (all producers finished OK); an error if a producer
  // failed. Blocks while empty.
  virtual Result<bool> pop(Packet* out) = 0;
  // The consumer gives up: blocked and later pushes return kCancelled.
  virtual void cancel() = 0;
  // Packets queued now, and the payload bytes they hold (Packet::bytes), for the monitor
  // (with those of a source set, PacketSource::depth()).
  virtual size_t depth() const = 0;
  virtual uint64_t queued_bytes() const = 0;
  // Producer side: where a producer may read the bytes of the items it will push, so that
  // push() sends them without a copy (a shared-memory channel's data arena); null when
  // the channel has none.
  virtual std::shared_ptr<ChunkAllocator> chunk_allocator() { return nullptr; }
  // Producer side: whether pushed items may have unread fields (runtime/item.h
  // Field::unread()), which the consumer reads where it builds batches.
  virtual bool takes_unread_fields() const { return false; }
  // Producer side: lets the consumer pull packets from `source` (null: no more) while none
  // is queued; false where the channel cannot (then the producer pushes): the in-process
  // channel takes a source only when it has one producer. A cancel() of the channel
  // cancels the source.
  virtual bool set_source(std::shared_ptr<PacketSource> /*source*/) { return false; }
};

// A logical shard loaded whole by a rank's dispatcher and shared read-only with all of the
// rank's workers (broadcast dispatch): its items from the consumed position on, in the
// shard's epoch order, as views into buffers that the items keep alive. In process that is
// one immutable copy whatever the number of workers; a shared-memory plane maps the same
// bytes into every worker process and sends the items' offsets instead of pointers.
// Items of a loaded shard decoded on demand, as a worker process reads them from a shard
// image in shared memory (io/transport/shm_shard.h): each worker decodes only its part.
class ShardItems {
 public:
  virtual ~ShardItems() = default;
  virtual uint64_t size() const = 0;
  virtual Result<Item> item(uint64_t index) const = 0;
};

struct SharedShard {
  uint32_t shard = 0;           // logical shard
  uint64_t first_position = 0;  // rank position of item 0; the rest follow one by one
  std::vector<Item> items;
  std::shared_ptr<const ShardItems> lazy;  // set instead of `items`: decoded on demand
  uint64_t bytes = 0;                      // bytes loaded for it
  uint64_t size() const { return lazy ? lazy->size() : items.size(); }
  Result<Item> item(uint64_t index) const {
    if (lazy) return lazy->item(index);
    return items[index];
  }
};

// What Route::receive hands a worker.
struct Delivery {
  enum class Kind { kItems, kShard, kEnd };
  Kind kind = Kind::kItems;  // kItems with no items: nothing queued (receive without waiting)
  std::vector<Item> items;   // kItems: routed items, each with its rank position
  std::shared_ptr<const SharedShard> shard;  // kShard: take your part of it
};

// The hop from a rank's dispatcher to its workers for one epoch (docs/protocol.md,
// "Routing"). The loader opens it, the dispatcher sends into it, each worker receives its
// deliveries, and the loader credits what the trainer consumed:
//   round robin  send(item) queues the item for worker position mod W;
//   on request   send(item) queues it for whichever worker asks next;
//   by key       send(item) queues it for worker Item::worker, which the dispatcher chose
//                from the item's routing key;
//   broadcast    send_shard(shard) queues the shard for every worker.
// Backpressure: the dispatcher calls wait_consumed(p) before producing position p, and
// that waits until the loader has consumed everything before p (for routed items
// p - window, see RouteOptions), so the dispatcher never runs more than a bounded number
// of items ahead of the slowest worker it feeds, and the loader's reorder buffer is
// bounded too. finish() is the end of the epoch (or the error that stopped the dispatcher);
// cancel() is its reset: every side's blocked call returns kCancelled.
//
// Thread-safe: one dispatcher thread sends, worker w's thread receives for w, the loader
// credits; cancel() from anywhere.
class Route {
 public:
  virtual ~Route() = default;
  // Dispatcher side. send() and send_shard() never block.
  virtual Status send(Item item) = 0;
  virtual Status send_shard(std::shared_ptr<const SharedShard> shard) = 0;
  virtual Status wait_consumed(uint64_t position) = 0;
  virtual void finish(Status status) = 0;
  // Worker side: the next delivery for `worker`; with wait == false an empty kItems when
  // nothing is queued. kEnd once the dispatcher finished and the queue is drained; the
  // dispatcher's error, or kCancelled after cancel().
  virtual Result<Delivery> receive(uint32_t worker, bool wait) = 0;
  // Loader side: every position before `position` has been consumed.
  virtual void consumed(uint64_t position) = 0;
  virtual uint64_t consumed_position() const = 0;  // the last credit (a cheap read)
  virtual void cancel() = 0;
  virtual Dispatch mode() const = 0;
  virtual uint32_t window() const = 0;  // items the dispatcher may run ahead (routed modes)
  virtual size_t depth() const = 0;     // deliveries queued now (for the monitor)
};

}  // namespace shardyard::io

namespace shardyard {

// A job's data plane: it makes and finds the channels and routes by name. The name is
// public (an Env hands a new one to every job, actors/env.h); the interface is not installed,
// because the planes between processes will change it.
class DataPlane {
 public:
  virtual ~DataPlane() = default;
  // The consumer opens a channel for `producers` producers holding at most `capacity`
  // packets, under a name unique in the plane; it lives while the consumer holds it.
  virtual std::shared_ptr<io::Channel> open_channel(const std::string& name, uint32_t producers,
                                                    size_t capacity) = 0;
  // A producer finds a channel by the name it was told (in a control message); null when
  // no open channel has that name.
  virtual std::shared_ptr<io::Channel> attach(const std::string& name) = 0;
  // The loader opens the route of an epoch (dispatch modes other than kNone) for `workers`
  // workers; `window` bounds how far routed items run ahead of the loader. The dispatcher
  // and the workers attach to it by name.
  virtual std::shared_ptr<io::Route> open_route(const std::string& name, Dispatch mode,
                                                uint32_t workers, uint32_t window) = 0;
  virtual std::shared_ptr<io::Route> attach_route(const std::string& name) = 0;
  virtual const char* kind() const = 0;
};

namespace io {
using shardyard::DataPlane;

// Pointers inside one process.
std::unique_ptr<DataPlane> inproc_data_plane();
}  // namespace io

}  // namespace shardyard
