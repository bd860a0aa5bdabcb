#include "io/transport/item_codec.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <utility>

namespace shardyard::io {

namespace {

uint64_t align_up(uint64_t v, uint64_t align) { return (v + align - 1) / align * align; }

// The smallest encodings, which bound how many of each a block of some size can hold.
constexpr size_t kMinItemBytes = 8 + 4 + 8 + 4 + 4 + 4 + 1;
constexpr size_t kMinFieldBytes = 4 + 1 + 8 + 8;
constexpr uint8_t kHasStageState = 1, kHasDispatchState = 2, kHasSource = 4;

bool fail(std::string* error, std::string message) {
  *error = std::move(message);
  return false;
}

// ByteWriter's encodings (runtime/codec.h), written through a cursor into room sized
// once (encoded_item_bytes): encode_item runs for every item of every packet, where an
// append per number cost more than the numbers. A little-endian machine stores each number
// at once (a byte at a time, a descriptor took 600 instructions: docs/performance.md).
template <int Bytes>
char* put(char* at, uint64_t v) {
  static_assert(Bytes == 1 || Bytes == 4 || Bytes == 8);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  std::memcpy(at, &v, Bytes);  // the low Bytes bytes
#else
  for (int i = 0; i < Bytes; ++i) at[i] = static_cast<char>((v >> (8 * i)) & 0xff);
#endif
  return at + Bytes;
}

char* put_str(char* at, std::string_view s) {
  at = put<4>(at, s.size());
  if (!s.empty()) std::memcpy(at, s.data(), s.size());
  return at + s.size();
}

}  // namespace

namespace {

// Whether field `f` (not empty) lies inside [data, data + size); *offset is then `base`
// plus its place there.
bool inside(const uint8_t* data, uint64_t size, uint64_t base, const Field& f, uint64_t* offset) {
  const auto at = reinterpret_cast<uintptr_t>(f.data), from = reinterpret_cast<uintptr_t>(data);
  if (f.size == 0 || at < from || f.size > size || at - from > size - f.size) return false;
  *offset = base + (at - from);
  return true;
}

// Whether plan_payload() names field `f` of an item owned by `file` by its file range.
// An unread field always is (the producer only makes them for a channel that takes file
// ranges).
bool in_file(const FileBytes* file, const Field& f, uint64_t file_field_bytes, uint64_t* offset) {
  if (file == nullptr) return false;
  if (f.unread()) {
    *offset = f.file_offset;
    return true;
  }
  return f.size >= file_field_bytes && inside(file->data, file->size, file->offset, f, offset);
}

// Whether plan_payload() names field `f` of an item owned by `chunk` by its arena place.
bool in_arena(const ArenaBytes* chunk, const Field& f, uint64_t* offset) {
  return chunk != nullptr && inside(chunk->data, chunk->size, chunk->offset, f, offset);
}

const ArenaBytes* chunk_of(const Item& item, const void* arena) {
  if (arena == nullptr) return nullptr;
  const ArenaBytes* chunk = arena_bytes_of(item.owner);
  return chunk != nullptr && chunk->arena == arena ? chunk : nullptr;
}

// The same pointer with the same control block (so the same deleter).
bool same_owner(const std::shared_ptr<const void>& a, const std::shared_ptr<const void>& b) {
  return a.get() == b.get() && !a.owner_before(b) && !b.owner_before(a);
}

// The deleter type marks an owner made by arena_bytes_owner() (as FileBytesDeleter does in
// runtime/item.cc).
struct ArenaBytesDeleter {
  const ArenaBytes* self = nullptr;
  mutable std::function<void()> done;
  void operator()(const ArenaBytes* p) const {
    if (done) done();
    delete p;
  }
};

}  // namespace

std::shared_ptr<const void> arena_bytes_owner(ArenaBytes bytes, std::function<void()> done) {
  const auto* p = new ArenaBytes(bytes);
  return std::shared_ptr<const ArenaBytes>(p, ArenaBytesDeleter{p, std::move(done)});
}

const ArenaBytes* arena_bytes_of(const std::shared_ptr<const void>& owner) {
  if (owner == nullptr) return nullptr;
  const auto* d = std::get_deleter<ArenaBytesDeleter>(owner);
  return d == nullptr ? nullptr : d->self;
}

uint64_t payload_upper_bound(const Item& item, uint64_t align, uint64_t file_field_bytes,
                             const void* arena) {
  const FileBytes* file = file_field_bytes > 0 ? file_bytes_of(item.owner) : nullptr;
  const ArenaBytes* chunk = chunk_of(item, arena);
  uint64_t n = 0, offset = 0;
  for (const auto& f : item.fields)
    if (f.size > 0 && !in_file(file, f, file_field_bytes, &offset) && !in_arena(chunk, f, &offset))
      n += align_up(f.size, align);
  return n;
}

void plan_payload(const Item* items, size_t n, uint64_t align, PayloadPlan* plan,
                  uint64_t file_field_bytes, const void* arena) {
  plan->extents.clear();
  plan->field_offsets.clear();
  plan->field_places.clear();
  plan->item_sources.clear();
  plan->arena_slots.clear();
  plan->scratch.clear();
  plan->bytes = 0;
  bool sorted = true;
  // Items of one chunk share their owner: look its kind up once per owner, not per item
  // (each lookup is a type comparison of the deleter).
  const std::shared_ptr<const void>* owner = nullptr;
  const FileBytes* file = nullptr;
  const ArenaBytes* chunk = nullptr;
  for (size_t i = 0; i < n; ++i) {
    if (owner == nullptr || !same_owner(*owner, items[i].owner)) {
      owner = &items[i].owner;
      file = file_field_bytes > 0 ? file_bytes_of(items[i].owner) : nullptr;
      chunk = chunk_of(items[i], arena);
    }
    plan->item_sources.push_back(kNoSource);
    bool slot_named = false;  // the item's chunk is in arena_slots: its fields share one
    for (const auto& f : items[i].fields) {
      const size_t index = plan->field_offsets.size();
      plan->field_offsets.push_back(0);
      plan->field_places.push_back(kPlaceRegion);
      if (f.size == 0) continue;
      if (in_file(file, f, file_field_bytes, &plan->field_offsets[index])) {
        plan->field_places[index] = kPlaceFile;
        plan->item_sources[i] = file->source;
        continue;
      }
      if (in_arena(chunk, f, &plan->field_offsets[index])) {
        plan->field_places[index] = kPlaceArena;
        auto& slots = plan->arena_slots;
        if (!slot_named && std::find(slots.rbegin(), slots.rend(), chunk->slot) == slots.rend())
          slots.push_back(chunk->slot);
        slot_named = true;
        continue;
      }
      const auto at = reinterpret_cast<uintptr_t>(f.data);
      if (!plan->scratch.empty() && at < plan->scratch.back().start) sorted = false;
      plan->scratch.push_back({at, f.size, index});
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

uint64_t encoded_item_bytes(const Item& item, bool source) {
  uint64_t n = kMinItemBytes + item.key.size() + (source ? 4 : 0);
  for (const auto& f : item.fields) n += kMinFieldBytes + f.name.size();
  if (item.stage_state) n += 4 + item.stage_state->size();
  if (item.dispatch_state) n += 4 + item.dispatch_state->size();
  return n;
}

namespace {

// Writes item's descriptor at `at`, encoded_item_bytes(item, source != kNoSource) long.
char* write_item(char* at, const Item& item, const uint64_t* offsets, const uint8_t* places,
                 uint32_t source) {
  at = put<8>(at, item.id);
  at = put<4>(at, item.shard);
  at = put<8>(at, item.position);
  at = put<4>(at, item.worker);
  at = put_str(at, item.key);
  at = put<4>(at, item.fields.size());
  for (size_t i = 0; i < item.fields.size(); ++i) {
    at = put_str(at, item.fields[i].name);
    *at++ = static_cast<char>(places == nullptr ? kPlaceRegion : places[i]);
    at = put<8>(at, offsets[i]);
    at = put<8>(at, item.fields[i].size);
  }
  const uint8_t flags = (item.stage_state ? kHasStageState : 0) |
                        (item.dispatch_state ? kHasDispatchState : 0) |
                        (source != kNoSource ? kHasSource : 0);
  *at++ = static_cast<char>(flags);
  if (source != kNoSource) at = put<4>(at, source);
  if (item.stage_state) at = put_str(at, *item.stage_state);
  if (item.dispatch_state) at = put_str(at, *item.dispatch_state);
  return at;
}

}  // namespace

void encode_item(const Item& item, const uint64_t* offsets, ByteWriter* w, const uint8_t* places,
                 uint32_t source) {
  std::string& out = w->out;
  const size_t at = out.size();
  out.resize(at + encoded_item_bytes(item, source != kNoSource));
  [[maybe_unused]] const char* end = write_item(out.data() + at, item, offsets, places, source);
  assert(end == out.data() + out.size());
}

namespace {

uint32_t source_of(const PayloadPlan& plan, size_t i) {
  return i < plan.item_sources.size() ? plan.item_sources[i] : kNoSource;
}

}  // namespace

uint64_t encoded_items_bytes(const Item* items, size_t n, const PayloadPlan& plan) {
  uint64_t bytes = 8;
  for (size_t i = 0; i < n; ++i)
    bytes += encoded_item_bytes(items[i], source_of(plan, i) != kNoSource);
  return bytes;
}

char* write_items(const Item* items, size_t n, const PayloadPlan& plan, char* out) {
  const bool placed = plan.field_places.size() == plan.field_offsets.size();
  char* at = put<4>(out, kItemCodecVersion);
  at = put<4>(at, n);
  size_t field = 0;
  for (size_t i = 0; i < n; ++i) {
    at = write_item(at, items[i], plan.field_offsets.data() + field,
                    placed ? plan.field_places.data() + field : nullptr, source_of(plan, i));
    field += items[i].fields.size();
  }
  return at;
}

void encode_items(const Item* items, size_t n, const PayloadPlan& plan, ByteWriter* out) {
  std::string& s = out->out;
  const size_t start = s.size();
  s.resize(start + encoded_items_bytes(items, n, plan));
  [[maybe_unused]] const char* end = write_items(items, n, plan, s.data() + start);
  assert(end == s.data() + s.size());
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

bool decode(Reader& in, const uint8_t* region, uint64_t region_bytes, Item* out, std::string* error,
            const FileRanges* files, const ArenaView* arena) {
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
  out->owner.reset();
  out->owners.clear();
  // The fields in the file (index, offset), mapped once as one span.
  std::vector<std::pair<size_t, uint64_t>> in_file;
  uint64_t file_begin = UINT64_MAX, file_end = 0, in_region = 0;
  // Built in place, not aside and moved in.
  auto add_field = [out](std::string_view name, const uint8_t* data, uint64_t size) {
    Field& f = out->fields.emplace_back();
    f.name.assign(name.data(), name.size());
    f.data = data;
    f.size = static_cast<size_t>(size);
  };
  for (uint64_t i = 0; i < fields; ++i) {
    const std::string_view name = in.str();
    const uint64_t place = in.uint(1), offset = in.uint(8), size = in.uint(8);
    if (in.failed()) return fail(error, "cut short in field " + std::to_string(i));
    if (!out->fields.empty() && !(out->fields.back().name < name))
      return fail(error, "field '" + std::string(name) + "' is out of order or repeated");
    if (place == kPlaceFile) {
      if (size == 0 || offset > UINT64_MAX - size)
        return fail(error, "field '" + std::string(name) + "' names the file range " +
                               std::to_string(offset) + " + " + std::to_string(size));
      file_begin = std::min(file_begin, offset);
      file_end = std::max(file_end, offset + size);
      in_file.emplace_back(out->fields.size(), offset);
      add_field(name, nullptr, size);
      continue;
    }
    if (place != kPlaceRegion && place != kPlaceArena)
      return fail(error, "field '" + std::string(name) + "' has the unknown place " +
                             std::to_string(place));
    const bool in_arena = place == kPlaceArena;
    if (in_arena && (arena == nullptr || arena->data == nullptr))
      return fail(error, "field '" + std::string(name) +
                             "' lies in a data arena, where only the region is allowed");
    const uint8_t* base = in_arena ? arena->data : region;
    const uint64_t bytes = in_arena ? arena->size : region_bytes;
    if (offset > bytes || size > bytes - offset || (in_arena && size == 0))
      return fail(error, "field '" + std::string(name) + "' at " + std::to_string(offset) + " + " +
                             std::to_string(size) + " lies outside the " + std::to_string(bytes) +
                             " bytes of its " + (in_arena ? "data arena" : "region"));
    if (size > 0) ++in_region;
    add_field(name, base + offset, size);
  }
  const uint64_t flags = in.uint(1);
  if (flags & ~uint64_t{kHasStageState | kHasDispatchState | kHasSource})
    return fail(error, "unknown flags " + std::to_string(flags));
  const bool has_source = (flags & kHasSource) != 0;
  const uint32_t source = has_source ? static_cast<uint32_t>(in.uint(4)) : kNoSource;
  out->stage_state.reset();
  out->dispatch_state.reset();
  if (flags & kHasStageState) out->stage_state = std::make_shared<const std::string>(in.str());
  if (flags & kHasDispatchState)
    out->dispatch_state = std::make_shared<const std::string>(in.str());
  if (in.failed()) return fail(error, "cut short");
  if (has_source != !in_file.empty() || (has_source && source == kNoSource))
    return fail(error, in_file.empty() ? "a source, and no field in a file range"
                                       : "fields in a file range, and no source");
  if (in_file.empty()) return true;
  if (files == nullptr || !*files)
    return fail(error, "fields in a file range of source " + std::to_string(source) +
                           ", where only the region is allowed");
  auto view = (*files)(source, file_begin, file_end - file_begin);
  if (!view.is_ok()) return fail(error, view.status().message());
  if (view->data == nullptr) {
    // Not mapped: the fields stay unread, read where the batch is built.
    if (!view->reader) return fail(error, "no bytes and no reader for a file range");
    FileBytes file;
    file.source = source;
    file.reader = std::move(view->reader);
    view->keep = file_bytes_owner(std::move(file));
    for (const auto& [index, offset] : in_file) out->fields[index].file_offset = offset;
  } else {
    for (const auto& [index, offset] : in_file)
      out->fields[index].data = view->data + (offset - file_begin);
  }
  if (in_region == 0) {
    out->owner = std::move(view->keep);
  } else {
    out->owners.push_back(std::move(view->keep));
  }
  return true;
}

}  // namespace

bool decode_item(std::string_view bytes, size_t* pos, const uint8_t* region, uint64_t region_bytes,
                 Item* out, std::string* error, const FileRanges* files, const ArenaView* arena) {
  Reader in(bytes, std::min(*pos, bytes.size()));
  const bool ok = decode(in, region, region_bytes, out, error, files, arena);
  *pos = in.pos();
  return ok;
}

Status decode_items(std::string_view block, const uint8_t* region, uint64_t region_bytes,
                    std::vector<Item>* out, const std::string& what, const FileRanges* files,
                    const ArenaView* arena) {
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
    if (!decode(in, region, region_bytes, &out->back(), &error, files, arena)) {
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
