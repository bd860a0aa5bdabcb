// Tests of io/transport/item_codec.h: descriptors round trip, payload layout shares
// overlapping bytes, every kind of damage is refused; and the fuzz seeds stay current.
#include "io/transport/item_codec.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <tuple>

#include "io/transport/shm_frames.h"
#include "io/transport/shm_shard.h"
#include "io/transport/unix_socket.h"
#include "runtime/batch.h"

namespace shardyard::io {
namespace {

Item sample(uint64_t id) {
  Item it;
  it.id = id;
  it.shard = 7;
  it.key = "s" + std::to_string(id);
  it.position = 1000 + id;
  it.worker = 3;
  it.set_field("cls", "1");
  it.set_field("jpg", std::string(5000, static_cast<char>('a' + id % 26)));
  it.set_field("txt", "");
  if (id % 2) it.stage_state = std::make_shared<const std::string>("state" + std::to_string(id));
  if (id % 3 == 0) it.dispatch_state = std::make_shared<const std::string>("dispatch");
  return it;
}

// Lays out and encodes items; returns the region and the descriptor block.
std::pair<std::string, std::string> pack(const std::vector<Item>& items) {
  PayloadPlan plan;
  plan_payload(items.data(), items.size(), 64, &plan);
  std::string region(plan.bytes, '\0');
  copy_payload(plan, reinterpret_cast<uint8_t*>(region.data()));
  ByteWriter w;
  encode_items(items.data(), items.size(), plan, &w);
  return {region, w.out};
}

const uint8_t* u8(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

TEST(ItemCodec, RoundTripsEveryPartOfAnItem) {
  std::vector<Item> items;
  for (uint64_t i = 0; i < 6; ++i) items.push_back(sample(i));
  auto [region, block] = pack(items);
  std::vector<Item> out;
  ASSERT_TRUE(decode_items(block, u8(region), region.size(), &out, "test").is_ok());
  ASSERT_EQ(out.size(), items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const Item &a = items[i], &b = out[i];
    EXPECT_EQ(a.id, b.id);
    EXPECT_EQ(a.shard, b.shard);
    EXPECT_EQ(a.key, b.key);
    EXPECT_EQ(a.position, b.position);
    EXPECT_EQ(a.worker, b.worker);
    EXPECT_EQ(!!a.stage_state, !!b.stage_state);
    if (a.stage_state) {
      EXPECT_EQ(*a.stage_state, *b.stage_state);
    }
    EXPECT_EQ(!!a.dispatch_state, !!b.dispatch_state);
    ASSERT_EQ(a.fields.size(), b.fields.size());
    for (size_t f = 0; f < a.fields.size(); ++f) {
      EXPECT_EQ(a.fields[f].name, b.fields[f].name);
      EXPECT_EQ(a.fields[f].view(), b.fields[f].view());
      EXPECT_GE(b.fields[f].data, u8(region));
      EXPECT_LE(b.fields[f].data + b.fields[f].size, u8(region) + region.size());
      if (b.fields[f].size) {
        EXPECT_EQ((b.fields[f].data - u8(region)) % 64, 0) << "aligned";
      }
    }
    EXPECT_EQ(encoded_item_bytes(a), encoded_item_bytes(b));
  }
  ByteWriter one;
  encode_item(items[1], std::vector<uint64_t>(3, 0).data(), &one);
  EXPECT_EQ(one.out.size(), encoded_item_bytes(items[1]));
}

// What a producer writes straight into shared memory is the block encode_items() makes, to
// the byte, and exactly as long as encoded_items_bytes() says.
TEST(ItemCodec, WriteItemsWritesTheBlockInPlace) {
  std::vector<Item> items;
  for (uint64_t i = 0; i < 7; ++i) items.push_back(sample(i));
  items[4].key = std::string(300, 'k');  // past any short-string buffer
  PayloadPlan plan;
  plan_payload(items.data(), items.size(), 64, &plan);
  ByteWriter w;
  w.out = "prefix";  // encode_items appends
  encode_items(items.data(), items.size(), plan, &w);
  const uint64_t bytes = encoded_items_bytes(items.data(), items.size(), plan);
  ASSERT_EQ(w.out.size(), 6 + bytes);
  std::string room(bytes + 16, 'Z');
  const char* end = write_items(items.data(), items.size(), plan, room.data() + 8);
  EXPECT_EQ(end, room.data() + 8 + bytes);
  EXPECT_EQ(room.substr(8, bytes), w.out.substr(6));
  EXPECT_EQ(room.substr(0, 8), std::string(8, 'Z')) << "nothing written before";
  EXPECT_EQ(room.substr(8 + bytes), std::string(8, 'Z')) << "nor after";
  EXPECT_EQ(encoded_items_bytes(items.data(), 0, plan), 8u) << "version and count";
}

TEST(ItemCodec, OverlappingAndTouchingFieldsShareOneCopy) {
  auto buf = std::make_shared<std::string>(10000, '\0');
  for (size_t i = 0; i < buf->size(); ++i) (*buf)[i] = static_cast<char>(i * 7);
  std::vector<Item> items(40);
  const auto* base = u8(*buf);
  for (size_t i = 0; i < items.size(); ++i) {  // windows of 400 bytes every 100
    items[i].owner = buf;
    items[i].set_field_view("bin", base + 100 * i, 400);
  }
  // Two fields of one item that touch end to start.
  items[0].set_field_view("head", base + 6000, 100);
  items[0].set_field_view("tail", base + 6100, 100);
  PayloadPlan plan;
  plan_payload(items.data(), items.size(), 64, &plan);
  EXPECT_EQ(plan.extents.size(), 2u) << "the windows, and the two fields that touch";
  EXPECT_EQ(plan.bytes, 4352u + 256u);  // 100 * 39 + 400 = 4300 -> 4352; 200 -> 256
  auto [region, block] = pack(items);
  std::vector<Item> out;
  ASSERT_TRUE(decode_items(block, u8(region), region.size(), &out, "windows").is_ok());
  for (size_t i = 0; i < items.size(); ++i) {
    EXPECT_EQ(out[i].field("bin")->view(), items[i].field("bin")->view());
    if (i > 0) {
      EXPECT_EQ(out[i].field("bin")->data - out[i - 1].field("bin")->data, 100);
    }
  }
  EXPECT_EQ(out[0].field("head")->view(), buf->substr(6000, 100));
  EXPECT_EQ(out[0].field("tail")->view(), buf->substr(6100, 100));
}

TEST(ItemCodec, UnsortedSourcesStillLayOutCorrectly) {
  std::vector<Item> items;
  for (uint64_t i = 0; i < 20; ++i) items.push_back(sample(i));
  std::swap(items[3], items[17]);  // sources no longer in address order
  auto [region, block] = pack(items);
  std::vector<Item> out;
  ASSERT_TRUE(decode_items(block, u8(region), region.size(), &out, "t").is_ok());
  for (size_t i = 0; i < items.size(); ++i)
    EXPECT_EQ(out[i].field("jpg")->view(), items[i].field("jpg")->view());
}

TEST(ItemCodec, EveryCutOfABlockIsRefused) {
  std::vector<Item> items{sample(1), sample(2)};
  auto [region, block] = pack(items);
  for (size_t n = 0; n < block.size(); ++n) {
    std::vector<Item> out;
    Status s = decode_items(std::string_view(block).substr(0, n), u8(region), region.size(), &out,
                            "cut block");
    ASSERT_EQ(s.code(), StatusCode::kCorrupt) << n;
    EXPECT_NE(s.message().find("cut block"), std::string::npos);
  }
  std::vector<Item> out;
  EXPECT_NE(decode_items(block + "x", u8(region), region.size(), &out, "t")
                .message()
                .find("1 bytes after the last item"),
            std::string::npos);
}

Status decode_one(const Item& item, const std::vector<uint64_t>& offsets, uint64_t region_bytes,
                  const std::string& prefix = "") {
  ByteWriter w;
  w.u32(kItemCodecVersion);
  w.u32(1);
  encode_item(item, offsets.data(), &w);
  std::string region(region_bytes, '\0');
  std::vector<Item> out;
  return decode_items(prefix.empty() ? w.out : prefix + w.out.substr(prefix.size()), u8(region),
                      region.size(), &out, "damaged");
}

TEST(ItemCodec, RefusesFieldsOutsideTheRegionOutOfOrderOrRepeated) {
  Item it = sample(1);  // cls (1 byte), jpg (5000), txt (0)
  EXPECT_TRUE(decode_one(it, {0, 64, 0}, 5064).is_ok());
  Status s = decode_one(it, {0, 64, 0}, 5063);
  EXPECT_NE(s.message().find("field 'jpg' at 64 + 5000 lies outside the 5063 bytes"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(decode_one(it, {0, ~uint64_t{0} - 10, 0}, 5064).code(), StatusCode::kCorrupt)
      << "offset + size overflows";
  std::swap(it.fields[0], it.fields[1]);
  EXPECT_NE(decode_one(it, {0, 0, 0}, 6000).message().find("out of order or repeated"),
            std::string::npos);
  it.fields[0].name = it.fields[1].name;
  EXPECT_NE(decode_one(it, {0, 0, 0}, 6000).message().find("out of order or repeated"),
            std::string::npos);
}

TEST(ItemCodec, RefusesUnknownVersionsFlagsAndImpossibleCounts) {
  ByteWriter w;
  w.u32(kItemCodecVersion + 1);
  w.u32(0);
  std::vector<Item> out;
  EXPECT_NE(decode_items(w.out, nullptr, 0, &out, "t")
                .message()
                .find("version " + std::to_string(kItemCodecVersion + 1)),
            std::string::npos);
  ByteWriter many;
  many.u32(kItemCodecVersion);
  many.u32(0xffffffff);  // would reserve 4 billion items
  EXPECT_NE(decode_items(many.out, nullptr, 0, &out, "t").message().find("claims 4294967295 items"),
            std::string::npos);
  Item it;
  it.key = "k";
  ByteWriter one;
  encode_item(it, nullptr, &one);
  std::string bytes = one.out;
  bytes[bytes.size() - 1] = 8;  // flags
  ByteWriter block;
  block.u32(kItemCodecVersion);
  block.u32(1);
  EXPECT_NE(
      decode_items(block.out + bytes, nullptr, 0, &out, "t").message().find("unknown flags 8"),
      std::string::npos);
  ByteWriter fields;  // an item claiming 2^32-1 fields
  fields.u32(kItemCodecVersion);
  fields.u32(1);
  fields.u64(1);
  fields.u32(0);
  fields.u64(0);
  fields.u32(0);
  fields.str("k");
  fields.u32(0xffffffff);
  fields.out.append(40, '\0');
  EXPECT_NE(decode_items(fields.out, nullptr, 0, &out, "t").message().find("fields in"),
            std::string::npos);
}

// A "file" of 1 MiB whose bytes say where they are, mapped (here: held) by a FileBytes
// owner as SampleReader holds a mapped range of a tar shard.
struct FakeFile {
  std::shared_ptr<std::string> bytes = [] {
    auto b = std::make_shared<std::string>(1 << 20, '\0');
    for (size_t i = 0; i < b->size(); ++i) (*b)[i] = static_cast<char>((i * 131) >> 8);
    return b;
  }();
  // An owner for bytes [from, from + n) of the file, as source `source`.
  std::shared_ptr<const void> owner(uint32_t source, uint64_t from, uint64_t n) const {
    return file_bytes_owner(FileBytes{bytes, u8(*bytes) + from, n, source, from, {}});
  }
  const uint8_t* at(uint64_t offset) const { return u8(*bytes) + offset; }
};

// A reader's FileRanges over the same file, counting what it maps.
struct Ranges {
  const FakeFile& file;
  std::vector<std::tuple<uint32_t, uint64_t, uint64_t>> calls;
  FileRanges callback() {
    return [this](uint32_t source, uint64_t offset, uint64_t size) -> Result<FileView> {
      calls.emplace_back(source, offset, size);
      if (source == 9) return io_error("shard nine: no such file");
      if (offset + size > file.bytes->size()) return corrupt("past the end");
      return FileView{file.at(offset), std::make_shared<int>(1), nullptr};
    };
  }
};

TEST(ItemCodec, LargeFieldsOfAMappedFileCrossAsFileRanges) {
  FakeFile file;
  std::vector<Item> items(3);
  for (size_t i = 0; i < items.size(); ++i) {
    Item& it = items[i];
    it.id = i;
    it.key = "k" + std::to_string(i);
    const uint64_t from = 200000 * i + 4096;  // the item's range of the file
    it.owner = file.owner(3, from, 150000);
    it.set_field_view("big", file.at(from + 512), 100000);  // in the file: by range
    it.set_field_view("cls", file.at(from + 100512), 4);    // small: copied
  }
  items[1].set_field("made", std::string(70000, 'm'));      // a stage's bytes: copied
  items[2].set_field_view("past", file.at(900000), 80000);  // outside the owner's range
  PayloadPlan plan;
  plan_payload(items.data(), items.size(), 64, &plan, 65536);
  ASSERT_EQ(plan.item_sources, (std::vector<uint32_t>{3, 3, 3}));
  EXPECT_EQ(plan.field_places,
            (std::vector<uint8_t>{kPlaceFile, kPlaceRegion, kPlaceFile, kPlaceRegion, kPlaceRegion,
                                  kPlaceFile, kPlaceRegion, kPlaceRegion}));
  EXPECT_EQ(plan.field_offsets[0], 4096u + 512u) << "the place in the file";
  EXPECT_LT(plan.bytes, 160000u) << "only 'made', 'past' and the small fields are copied";
  EXPECT_EQ(payload_upper_bound(items[0], 64, 65536), 64u);
  EXPECT_EQ(payload_upper_bound(items[0], 64), 100096u);
  std::string region(plan.bytes, '\0');
  copy_payload(plan, reinterpret_cast<uint8_t*>(region.data()));
  ByteWriter w;
  encode_items(items.data(), items.size(), plan, &w);

  Ranges ranges{file, {}};
  const FileRanges files = ranges.callback();
  std::vector<Item> out;
  ASSERT_TRUE(decode_items(w.out, u8(region), region.size(), &out, "t", &files).is_ok());
  ASSERT_EQ(out.size(), 3u);
  ASSERT_EQ(ranges.calls.size(), 3u) << "one mapping per item";
  EXPECT_EQ(ranges.calls[0], std::make_tuple(3u, uint64_t{4608}, uint64_t{100000}));
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(out[i].fields.size(), items[i].fields.size());
    for (size_t f = 0; f < items[i].fields.size(); ++f)
      EXPECT_EQ(out[i].fields[f].view(), items[i].fields[f].view()) << i << " " << f;
    EXPECT_EQ(out[i].owner, nullptr) << "fields in the region too: the caller adds its owner";
    EXPECT_EQ(out[i].owners.size(), 1u) << "the mapping";
  }
  EXPECT_EQ(out[0].field("big")->data, file.at(4608)) << "a view of the reader's mapping";
  EXPECT_EQ(ranges.calls[2], std::make_tuple(3u, uint64_t{404608}, uint64_t{100000}))
      << "'past' lies outside the owner's range: copied";

  // An item whose bytes all lie in the file holds the mapping as its owner.
  Item only;
  only.key = "only";
  only.owner = file.owner(0, 0, 300000);
  only.set_field_view("big", file.at(1000), 100000);
  only.set_field_view("big2", file.at(200000), 100000);
  plan_payload(&only, 1, 64, &plan, 65536);
  EXPECT_EQ(plan.bytes, 0u);
  ByteWriter one;
  encode_items(&only, 1, plan, &one);
  EXPECT_EQ(one.out.size(), 8 + encoded_item_bytes(only, true));
  out.clear();
  ranges.calls.clear();
  ASSERT_TRUE(decode_items(one.out, nullptr, 0, &out, "t", &files).is_ok());
  EXPECT_EQ(ranges.calls,
            (std::vector<std::tuple<uint32_t, uint64_t, uint64_t>>{{0, 1000, 299000}}))
      << "one span over both fields";
  EXPECT_NE(out[0].owner, nullptr);
  EXPECT_TRUE(out[0].owners.empty());
  EXPECT_EQ(out[0].fields[0].view(), only.fields[0].view());
  EXPECT_EQ(out[0].fields[1].view(), only.fields[1].view());

  // Without a threshold (a broadcast image, a reader without FileRanges) all is copied.
  plan_payload(&only, 1, 64, &plan);
  EXPECT_EQ(plan.item_sources[0], kNoSource);
  EXPECT_EQ(plan.bytes, 2 * 100032u);
}

// The same file read through a FileReader, counting its reads.
struct FakeFileReader : FileReader {
  explicit FakeFileReader(const FakeFile& file) : file(file) {}
  Status read(uint64_t offset, uint8_t* dst, size_t n) const override {
    ++reads;
    if (offset > file.bytes->size() || n > file.bytes->size() - offset)
      return corrupt("past the end");
    std::memcpy(dst, file.at(offset), n);
    return Status::ok();
  }
  const FakeFile& file;
  mutable int reads = 0;
};

// Unread fields (a worker that leaves large members for the batch to read) always cross
// as file ranges, whatever their size; a loader whose FileRanges gives a reader instead of
// a mapping keeps them unread, and build_batch reads them from the file.
TEST(ItemCodec, UnreadFieldsCrossAsFileRangesAndStayUnreadWithAReader) {
  FakeFile file;
  auto reader = std::make_shared<FakeFileReader>(file);
  std::vector<Item> items(2);
  for (size_t i = 0; i < items.size(); ++i) {
    Item& it = items[i];
    it.id = i;
    it.key = "k" + std::to_string(i);
    FileBytes bytes;
    bytes.source = 2;
    bytes.reader = reader;
    it.owner = file_bytes_owner(std::move(bytes));
    it.put_field(Field{"bin", nullptr, 1000 + 500 * i, 7000 + 300000 * i});  // unread
    it.set_field("cls", std::to_string(i));                                  // copied
  }
  PayloadPlan plan;
  plan_payload(items.data(), items.size(), 64, &plan, 65536);
  EXPECT_EQ(plan.item_sources, (std::vector<uint32_t>{2, 2}));
  EXPECT_EQ(plan.field_places,
            (std::vector<uint8_t>{kPlaceFile, kPlaceRegion, kPlaceFile, kPlaceRegion}));
  EXPECT_EQ(plan.field_offsets[0], 7000u);
  EXPECT_EQ(plan.field_offsets[2], 307000u);
  EXPECT_EQ(payload_upper_bound(items[0], 64, 65536), 64u) << "only 'cls' takes room";
  std::string region(plan.bytes, '\0');
  copy_payload(plan, reinterpret_cast<uint8_t*>(region.data()));
  ByteWriter w;
  encode_items(items.data(), items.size(), plan, &w);

  std::vector<std::tuple<uint32_t, uint64_t, uint64_t>> calls;
  const FileRanges files = [&](uint32_t source, uint64_t offset,
                               uint64_t size) -> Result<FileView> {
    calls.emplace_back(source, offset, size);
    return FileView{nullptr, nullptr, reader};
  };
  std::vector<Item> out;
  ASSERT_TRUE(decode_items(w.out, u8(region), region.size(), &out, "t", &files).is_ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(calls[1], std::make_tuple(2u, uint64_t{307000}, uint64_t{1500}));
  const Field* bin = out[1].field("bin");
  ASSERT_NE(bin, nullptr);
  EXPECT_TRUE(bin->unread());
  EXPECT_EQ(bin->file_offset, 307000u);
  EXPECT_EQ(bin->size, 1500u);
  EXPECT_EQ(unread_reader(out[1]), reader.get());
  EXPECT_EQ(reader->reads, 0) << "nothing is read before the batch";
  out[0].owner = out[1].owner = std::make_shared<std::string>(region);  // the region's owner
  auto pool = BufferPool::create();
  auto batch = build_batch(out, 0, 0, 0, *pool);
  ASSERT_TRUE(batch.is_ok()) << batch.status().to_string();
  EXPECT_EQ(reader->reads, 2);
  EXPECT_EQ(batch->field("bin")->value(1),
            std::string(reinterpret_cast<const char*>(file.at(307000)), 1500));
  EXPECT_EQ(batch->field("cls")->value(1), "1");

  // A FileRanges that gives neither bytes nor a reader is refused.
  const FileRanges empty = [](uint32_t, uint64_t, uint64_t) -> Result<FileView> {
    return FileView{};
  };
  out.clear();
  EXPECT_EQ(decode_items(w.out, u8(region), region.size(), &out, "t", &empty).code(),
            StatusCode::kCorrupt);
}

TEST(ItemCodec, OnlyAFileBytesOwnerMakesFileRanges) {
  FakeFile file;
  Item it;
  it.key = "k";
  it.owner = file.bytes;  // the same bytes, but not said to be a file's
  it.set_field_view("big", file.at(0), 100000);
  PayloadPlan plan;
  plan_payload(&it, 1, 64, &plan, 1);
  EXPECT_EQ(plan.item_sources[0], kNoSource);
  EXPECT_EQ(file_bytes_of(it.owner), nullptr);
  it.owner = file.owner(1, 0, 100000);
  ASSERT_NE(file_bytes_of(it.owner), nullptr);
  EXPECT_EQ(file_bytes_of(it.owner)->source, 1u);
  plan_payload(&it, 1, 64, &plan, 1);
  EXPECT_EQ(plan.item_sources[0], 1u);
  // A pointer that shares the owner but points elsewhere still finds the FileBytes.
  static const int elsewhere = 0;
  const std::shared_ptr<const void> aliased(it.owner, &elsewhere);
  ASSERT_EQ(file_bytes_of(aliased), file_bytes_of(it.owner));
  // A stage that replaces the owner (and so may free the mapping) turns it off.
  it.owner = std::make_shared<std::string>("decoded");
  plan_payload(&it, 1, 64, &plan, 1);
  EXPECT_EQ(plan.item_sources[0], kNoSource);
}

TEST(ItemCodec, FileRangesAreRefusedWithoutAReaderAndWhenDamaged) {
  FakeFile file;
  Item it;
  it.key = "k";
  it.owner = file.owner(2, 0, 200000);
  it.set_field_view("big", file.at(100), 100000);
  PayloadPlan plan;
  plan_payload(&it, 1, 64, &plan, 1);
  ByteWriter w;
  encode_items(&it, 1, plan, &w);
  std::vector<Item> out;
  Status s = decode_items(w.out, nullptr, 0, &out, "t");
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_NE(s.message().find("file range of source 2, where only the region is allowed"),
            std::string::npos)
      << s.message();
  // What the reader's callback says, when it cannot map.
  Ranges ranges{file, {}};
  const FileRanges files = ranges.callback();
  it.owner = file.owner(9, 0, 200000);
  plan_payload(&it, 1, 64, &plan, 1);
  ByteWriter nine;
  encode_items(&it, 1, plan, &nine);
  s = decode_items(nine.out, nullptr, 0, &out, "t", &files);
  EXPECT_NE(s.message().find("shard nine: no such file"), std::string::npos) << s.message();

  // Damage: every byte of the descriptor's file parts changed one way or another is
  // refused or decodes to bytes of the file, never to a view past it.
  const size_t place_at = 4 + 4 + 8 + 4 + 8 + 4 + 4 + 1 + 4 + 4 + 3;  // after the name "big"
  ASSERT_EQ(w.out[place_at], static_cast<char>(kPlaceFile));
  auto refused = [&](std::string bytes, const std::string& why) {
    out.clear();
    Status st = decode_items(bytes, file.at(0), file.bytes->size(), &out, "t", &files);
    EXPECT_EQ(st.code(), StatusCode::kCorrupt) << why;
    EXPECT_NE(st.message().find(why), std::string::npos) << st.message();
  };
  std::string b = w.out;
  b[place_at] = 3;
  refused(b, "unknown place 3");
  b[place_at] = kPlaceArena;
  refused(b, "lies in a data arena, where only the region is allowed");
  b = w.out;
  b[place_at] = kPlaceRegion;
  refused(b, "a source, and no field in a file range");
  b = w.out;
  std::memset(&b[place_at + 9], 0, 8);  // size 0
  refused(b, "names the file range");
  b = w.out;
  std::memset(&b[place_at + 1], 0xff, 8);  // offset + size overflows
  refused(b, "names the file range");
  b = w.out;
  b[place_at + 17] = 0;  // flags without the source
  b.resize(b.size() - 4);
  refused(b, "fields in a file range, and no source");
  b = w.out;
  std::memset(&b[place_at + 1], 0, 8);
  b[place_at + 4] = 0x10;  // offset 2^24: past the callback's file
  refused(b, "past the end");
}

// The seed corpus of transport_fuzz (tests/fuzz/transport_corpus): one input per decoder,
// made by the encoders of this build. SY_UPDATE_FUZZ_CORPUS=1 rewrites the files.
// Fields read into a producer's data arena are named by their place there, each span once
// per block; fields of another arena, outside the chunk or made by a stage are copied. The
// reader views its own mapping of the arena, and refuses such fields without one.
TEST(ItemCodec, FieldsInTheDataArenaAreNamedByTheirPlaceThere) {
  std::string arena(1 << 16, '\0');
  for (size_t i = 0; i < arena.size(); ++i) arena[i] = static_cast<char>(i * 7);
  uint8_t* ring = reinterpret_cast<uint8_t*>(arena.data());
  int done = 0;
  const int kArena = 0, kOther = 0;
  auto chunk = [&](const void* id, uint64_t offset, uint64_t size, uint32_t slot) {
    return arena_bytes_owner(ArenaBytes{id, ring + offset, size, offset, slot}, [&] { ++done; });
  };
  auto first = chunk(&kArena, 4096, 8192, 5), second = chunk(&kArena, 16384, 4096, 9);
  std::vector<Item> items(4);
  for (size_t i = 0; i < items.size(); ++i) {
    items[i].id = i;
    items[i].key = "k" + std::to_string(i);
  }
  items[0].owner = first;
  items[0].set_field_view("jpg", ring + 4096 + 100, 3000);
  items[0].set_field_view("cls", ring + 4096 + 3100, 3);
  items[1].owner = first;
  items[1].set_field_view("jpg", ring + 4096 + 5000, 3000);
  items[1].set_field("made", "a stage's bytes");
  items[2].owner = second;
  items[2].set_field_view("jpg", ring + 16384, 4096);
  items[2].set_field_view("past", ring + 16384 + 4000, 200);  // beyond the chunk: copied
  items[3].owner = chunk(&kOther, 30000, 1000, 1);            // another arena's: copied
  items[3].set_field_view("jpg", ring + 30000, 1000);
  EXPECT_EQ(arena_bytes_of(items[3].owner)->arena, &kOther);
  PayloadPlan plan;
  plan_payload(items.data(), items.size(), 64, &plan, 0, &kArena);
  EXPECT_EQ(plan.field_places,
            (std::vector<uint8_t>{kPlaceArena, kPlaceArena, kPlaceArena, kPlaceRegion, kPlaceArena,
                                  kPlaceRegion, kPlaceRegion}));
  EXPECT_EQ(plan.field_offsets[1], 4196u) << "'jpg' of item 0: its place in the arena";
  EXPECT_EQ(plan.arena_slots, (std::vector<uint32_t>{5, 9})) << "each span once";
  EXPECT_EQ(payload_upper_bound(items[0], 64, 0, &kArena), 0u);
  EXPECT_EQ(payload_upper_bound(items[0], 64), 3008u + 64u);
  std::string region(plan.bytes, '\0');
  copy_payload(plan, reinterpret_cast<uint8_t*>(region.data()));
  ByteWriter w;
  encode_items(items.data(), items.size(), plan, &w);

  const ArenaView view{ring, arena.size()};
  std::vector<Item> out;
  Status s = decode_items(w.out, u8(region), region.size(), &out, "t", nullptr, &view);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  ASSERT_EQ(out.size(), items.size());
  for (size_t i = 0; i < items.size(); ++i)
    for (size_t f = 0; f < items[i].fields.size(); ++f)
      EXPECT_EQ(out[i].fields[f].view(), items[i].fields[f].view()) << i << " " << f;
  EXPECT_EQ(out[0].field("jpg")->data, ring + 4196) << "a view of the reader's mapping";
  EXPECT_NE(out[3].field("jpg")->data, ring + 30000) << "copied into the region";
  out.clear();
  EXPECT_NE(decode_items(w.out, u8(region), region.size(), &out, "t")
                .message()
                .find("lies in a data arena"),
            std::string::npos);
  const ArenaView small{ring, 8192};
  EXPECT_NE(decode_items(w.out, u8(region), region.size(), &out, "t", nullptr, &small)
                .message()
                .find("outside the 8192 bytes of its data arena"),
            std::string::npos);

  items.clear();
  EXPECT_EQ(done, 1) << "the other arena's chunk had item 3 alone";
  first.reset();
  EXPECT_EQ(done, 2);
  second.reset();
  EXPECT_EQ(done, 3) << "each chunk's `done` runs once, with its last holder";
}

TEST(ItemCodec, AnOwnerIsKnownByItsControlBlockNotOnlyItsPointer) {
  // plan_payload() looks an owner's kind up once for consecutive items of one owner. An
  // owner that aliases the same pointer with another control block (not an ArenaBytes
  // deleter) is another owner: its fields are copied, not named in the arena.
  std::string arena(8192, 'a');
  uint8_t* ring = reinterpret_cast<uint8_t*>(arena.data());
  const int kArena = 0;
  auto chunk = arena_bytes_owner(ArenaBytes{&kArena, ring, 8192, 0, 3}, {});
  const std::shared_ptr<const void> alias(std::make_shared<int>(0), chunk.get());
  std::vector<Item> items(3);
  items[0].owner = chunk;
  items[0].set_field_view("bin", ring, 100);
  items[1].owner = alias;
  items[1].set_field_view("bin", ring + 200, 100);
  items[2].owner = chunk;
  items[2].set_field_view("bin", ring + 400, 100);
  PayloadPlan plan;
  plan_payload(items.data(), items.size(), 64, &plan, 0, &kArena);
  EXPECT_EQ(plan.field_places, (std::vector<uint8_t>{kPlaceArena, kPlaceRegion, kPlaceArena}));
  EXPECT_EQ(plan.field_offsets[2], 400u);
  EXPECT_EQ(plan.bytes, 128u) << "item 1's field alone is copied";
  EXPECT_EQ(plan.arena_slots, (std::vector<uint32_t>{3}));
}

std::vector<std::pair<std::string, std::string>> fuzz_seeds() {
  // Fields view one buffer in address order, so the layout does not depend on the heap.
  static const std::string buf(16384, 'v');
  auto seed_item = [&](uint64_t id, size_t at) {
    Item it = sample(id);
    it.fields.clear();
    it.set_field_view("cls", reinterpret_cast<const uint8_t*>(buf.data()) + at, 1);
    it.set_field_view("jpg", reinterpret_cast<const uint8_t*>(buf.data()) + at + 64, 3000);
    return it;
  };
  std::vector<Item> items{seed_item(1, 0), seed_item(2, 4096), seed_item(3, 8192)};
  PayloadPlan plan;
  plan_payload(items.data(), items.size(), 64, &plan);
  ByteWriter block;
  encode_items(items.data(), items.size(), plan, &block);
  // The same items with their large fields named by file range (source 1).
  for (auto& it : items)
    it.owner = file_bytes_owner(FileBytes{nullptr, u8(buf), buf.size(), 1, 0, {}});
  plan_payload(items.data(), items.size(), 64, &plan, 1024);
  ByteWriter file_block;
  encode_items(items.data(), items.size(), plan, &file_block);
  // The same items read into a data arena (the buffer stands for it), one span.
  static const int kSeedArena = 0;
  for (auto& it : items)
    it.owner = arena_bytes_owner(ArenaBytes{&kSeedArena, u8(buf), buf.size(), 0, 3}, nullptr);
  plan_payload(items.data(), items.size(), 64, &plan, 0, &kSeedArena);
  ByteWriter arena_block;
  encode_items(items.data(), items.size(), plan, &arena_block);
  HelloFrame hello;
  hello.capacity = 1 << 20;
  hello.packets_in_flight = 4;
  hello.max_run_bytes = 1 << 18;
  hello.channel = "r0/e1/w2";
  hello.producer = "worker 2";
  hello.file_field_bytes = 65536;
  hello.data_capacity = 4 << 20;
  RunFrame run{4096, 8192, 6144, 2000, 3, RunFrame::kLastRun, {3, 17}};
  SharedShard shard;
  shard.shard = 5;
  shard.first_position = 100;
  shard.items = {seed_item(4, 0), seed_item(5, 1000)};
  shard.bytes = 10002;
  std::string image;
  auto img = ShmShardImage::create(shard, SegmentOptions{"/proc", "", "seed"});  // a memfd
  if (img.is_ok()) {
    auto map = img->segment().map(ShmSegment::Access::kReadOnly);
    if (map.is_ok()) image.assign(reinterpret_cast<const char*>((*map)->data()), (*map)->size());
  }
  ByteWriter frame;
  frame.u32(kFrameMagic);
  frame.u32(kFrameVersion | (uint32_t{kRun} << 16));
  frame.u32(static_cast<uint32_t>(encode(run).size()));
  return {{"items", '\0' + block.out},
          {"items_file", '\0' + file_block.out},
          {"items_arena", '\0' + arena_block.out},
          {"hello", '\1' + encode(hello)},
          {"hello_ack", '\2' + encode(HelloAckFrame{kShmProtocolVersion, 1234})},
          {"run", '\3' + encode(run)},
          {"finish", '\4' + encode(finish_frame(io_error("disk full at /data/a.tar")))},
          {"socket_frame", '\5' + frame.out + encode(run)},
          {"shard_image", '\6' + image}};
}

TEST(ItemCodec, FuzzSeedsAreWhatTheEncodersWrite) {
  const std::string dir = std::string(SY_SOURCE_DIR) + "/tests/fuzz/transport_corpus/";
  const bool update = std::getenv("SY_UPDATE_FUZZ_CORPUS") != nullptr;
  for (const auto& [name, bytes] : fuzz_seeds()) {
    if (update) std::ofstream(dir + name, std::ios::binary) << bytes;
    std::ifstream in(dir + name, std::ios::binary);
    std::stringstream got;
    got << in.rdbuf();
    EXPECT_TRUE(got.str() == bytes)
        << dir + name << " is stale: rerun this test with SY_UPDATE_FUZZ_CORPUS=1";
  }
}

}  // namespace
}  // namespace shardyard::io
