#include "io/transport/shm_shard.h"

#include <cstring>
#include <optional>

#include "io/transport/item_codec.h"
#include "runtime/codec.h"

namespace shardyard::io {

namespace {

constexpr char kShardMagic[8] = {'S', 'Y', 'S', 'H', 'A', 'R', 'D', '1'};
constexpr uint64_t kPage = 4096;
constexpr uint64_t kHeaderBytes = 88;

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace

Result<ShmShardImage> ShmShardImage::create(const SharedShard& shard, const SegmentOptions& options,
                                            std::vector<ShmImageRoom>* rooms) {
  PayloadPlan plan;
  plan_payload(shard.items.data(), shard.items.size(), 64, &plan);
  ByteWriter table;
  std::string index;
  index.reserve(shard.items.size() * 8);
  size_t field = 0;
  for (const Item& item : shard.items) {
    const uint64_t at = table.out.size();
    for (int i = 0; i < 8; ++i) index.push_back(static_cast<char>((at >> (8 * i)) & 0xff));
    encode_item(item, plan.field_offsets.data() + field, &table);
    field += item.fields.size();
  }
  const uint64_t payload_offset = kPage;
  const uint64_t index_offset = align_up(payload_offset + plan.bytes, 64);
  const uint64_t table_offset = index_offset + index.size();
  const uint64_t size = table_offset + table.out.size();

  ByteWriter h;
  h.out.append(kShardMagic, 8);
  h.u32(kShardImageVersion);
  h.u32(kItemCodecVersion);
  h.u32(shard.shard);
  h.u32(0);
  for (uint64_t v :
       {shard.first_position, shard.bytes, uint64_t{shard.items.size()}, payload_offset, plan.bytes,
        index_offset, table_offset, uint64_t{table.out.size()}})
    h.u64(v);

  std::optional<ShmImageRoom> room;
  if (rooms != nullptr) {
    for (size_t i = rooms->size(); i-- > 0;) {
      const uint64_t have = (*rooms)[i].segment.size();
      if (have < size || have - size > size / 4) continue;
      room.emplace(std::move((*rooms)[i]));
      rooms->erase(rooms->begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  }
  if (!room) {
    SY_ASSIGN_OR_RETURN(ShmSegment segment, ShmSegment::create(size, options));
    SY_ASSIGN_OR_RETURN(auto map, segment.map(ShmSegment::Access::kReadWrite));
    room.emplace(ShmImageRoom{std::move(segment), std::move(map)});
  }
  uint8_t* p = room->map->writable_data();
  std::memcpy(p, h.out.data(), h.out.size());
  copy_payload(plan, p + payload_offset);
  std::memcpy(p + index_offset, index.data(), index.size());
  std::memcpy(p + table_offset, table.out.data(), table.out.size());
  return ShmShardImage(std::move(*room), plan.bytes);
}

Result<std::shared_ptr<const ShmShardView>> ShmShardView::open(UniqueFd fd,
                                                               const std::string& what) {
  SY_ASSIGN_OR_RETURN(ShmSegment segment, ShmSegment::adopt(std::move(fd), what));
  SY_ASSIGN_OR_RETURN(auto map, segment.map(ShmSegment::Access::kReadOnly));
  return open(std::move(map), what);
}

Result<std::shared_ptr<const ShmShardView>> ShmShardView::open(std::shared_ptr<ShmMapping> map,
                                                               const std::string& what) {
  std::shared_ptr<ShmShardView> v(new ShmShardView());
  v->what_ = what;
  v->map_ = std::move(map);
  const uint64_t size = v->map_->size();
  const auto* p = reinterpret_cast<const char*>(v->map_->data());
  if (size < kHeaderBytes || std::memcmp(p, kShardMagic, 8) != 0)
    return corrupt(what + ": not a shardyard broadcast shard image (bad magic)");
  ByteReader in(std::string_view(p + 8, kHeaderBytes - 8));
  const uint32_t version = in.u32(), codec = in.u32();
  v->shard_ = in.u32();
  const uint32_t reserved = in.u32();
  v->first_position_ = in.u64();
  v->bytes_ = in.u64();
  v->items_ = in.u64();
  v->payload_offset_ = in.u64();
  v->payload_bytes_ = in.u64();
  v->index_offset_ = in.u64();
  v->table_offset_ = in.u64();
  v->table_bytes_ = in.u64();
  if (version != kShardImageVersion || codec != kItemCodecVersion || reserved != 0)
    return corrupt(what + ": shard image version " + std::to_string(version) + ", item codec " +
                   std::to_string(codec) + "; this build makes " +
                   std::to_string(kShardImageVersion) + " and " +
                   std::to_string(kItemCodecVersion) + " (every process must run the same build)");
  // Each region starts where the one before ends at the latest and ends inside the segment.
  const bool fits = v->payload_offset_ >= kHeaderBytes && v->payload_offset_ <= size &&
                    v->payload_bytes_ <= size - v->payload_offset_ &&
                    v->index_offset_ >= v->payload_offset_ + v->payload_bytes_ &&
                    v->index_offset_ <= size && v->items_ <= (size - v->index_offset_) / 8 &&
                    v->table_offset_ >= v->index_offset_ + v->items_ * 8 &&
                    v->table_offset_ <= size && v->table_bytes_ <= size - v->table_offset_;
  if (!fits)
    return corrupt(what + ": the shard image's regions do not fit its " + std::to_string(size) +
                   " bytes");
  return std::shared_ptr<const ShmShardView>(std::move(v));
}

Result<Item> ShmShardView::item(uint64_t index) const {
  if (index >= items_)
    return invalid_argument(what_ + ": item " + std::to_string(index) + " of " +
                            std::to_string(items_));
  const auto* p = reinterpret_cast<const char*>(map_->data());
  const uint64_t at = load_le(p + index_offset_ + index * 8, 8);
  if (at >= table_bytes_)
    return corrupt(what_ + ": item " + std::to_string(index) + " starts outside the table");
  Item item;
  std::string error;
  size_t pos = at;
  if (!decode_item(std::string_view(p + table_offset_, table_bytes_), &pos,
                   map_->data() + payload_offset_, payload_bytes_, &item, &error))
    return corrupt(what_ + ": item " + std::to_string(index) + ": " + error);
  item.owner = shared_from_this();
  return item;
}

std::shared_ptr<const SharedShard> ShmShardView::lazy_shard() const {
  auto shard = std::make_shared<SharedShard>();
  shard->shard = shard_;
  shard->first_position = first_position_;
  shard->bytes = bytes_;
  shard->lazy = shared_from_this();
  return shard;
}

Result<std::shared_ptr<const SharedShard>> ShmShardView::materialize() const {
  auto shard = std::make_shared<SharedShard>();
  shard->shard = shard_;
  shard->first_position = first_position_;
  shard->bytes = bytes_;
  shard->items.reserve(items_);
  for (uint64_t i = 0; i < items_; ++i) {
    SY_ASSIGN_OR_RETURN(Item item, this->item(i));
    shard->items.push_back(std::move(item));
  }
  return std::shared_ptr<const SharedShard>(std::move(shard));
}

Result<std::shared_ptr<const ShmShardView>> MappedImages::open(UniqueFd fd,
                                                               const std::string& what) {
  // A new image is kept only once it opens; the view opened to check it is the answer.
  std::shared_ptr<const ShmShardView> fresh;
  SY_ASSIGN_OR_RETURN(
      auto mapping,
      recent_.get(
          std::move(fd),
          // The same segment no longer the same size is not the file it was: mapped anew.
          [](const Mapping& m, uint64_t size) { return m.segment.size() == size; },
          [&](UniqueFd f) -> Result<std::shared_ptr<Mapping>> {
            SY_ASSIGN_OR_RETURN(ShmSegment segment, ShmSegment::adopt(std::move(f), what));
            SY_ASSIGN_OR_RETURN(auto map, segment.map(ShmSegment::Access::kReadOnly));
            SY_ASSIGN_OR_RETURN(fresh, ShmShardView::open(map, what));
            return std::make_shared<Mapping>(Mapping{std::move(segment), std::move(map)});
          }));
  if (fresh) return fresh;
  return ShmShardView::open(mapping->map, what);
}

}  // namespace shardyard::io
