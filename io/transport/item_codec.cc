#include "io/transport/item_codec.h"

#include <algorithm>
#include <cstring>

namespace shardyard::io {

namespace {

uint64_t align_up(uint64_t v, uint64_t align) { return (v + align - 1) / align * align; }

// The smallest encodings, which bound how many of each a block of some size can hold.
constexpr size_t kMinItemBytes = 8 + 4 + 8 + 4 + 4 + 4 + 1;
constexpr size_t kMinFieldBytes = 4 + 8 + 8;
constexpr uint8_t kHasStageState = 1, kHasDispatchState = 2;

bool fail(std::string* error, std::string message) {
  *error = std::move(message);
  return false;
}

// ByteWriter's encodings (runtime/codec.h), a whole number per append: encode_item runs for
// every item of every packet.
void put(std::string& out, uint64_t v, int bytes) {
  char b[8];
  for (int i = 0; i < bytes; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out.append(b, static_cast<size_t>(bytes));
}

void put_str(std::string& out, std::string_view s) {
  put(out, s.size(), 4);
  out.append(s);
}

}  // namespace

uint64_t payload_upper_bound(const Item& item, uint64_t align) {
  uint64_t n = 0;
  for (const auto& f : item.fields) n += f.size == 0 ? 0 : align_up(f.size, align);
  return n;
}

void plan_payload(const Item* items, size_t n, uint64_t align, PayloadPlan* plan) {
  plan->extents.clear();
  plan->field_offsets.clear();
  plan->scratch.clear();
  plan->bytes = 0;
  bool sorted = true;
  for (size_t i = 0; i < n; ++i) {
    for (const auto& f : items[i].fields) {
      const size_t index = plan->field_offsets.size();
      plan->field_offsets.push_back(0);
      if (f.size == 0) continue;
      const auto start = reinterpret_cast<uintptr_t>(f.data);
      if (!plan->scratch.empty() && start < plan->scratch.back().start) sorted = false;
      plan->scratch.push_back({start, f.size, index});
    }
  }
  auto& ranges = plan->scratch;
  if (!sorted)
    std::sort(ranges.begin(), ranges.end(),
              [](const auto& a, const auto& b) { return a.start < b.start; });
  // Sweep in address order: a range that overlaps or touches the open extent joins it.
  uintptr_t begin = 0, end = 0;
  uint64_t at = 0;
  auto close = [&] {
    if (end == begin) return;
    plan->extents.push_back({reinterpret_cast<const uint8_t*>(begin), end - begin, at});
    at = align_up(at + (end - begin), align);
  };
  for (const auto& r : ranges) {
    if (end == begin || r.start > end) {
      close();
      begin = r.start;
      end = r.start + r.size;
    } else {
      end = std::max<uintptr_t>(end, r.start + r.size);
    }
    plan->field_offsets[r.field] = at + (r.start - begin);
  }
  close();
  plan->bytes = at;
}

void copy_payload(const PayloadPlan& plan, uint8_t* region) {
  for (const auto& e : plan.extents) std::memcpy(region + e.offset, e.source, e.size);
}

uint64_t encoded_item_bytes(const Item& item) {
  uint64_t n = kMinItemBytes + item.key.size();
  for (const auto& f : item.fields) n += kMinFieldBytes + f.name.size();
  if (item.stage_state) n += 4 + item.stage_state->size();
  if (item.dispatch_state) n += 4 + item.dispatch_state->size();
  return n;
}

void encode_item(const Item& item, const uint64_t* offsets, ByteWriter* w) {
  std::string& out = w->out;
  put(out, item.id, 8);
  put(out, item.shard, 4);
  put(out, item.position, 8);
  put(out, item.worker, 4);
  put_str(out, item.key);
  put(out, item.fields.size(), 4);
  for (size_t i = 0; i < item.fields.size(); ++i) {
    put_str(out, item.fields[i].name);
    put(out, offsets[i], 8);
    put(out, item.fields[i].size, 8);
  }
  const uint8_t flags =
      (item.stage_state ? kHasStageState : 0) | (item.dispatch_state ? kHasDispatchState : 0);
  out.push_back(static_cast<char>(flags));
  if (item.stage_state) put_str(out, *item.stage_state);
  if (item.dispatch_state) put_str(out, *item.dispatch_state);
}

void encode_items(const Item* items, size_t n, const PayloadPlan& plan, ByteWriter* out) {
  out->u32(kItemCodecVersion);
  out->u32(static_cast<uint32_t>(n));
  size_t field = 0;
  for (size_t i = 0; i < n; ++i) {
    encode_item(items[i], plan.field_offsets.data() + field, out);
    field += items[i].fields.size();
  }
}

namespace {

// ByteReader's decoding (runtime/codec.h) with whole-number loads: decoding runs in the
// loader for every item of every packet. A read past the end sets failed() and returns
// zeros, so the decoder checks once per step.
class Reader {
 public:
  Reader(std::string_view bytes, size_t pos) : b_(bytes), pos_(pos) {}
  uint64_t uint(int n) {
    if (failed_ || b_.size() - pos_ < static_cast<size_t>(n)) {
      failed_ = true;
      return 0;
    }
    uint64_t v = 0;
    std::memcpy(&v, b_.data() + pos_, static_cast<size_t>(n));
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v) >> (64 - 8 * n);
#endif
    pos_ += static_cast<size_t>(n);
    return v;
  }
  std::string_view str() {
    const uint64_t n = uint(4);
    if (failed_ || b_.size() - pos_ < n) {
      failed_ = true;
      return {};
    }
    std::string_view s = b_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  size_t left() const { return b_.size() - pos_; }
  size_t pos() const { return pos_; }
  bool failed() const { return failed_; }

 private:
  std::string_view b_;
  size_t pos_;
  bool failed_ = false;
};

bool decode(Reader& in, const uint8_t* region, uint64_t region_bytes, Item* out,
            std::string* error) {
  out->id = in.uint(8);
  out->shard = static_cast<uint32_t>(in.uint(4));
  out->position = in.uint(8);
  out->worker = static_cast<uint32_t>(in.uint(4));
  out->key = in.str();
  const uint64_t fields = in.uint(4);
  if (in.failed()) return fail(error, "cut short");
  if (fields > in.left() / kMinFieldBytes)
    return fail(error, "claims " + std::to_string(fields) + " fields in " +
                           std::to_string(in.left()) + " bytes");
  out->fields.clear();
  out->fields.reserve(fields);
  for (uint64_t i = 0; i < fields; ++i) {
    const std::string_view name = in.str();
    const uint64_t offset = in.uint(8), size = in.uint(8);
    if (in.failed()) return fail(error, "cut short in field " + std::to_string(i));
    if (offset > region_bytes || size > region_bytes - offset)
      return fail(error, "field '" + std::string(name) + "' at " + std::to_string(offset) + " + " +
                             std::to_string(size) + " lies outside the " +
                             std::to_string(region_bytes) + " bytes of its region");
    if (!out->fields.empty() && !(out->fields.back().name < name))
      return fail(error, "field '" + std::string(name) + "' is out of order or repeated");
    out->fields.push_back(Field{std::string(name), region + offset, static_cast<size_t>(size)});
  }
  const uint64_t flags = in.uint(1);
  if (flags & ~uint64_t{kHasStageState | kHasDispatchState})
    return fail(error, "unknown flags " + std::to_string(flags));
  out->stage_state.reset();
  out->dispatch_state.reset();
  if (flags & kHasStageState) out->stage_state = std::make_shared<const std::string>(in.str());
  if (flags & kHasDispatchState)
    out->dispatch_state = std::make_shared<const std::string>(in.str());
  if (in.failed()) return fail(error, "cut short");
  return true;
}

}  // namespace

bool decode_item(std::string_view bytes, size_t* pos, const uint8_t* region, uint64_t region_bytes,
                 Item* out, std::string* error) {
  Reader in(bytes, std::min(*pos, bytes.size()));
  const bool ok = decode(in, region, region_bytes, out, error);
  *pos = in.pos();
  return ok;
}

Status decode_items(std::string_view block, const uint8_t* region, uint64_t region_bytes,
                    std::vector<Item>* out, const std::string& what) {
  Reader in(block, 0);
  const uint64_t version = in.uint(4), count = in.uint(4);
  if (in.failed()) return corrupt(what + ": item descriptors cut short");
  if (version != kItemCodecVersion)
    return corrupt(what + ": item descriptors of version " + std::to_string(version) +
                   "; this build reads " + std::to_string(kItemCodecVersion) +
                   " (every process must run the same build)");
  if (count > in.left() / kMinItemBytes)
    return corrupt(what + ": claims " + std::to_string(count) + " items in " +
                   std::to_string(in.left()) + " bytes");
  out->reserve(out->size() + count);
  std::string error;
  for (uint64_t i = 0; i < count; ++i) {
    out->emplace_back();
    if (!decode(in, region, region_bytes, &out->back(), &error)) {
      out->pop_back();
      return corrupt(what + ": item " + std::to_string(i) + " of " + std::to_string(count) + ": " +
                     error);
    }
  }
  if (in.left() != 0)
    return corrupt(what + ": " + std::to_string(in.left()) + " bytes after the last item");
  return Status::ok();
}

}  // namespace shardyard::io
