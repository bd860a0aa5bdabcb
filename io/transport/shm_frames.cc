#include "io/transport/shm_frames.h"

#include "io/transport/shm_arena.h"
#include "runtime/codec.h"

namespace shardyard::io {

namespace {

Status bad(const char* frame, const std::string& why) {
  return corrupt(std::string("a ") + frame + " frame " + why);
}

// Reads a name of at most kMaxNameBytes.
bool name(ByteReader* in, std::string* out) {
  *out = in->str();
  return !in->failed() && out->size() <= kMaxNameBytes;
}

Status check_version(const char* frame, uint32_t version) {
  if (version == kShmProtocolVersion) return Status::ok();
  return bad(frame, "speaks protocol version " + std::to_string(version) + "; this build speaks " +
                        std::to_string(kShmProtocolVersion) +
                        " (the loader and its workers must be the same build)");
}

}  // namespace

const char* frame_type_name(uint16_t type) {
  switch (type) {
    case kHello:
      return "hello";
    case kHelloAck:
      return "hello-ack";
    case kRun:
      return "run";
    case kFinish:
      return "finish";
    case kCredit:
      return "credit";
    case kCancel:
      return "cancel";
    default:
      return "unknown";
  }
}

std::string encode(const HelloFrame& f) {
  ByteWriter w;
  w.u32(f.version);
  w.u64(f.capacity);
  w.u32(f.packets_in_flight);
  w.u64(f.max_run_bytes);
  w.str(f.channel.substr(0, kMaxNameBytes));
  w.str(f.producer.substr(0, kMaxNameBytes));
  w.u64(f.file_field_bytes);
  w.u64(f.data_capacity);
  return std::move(w.out);
}

std::string encode(const HelloAckFrame& f) {
  ByteWriter w;
  w.u32(f.version);
  w.u64(f.pid);
  return std::move(w.out);
}

std::string encode(const RunFrame& f) {
  ByteWriter w;
  w.u64(f.start);
  w.u64(f.bytes);
  w.u64(f.descriptor_offset);
  w.u64(f.descriptor_bytes);
  w.u32(f.items);
  w.u8(f.flags);
  w.u32(static_cast<uint32_t>(f.arena_slots.size()));
  for (uint32_t slot : f.arena_slots) w.u32(slot);
  return std::move(w.out);
}

std::string encode(const FinishFrame& f) {
  ByteWriter w;
  w.u32(f.code);
  w.str(f.message.substr(0, kMaxFinishMessageBytes));
  return std::move(w.out);
}

Result<HelloFrame> decode_hello(std::string_view body) {
  ByteReader in(body);
  HelloFrame f;
  f.version = in.u32();
  // The version first: another version's hello may be laid out otherwise.
  if (!in.failed()) SY_RETURN_IF_ERROR(check_version("hello", f.version));
  f.capacity = in.u64();
  f.packets_in_flight = in.u32();
  f.max_run_bytes = in.u64();
  if (!name(&in, &f.channel) || !name(&in, &f.producer)) return bad("hello", "is malformed");
  f.file_field_bytes = in.u64();
  f.data_capacity = in.u64();
  if (!in.done()) return bad("hello", "is malformed");
  if (f.packets_in_flight == 0) return bad("hello", "allows no packet in flight");
  if (f.max_run_bytes == 0 || f.max_run_bytes > f.capacity)
    return bad("hello", "has a largest run of " + std::to_string(f.max_run_bytes) +
                            " bytes for an arena of " + std::to_string(f.capacity));
  return f;
}

Result<HelloAckFrame> decode_hello_ack(std::string_view body) {
  ByteReader in(body);
  HelloAckFrame f;
  f.version = in.u32();
  f.pid = in.u64();
  if (!in.done()) return bad("hello-ack", "is malformed");
  SY_RETURN_IF_ERROR(check_version("hello-ack", f.version));
  return f;
}

Result<RunFrame> decode_run(std::string_view body) {
  ByteReader in(body);
  RunFrame f;
  f.start = in.u64();
  f.bytes = in.u64();
  f.descriptor_offset = in.u64();
  f.descriptor_bytes = in.u64();
  f.items = in.u32();
  f.flags = in.u8();
  const uint32_t slots = in.u32();
  if (in.failed() || slots > kArenaSpanSlots) return bad("run", "is malformed");
  f.arena_slots.resize(slots);
  for (auto& slot : f.arena_slots) slot = in.u32();
  if (!in.done()) return bad("run", "is malformed");
  for (uint32_t slot : f.arena_slots)
    if (slot >= kArenaSpanSlots) return bad("run", "names a data arena slot out of range");
  if (f.flags & ~RunFrame::kLastRun) return bad("run", "has unknown flags");
  if (f.descriptor_offset > f.bytes || f.descriptor_bytes > f.bytes - f.descriptor_offset)
    return bad("run", "places its descriptors outside the run");
  if ((f.bytes == 0) != (f.items == 0))
    return bad("run", "has items but no bytes, or bytes but no items");
  return f;
}

Result<FinishFrame> decode_finish(std::string_view body) {
  ByteReader in(body);
  FinishFrame f;
  f.code = in.u32();
  f.message = in.str();
  if (!in.done() || f.message.size() > kMaxFinishMessageBytes) return bad("finish", "is malformed");
  if (f.code > static_cast<uint32_t>(StatusCode::kUnavailable))
    return bad("finish", "has an unknown status code " + std::to_string(f.code));
  return f;
}

Status finish_status(const FinishFrame& f) {
  if (f.code == 0) return Status::ok();
  return Status(static_cast<StatusCode>(f.code), f.message);
}

FinishFrame finish_frame(const Status& status) {
  return FinishFrame{static_cast<uint32_t>(status.code()), status.message()};
}

}  // namespace shardyard::io
