// Tests of io/transport/shm_shard.h: a broadcast shard copied once into shared memory and
// mapped read-only by several processes; damaged images are refused.
#include "io/transport/shm_shard.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "channel_harness.h"
#include "runtime/codec.h"

namespace shardyard::io::testing {
namespace {

using ShmShardTest = ShmTest;  // checks that nothing is left behind

// A month of records loaded as one buffer, and windows over it: each item views 4096
// bytes, one every 1024 (overlapping, as windows do), plus a small field of its own.
SharedShard month(size_t windows, uint32_t shard = 12) {
  auto buf = std::make_shared<std::string>(1024 * windows + 3072, '\0');
  for (size_t i = 0; i < buf->size(); ++i) (*buf)[i] = static_cast<char>(((i * 131) >> 3) + shard);
  SharedShard s;
  s.shard = shard;
  s.first_position = 5000;
  s.bytes = buf->size();
  for (size_t i = 0; i < windows; ++i) {
    Item it;
    it.id = 90000 + i;
    it.shard = shard;
    it.key = "month-" + std::to_string(shard) + ".bin@" + std::to_string(i);
    it.owner = buf;
    it.set_field_view("bin", reinterpret_cast<const uint8_t*>(buf->data()) + 1024 * i, 4096);
    it.set_field("idx", std::to_string(i));
    s.items.push_back(std::move(it));
  }
  return s;
}

std::string check_view(const ShmShardView& v, const SharedShard& want) {
  if (v.shard() != want.shard || v.first_position() != want.first_position ||
      v.bytes() != want.bytes || v.size() != want.items.size())
    return "header differs";
  for (size_t i = 0; i < want.items.size(); ++i) {
    auto got = v.item(i);
    if (!got.is_ok()) return got.status().to_string();
    const Item& w = want.items[i];
    if (got->key != w.key || got->id != w.id || got->fields.size() != w.fields.size())
      return "item " + std::to_string(i) + " differs";
    for (size_t f = 0; f < w.fields.size(); ++f)
      if (got->fields[f].name != w.fields[f].name || got->fields[f].view() != w.fields[f].view())
        return "item " + std::to_string(i) + " field " + w.fields[f].name + " differs";
  }
  return "";
}

TEST_F(ShmShardTest, ABroadcastShardRoundTripsWithOverlappingWindowsCopiedOnce) {
  const SharedShard shard = month(1000);
  SegmentOptions o;
  o.dir = dir_;
  auto image = ShmShardImage::create(shard, o);
  ASSERT_TRUE(image.is_ok()) << image.status().to_string();
  // The windows share one copy of the month: about 1 MiB, not 1000 x 4 KiB.
  EXPECT_LT(image->payload_bytes(), 1024u * 1000 + 3072 + 1000 * 64 + 64);
  auto fd = image->share();
  ASSERT_TRUE(fd.is_ok());
  auto view = ShmShardView::open(std::move(*fd), "shard 12");
  ASSERT_TRUE(view.is_ok()) << view.status().to_string();
  EXPECT_EQ(check_view(**view, shard), "");
  auto all = (*view)->materialize();
  ASSERT_TRUE(all.is_ok());
  EXPECT_EQ((*all)->items.size(), 1000u);
  EXPECT_EQ((*all)->items[999].field("bin")->view(), shard.items[999].field("bin")->view());
  EXPECT_EQ((*view)->item(1000).status().code(), StatusCode::kInvalidArgument);
  Item kept = *(*view)->item(3);
  view->reset();
  all->reset();
  image = Status(StatusCode::kCancelled, "dropped");
  EXPECT_EQ(kept.field("bin")->view(), shard.items[3].field("bin")->view())
      << "an item keeps the mapping alive";
}

// W worker processes map one copy: the folder's usage grows by one image, not W, and each
// worker gets a descriptor it can map read-only only.
TEST_F(ShmShardTest, SeveralProcessesMapOneReadOnlyCopy) {
  const SharedShard shard = month(8000);  // about 8 MiB of records
  const uint64_t before = used_bytes(dir_);
  SegmentOptions o;
  o.dir = dir_;
  auto image = ShmShardImage::create(shard, o);
  ASSERT_TRUE(image.is_ok()) << image.status().to_string();
  const uint64_t one = image->segment().size();
  SharedCounter ready;
  std::vector<Ends> ends(3);
  std::vector<Child> workers;
  for (auto& e : ends) {
    e = make_ends();
    workers.push_back(fork_child([&] {
      e.loader = UnixSocket();
      Frame f;
      auto got = e.worker.receive(&f, 10000);
      if (!got.is_ok() || *got != UnixSocket::Received::kFrame || f.fds.size() != 1) return 10;
      auto probe = ShmSegment::adopt(UniqueFd(::fcntl(f.fds[0].get(), F_DUPFD_CLOEXEC, 0)), "p");
      if (!probe.is_ok() || probe->map(ShmSegment::Access::kReadWrite).is_ok()) return 11;
      auto view = ShmShardView::open(std::move(f.fds[0]), "shard 12");
      if (!view.is_ok()) return 12;
      if (!check_view(**view, shard).empty()) return 13;
      ++*ready;
      (void)e.worker.receive(&f, 20000);  // "go", or the test's end
      return check_view(**view, shard).empty() ? 0 : 14;
    }));
    e.worker = UnixSocket();
  }
  for (auto& e : ends) {
    Frame f{1, "shard 12", {}};
    f.fds.push_back(image->share().value());
    ASSERT_TRUE(e.loader.send(f, 5000).is_ok());
  }
  ASSERT_TRUE(eventually([&] { return ready.get() == 3; }));
  if (dir_ != "/dev/shm") {
    EXPECT_GE(used_bytes(dir_) - before, one - 4096);
    EXPECT_LT(used_bytes(dir_) - before, one + one / 2) << "one copy for three processes";
  }
  image = Status(StatusCode::kCancelled, "the loader drops its image");
  for (auto& e : ends) ASSERT_TRUE(e.loader.send({2, "go", {}}, 5000).is_ok());
  for (auto& w : workers) EXPECT_EQ(w.wait(20000), 0) << "the workers read it to the end";
}

uint64_t inode(const ShmSegment& segment) {
  struct stat st {};
  EXPECT_EQ(::fstat(segment.fd(), &st), 0);
  return static_cast<uint64_t>(st.st_ino);
}

// A later shard's image goes into the room of one nobody reads any more, when it fits, and
// a worker that kept its mapping of that segment reads the new shard through it.
TEST_F(ShmShardTest, ALaterImageTakesTheRoomOfAnEarlierOneAndAWorkerItsMapping) {
  SegmentOptions o;
  o.dir = dir_;
  const SharedShard first = month(1000, 12), second = month(1000, 13);
  auto a = ShmShardImage::create(first, o);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  const uint64_t a_inode = inode(a->segment());
  MappedImages worker(3);
  auto view_a = worker.open(a->share().value(), "shard 12");
  ASSERT_TRUE(view_a.is_ok()) << view_a.status().to_string();
  EXPECT_EQ(check_view(**view_a, first), "");
  EXPECT_EQ(worker.reused(), 0u);

  std::vector<ShmImageRoom> rooms;
  rooms.push_back(std::move(*a).take_room());
  auto b = ShmShardImage::create(second, o, &rooms);
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  EXPECT_TRUE(rooms.empty()) << "the room was taken";
  EXPECT_EQ(inode(b->segment()), a_inode) << "the same segment";
  auto view_b = worker.open(b->share().value(), "shard 13");
  ASSERT_TRUE(view_b.is_ok()) << view_b.status().to_string();
  EXPECT_EQ(worker.reused(), 1u) << "the worker's mapping of the segment served again";
  EXPECT_EQ(check_view(**view_b, second), "");

  // A room that cannot hold the image, or one more than a quarter larger, is left.
  rooms.push_back(std::move(*b).take_room());
  auto larger = ShmShardImage::create(month(1300, 14), o, &rooms);
  ASSERT_TRUE(larger.is_ok());
  EXPECT_EQ(rooms.size(), 1u) << "too small for 1300 windows";
  EXPECT_NE(inode(larger->segment()), a_inode);
  auto smaller = ShmShardImage::create(month(500, 15), o, &rooms);
  ASSERT_TRUE(smaller.is_ok());
  EXPECT_EQ(rooms.size(), 1u) << "twice the room 500 windows need";
  auto view_small = worker.open(smaller->share().value(), "shard 15");
  ASSERT_TRUE(view_small.is_ok());
  EXPECT_EQ(check_view(**view_small, month(500, 15)), "");
  EXPECT_EQ(worker.reused(), 1u) << "another segment is mapped anew";
}

TEST_F(ShmShardTest, MappedImagesKeepsTheLastOnesOnly) {
  SegmentOptions o;
  o.dir = dir_;
  auto a = ShmShardImage::create(month(100, 12), o);
  auto b = ShmShardImage::create(month(100, 13), o);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  MappedImages worker(1);
  ASSERT_TRUE(worker.open(a->share().value(), "a").is_ok());
  ASSERT_TRUE(worker.open(a->share().value(), "a").is_ok());
  EXPECT_EQ(worker.reused(), 1u);
  ASSERT_TRUE(worker.open(b->share().value(), "b").is_ok());
  ASSERT_TRUE(worker.open(a->share().value(), "a").is_ok());
  EXPECT_EQ(worker.reused(), 1u) << "a was let go when b came";
  auto view = worker.open(b->share().value(), "b");
  ASSERT_TRUE(view.is_ok());
  EXPECT_EQ(check_view(**view, month(100, 13)), "");
}

// Writes `bytes` into a new segment and opens it as a shard image.
Status open_damaged(const std::string& dir, const std::string& bytes) {
  SegmentOptions o;
  o.dir = dir;
  auto seg = ShmSegment::create(bytes.size(), o);
  if (!seg.is_ok()) return seg.status();
  std::memcpy(seg->map(ShmSegment::Access::kReadWrite).value()->writable_data(), bytes.data(),
              bytes.size());
  auto view = ShmShardView::open(seg->duplicate().value(), "damaged image");
  if (!view.is_ok()) return view.status();
  return (*view)->materialize().status();
}

TEST_F(ShmShardTest, DamagedShardImagesAreRefused) {
  SegmentOptions o;
  o.dir = dir_;
  auto image = ShmShardImage::create(month(10), o);
  ASSERT_TRUE(image.is_ok());
  auto map = image->segment().map(ShmSegment::Access::kReadOnly).value();
  const std::string good(reinterpret_cast<const char*>(map->data()), map->size());
  EXPECT_TRUE(open_damaged(dir_, good).is_ok());
  auto with = [&](size_t at, uint64_t value, int bytes) {
    std::string b = good;
    for (int i = 0; i < bytes; ++i) b[at + i] = static_cast<char>(value >> (8 * i));
    return open_damaged(dir_, b);
  };
  EXPECT_NE(with(0, 'X', 1).message().find("bad magic"), std::string::npos);
  EXPECT_NE(with(8, 9, 4).message().find("shard image version 9"), std::string::npos);
  EXPECT_NE(with(12, 7, 4).message().find("item codec 7"), std::string::npos);
  const size_t items = 40, payload = 56, index = 64, table_bytes = 80;
  for (auto [at, value] : {std::pair<size_t, uint64_t>{items, 1ull << 40},
                           {payload, ~0ull},
                           {index, 8},
                           {table_bytes, 1ull << 33}})
    EXPECT_NE(with(at, value, 8).message().find("regions do not fit"), std::string::npos) << at;
  // An index entry that points past the table.
  const uint64_t index_offset = load_le(good.data() + index, 8);
  Status s = with(index_offset + 8 * 3, 1ull << 30, 8);
  EXPECT_NE(s.message().find("item 3 starts outside the table"), std::string::npos) << s.message();
  EXPECT_NE(open_damaged(dir_, good.substr(0, 50)).message().find("bad magic"), std::string::npos)
      << "shorter than a header";
}

}  // namespace
}  // namespace shardyard::io::testing
