// Data plane: how items move from workers to a rank's loader, apart from the control plane.
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

#include "runtime/item.h"
#include "runtime/status.h"

namespace shardyard::io {

struct Packet {
  std::vector<Item> items;
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
  // Packets queued now (for the monitor).
  virtual size_t depth() const = 0;
};

class DataPlane {
 public:
  virtual ~DataPlane() = default;
  // The consumer opens a channel for `producers` producers holding at most `capacity`
  // packets, under a name unique in the plane; it lives while the consumer holds it.
  virtual std::shared_ptr<Channel> open_channel(const std::string& name, uint32_t producers,
                                                size_t capacity) = 0;
  // A producer finds a channel by the name it was told (in a control message); null when
  // no open channel has that name.
  virtual std::shared_ptr<Channel> attach(const std::string& name) = 0;
  virtual const char* kind() const = 0;
};

// Pointers inside one process.
std::unique_ptr<DataPlane> inproc_data_plane();

}  // namespace shardyard::io
