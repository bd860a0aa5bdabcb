// The frames of a shared-memory channel (docs/shared-memory.md, "Frames"): what the loader
// (consumer) and a worker (producer) say on their socket (io/transport/unix_socket.h).
// Bodies use runtime/codec.h encodings; a decoder takes exactly one body and refuses a short,
// long or inconsistent one with kCorrupt, so a damaged frame never reaches the arena.
//
//   kHello    consumer -> producer, with the arena's descriptor (and the data arena's
//             second, when it has one): protocol version, arena capacity, packets the
//             producer may have in flight, its largest run, channel and producer names, the
//             smallest field the producer may name by file range (0: none;
//             io/transport/item_codec.h), and the data arena's capacity (0: none)
//   kHelloAck producer -> consumer: protocol version, the producer's pid
//   kRun      producer -> consumer: a run of the arena holding items (their bytes and, at
//             `descriptor_offset`, their descriptors, io/transport/item_codec.h); the last
//             run of a packet has kLastRun; `arena_slots` lists the data arena's spans its
//             items name (shm_arena.h ArenaChunks)
//   kFinish   producer -> consumer: the producer is done; OK or the error that stopped it
//   kCredit   consumer -> producer: a wake-up; the counts are in the arena's header
//   kCancel   consumer -> producer: a wake-up; the consumer cancelled (also in the header)
//
// Pure functions and value types; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/status.h"

namespace shardyard::io {

inline constexpr uint32_t kShmProtocolVersion = 3;
inline constexpr size_t kMaxNameBytes = 1024;
inline constexpr size_t kMaxFinishMessageBytes = 8192;

enum FrameType : uint16_t {
  kHello = 1,
  kHelloAck = 2,
  kRun = 3,
  kFinish = 4,
  kCredit = 5,
  kCancel = 6,
};
const char* frame_type_name(uint16_t type);

struct HelloFrame {
  uint32_t version = kShmProtocolVersion;
  uint64_t capacity = 0;           // ring bytes of the arena
  uint32_t packets_in_flight = 0;  // sent and not yet popped, at most
  uint64_t max_run_bytes = 0;      // largest run the producer may place
  std::string channel;             // "r0/e1/w2"
  std::string producer;            // how the consumer names this producer in messages
  uint64_t file_field_bytes = 0;   // fields this long or longer may cross as file ranges
  uint64_t data_capacity = 0;      // ring bytes of the data arena; 0: none
};

struct HelloAckFrame {
  uint32_t version = kShmProtocolVersion;
  uint64_t pid = 0;
};

struct RunFrame {
  static constexpr uint8_t kLastRun = 1;
  uint64_t start = 0;  // ring position
  uint64_t bytes = 0;  // 0 for a packet without items
  uint64_t descriptor_offset = 0;
  uint64_t descriptor_bytes = 0;
  uint32_t items = 0;
  uint8_t flags = 0;
  std::vector<uint32_t> arena_slots;  // each below kArenaSpanSlots, at most that many
};

struct FinishFrame {
  uint32_t code = 0;  // StatusCode
  std::string message;
};

std::string encode(const HelloFrame& f);
std::string encode(const HelloAckFrame& f);
std::string encode(const RunFrame& f);
std::string encode(const FinishFrame& f);
Result<HelloFrame> decode_hello(std::string_view body);
Result<HelloAckFrame> decode_hello_ack(std::string_view body);
Result<RunFrame> decode_run(std::string_view body);
Result<FinishFrame> decode_finish(std::string_view body);

// The Status a FinishFrame carries (OK, or its code and message).
Status finish_status(const FinishFrame& f);
FinishFrame finish_frame(const Status& status);

}  // namespace shardyard::io
