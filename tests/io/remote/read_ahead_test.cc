// Tests of io/remote/read_ahead.h on an in-memory file that counts (and can fail) its reads.
#include "io/remote/read_ahead.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace shardyard::io {
namespace {

class CountingFile : public RandomAccessFile {
 public:
  explicit CountingFile(size_t size) : data_(size, '\0'), uri_("mem://file") {
    for (size_t i = 0; i < size; ++i) data_[i] = static_cast<char>((i * 131) ^ (i >> 9));
  }
  Result<size_t> read_at(uint64_t offset, void* dst, size_t n) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      reads_.emplace_back(offset, n);
      if (fail_at_ != UINT64_MAX && offset <= fail_at_ && fail_at_ < offset + n)
        return io_error("injected failure at " + std::to_string(fail_at_));
    }
    if (offset >= data_.size()) return size_t{0};
    size_t take = std::min<uint64_t>(n, data_.size() - offset);
    std::memcpy(dst, data_.data() + offset, take);
    return take;
  }
  uint64_t size() const override { return data_.size(); }
  const std::string& uri() const override { return uri_; }

  std::vector<std::pair<uint64_t, size_t>> reads() {
    std::lock_guard<std::mutex> lock(mu_);
    return reads_;
  }
  void fail_at(uint64_t at) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_at_ = at;
  }
  const std::string& bytes() const { return data_; }

 private:
  std::string data_;
  std::string uri_;
  std::mutex mu_;
  std::vector<std::pair<uint64_t, size_t>> reads_;
  uint64_t fail_at_ = UINT64_MAX;
};

ReadAheadOptions small_blocks() {
  ReadAheadOptions o;
  o.block_bytes = 64 << 10;
  o.initial_block_bytes = 16 << 10;
  o.readahead_blocks = 2;
  o.max_cached_bytes = 6 * (64 << 10);
  return o;
}

void expect_bytes(RandomAccessFile& f, const CountingFile& base, uint64_t off, size_t n) {
  std::string got(n, '\0');
  auto r = f.read_at(off, got.data(), n);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  size_t want = off >= base.size() ? 0 : std::min<uint64_t>(n, base.size() - off);
  ASSERT_EQ(*r, want);
  ASSERT_EQ(got.substr(0, want), base.bytes().substr(off, want)) << "at " << off;
}

TEST(ReadAhead, SmallSequentialReadsBecomeFewLargeReads) {
  auto base = std::make_shared<CountingFile>(1 << 20);
  auto f = read_ahead_file(base, small_blocks());
  for (uint64_t off = 0; off < base->size(); off += 512) expect_bytes(*f, *base, off, 512);
  auto reads = base->reads();
  // 2048 reads of 512 bytes; the window grows 16, 32, 64 KiB, then whole blocks.
  EXPECT_LT(reads.size(), 30u);
  uint64_t fetched = 0;
  for (auto& r : reads) fetched += r.second;
  EXPECT_LE(fetched, base->size() + 3 * (64 << 10));  // little fetched twice or past the end
}

TEST(ReadAhead, AReadAfterASeekFetchesExactlyWhatItAsks) {
  auto base = std::make_shared<CountingFile>(1 << 20);
  auto f = read_ahead_file(base, small_blocks());
  expect_bytes(*f, *base, 0, 4096);
  const size_t before = base->reads().size();
  expect_bytes(*f, *base, 700000, 4096);  // past a large payload, as the header scan does
  auto reads = base->reads();
  ASSERT_EQ(reads.size(), before + 1);
  EXPECT_EQ(reads.back(), (std::pair<uint64_t, size_t>{700000, 4096}));
}

TEST(ReadAhead, ALargeReadIsSplitIntoBlockSizedParallelReads) {
  auto base = std::make_shared<CountingFile>(1 << 20);
  auto f = read_ahead_file(base, small_blocks());
  expect_bytes(*f, *base, 1000, 300000);
  auto reads = base->reads();
  ASSERT_EQ(reads.size(), 5u);  // ceil(300000 / 65536)
  for (auto& r : reads) EXPECT_LE(r.second, size_t{64} << 10);
}

TEST(ReadAhead, AHintFetchesTheRangeBeforeItIsRead) {
  auto base = std::make_shared<CountingFile>(1 << 20);
  auto f = read_ahead_file(base, small_blocks());
  f->will_need(500000, 100000);
  for (int i = 0; i < 200 && base->reads().size() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const size_t before = base->reads().size();
  EXPECT_GE(before, 2u);  // 100000 bytes = two 64 KiB blocks, fetched in the background
  expect_bytes(*f, *base, 500000, 50000);
  expect_bytes(*f, *base, 550000, 50000);
  auto reads = base->reads();
  for (size_t i = 0; i < before; ++i) EXPECT_GE(reads[i].first, 500000u);
  // Reading the hinted range asked for nothing new below its end.
  for (size_t i = before; i < reads.size(); ++i) EXPECT_GE(reads[i].first, 600000u);
}

// A hinted chunk is read as a view of the block fetched for it: no copy, no new request,
// and the view keeps the bytes after the block has left the cache.
TEST(ReadAhead, AHintedRangeIsMappedAsAViewOfItsBlock) {
  auto base = std::make_shared<CountingFile>(1 << 20);
  ReadAheadOptions o = small_blocks();
  o.block_bytes = 256 << 10;  // chunks of 70000 bytes fit one block each
  auto f = read_ahead_file(base, o);
  f->will_need(300000, 70000);  // one block of exactly the range
  f->will_need(370000, 70000);  // the chunk after it, also hinted
  auto view = f->map(300000, 70000);
  ASSERT_TRUE(view.is_ok()) << view.status().to_string();
  ASSERT_NE(*view, nullptr);
  ASSERT_EQ((*view)->size(), 70000u);
  auto next = f->map(370000, 70000);
  ASSERT_TRUE(next.is_ok());
  ASSERT_NE(*next, nullptr);
  // Both were fetched by their hint alone, one request each, nothing else.
  auto reads = base->reads();
  ASSERT_EQ(reads.size(), 2u);
  std::sort(reads.begin(), reads.end());
  EXPECT_EQ(reads[0], std::make_pair(uint64_t{300000}, size_t{70000}));
  EXPECT_EQ(reads[1], std::make_pair(uint64_t{370000}, size_t{70000}));
  // Fill the cache with other blocks: the views stay valid and right.
  for (uint64_t off = 500000; off < base->size(); off += 4096) expect_bytes(*f, *base, off, 4096);
  EXPECT_EQ(std::memcmp((*view)->data(), base->bytes().data() + 300000, 70000), 0);
  EXPECT_EQ(std::memcmp((*next)->data(), base->bytes().data() + 370000, 70000), 0);
}

// A reader that names several chunks in one hint (as ShardStreams does when hint_bytes()
// asks for it) gets them with one request, and each chunk is a view of that one block.
TEST(ReadAhead, ChunksNamedInOneHintAreOneRequestAndEachAViewOfIt) {
  auto base = std::make_shared<CountingFile>(1 << 20);
  ReadAheadOptions o = small_blocks();
  o.block_bytes = 256 << 10;
  o.hint_bytes = 200000;
  auto f = read_ahead_file(base, o);
  EXPECT_EQ(f->hint_bytes(), 200000u);
  f->will_need(100000, 3 * 60000);  // three chunks of 60000 bytes
  std::vector<std::shared_ptr<const MappedRange>> views;
  for (uint64_t at = 100000; at < 280000; at += 60000) {
    auto view = f->map(at, 60000);
    ASSERT_TRUE(view.is_ok()) << view.status().to_string();
    ASSERT_NE(*view, nullptr) << "chunk at " << at;
    EXPECT_EQ(std::memcmp((*view)->data(), base->bytes().data() + at, 60000), 0);
    views.push_back(std::move(*view));
  }
  EXPECT_EQ(base->reads(), (std::vector<std::pair<uint64_t, size_t>>{{100000, 180000}}));
  // Its last chunk taken, the block has left the cache: a read of it asks again.
  expect_bytes(*f, *base, 100000, 1000);
  EXPECT_EQ(base->reads().size(), 2u);
  // A file without read-ahead takes hints of one chunk.
  o.readahead_blocks = 0;
  EXPECT_EQ(read_ahead_file(base, o)->hint_bytes(), 0u);
}

TEST(ReadAhead, TheHintSizeComesFromTheEnvironment) {
  EXPECT_EQ(ReadAheadOptions{}.hint_bytes, 512u << 10);
  ::setenv("SHARDYARD_HTTP_HINT_BYTES", "0", 1);
  auto o = ReadAheadOptions::from_env();
  ::setenv("SHARDYARD_HTTP_HINT_BYTES", "nonsense", 1);
  auto bad = ReadAheadOptions::from_env();
  ::unsetenv("SHARDYARD_HTTP_HINT_BYTES");
  ASSERT_TRUE(o.is_ok()) << o.status().to_string();
  EXPECT_EQ(o->hint_bytes, 0u);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("SHARDYARD_HTTP_HINT_BYTES"), std::string::npos)
      << bad.status().to_string();
}

// What no fetched block holds whole is not mapped: the caller reads it.
TEST(ReadAhead, ARangeNoBlockHoldsIsNotMapped) {
  auto base = std::make_shared<CountingFile>(1 << 20);
  auto f = read_ahead_file(base, small_blocks());
  auto none = f->map(0, 4096);  // nothing fetched
  ASSERT_TRUE(none.is_ok());
  EXPECT_EQ(*none, nullptr);
  EXPECT_TRUE(base->reads().empty());  // mapping fetches nothing
  f->will_need(100000, 70000);         // two blocks: 64 KiB and the rest
  auto across = f->map(100000, 70000);
  ASSERT_TRUE(across.is_ok());
  EXPECT_EQ(*across, nullptr);
  expect_bytes(*f, *base, 100000, 70000);  // read, from the two blocks
  auto past = f->map(base->size() - 10, 100);
  ASSERT_TRUE(past.is_ok());
  EXPECT_EQ(*past, nullptr);
  // A failed fetch is not mapped; the read that follows reports it.
  base->fail_at(400000);
  f->will_need(390000, 20000);
  auto failed = f->map(390000, 20000);
  ASSERT_TRUE(failed.is_ok());
  EXPECT_EQ(*failed, nullptr);
  std::string buf(20000, '\0');
  auto r = f->read_at(390000, buf.data(), buf.size());
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("injected failure"), std::string::npos);
}

TEST(ReadAhead, EndOfFileAndEmptyReads) {
  auto base = std::make_shared<CountingFile>(100000);
  auto f = read_ahead_file(base, small_blocks());
  expect_bytes(*f, *base, 99990, 100);
  expect_bytes(*f, *base, 100000, 100);
  expect_bytes(*f, *base, 0, 0);
  EXPECT_EQ(f->size(), 100000u);
  EXPECT_EQ(f->uri(), "mem://file");
}

TEST(ReadAhead, AFailedFetchIsReportedByTheReadThatNeedsIt) {
  auto base = std::make_shared<CountingFile>(1 << 20);
  auto f = read_ahead_file(base, small_blocks());
  base->fail_at(300000);
  std::string buf(4096, '\0');
  Status last;
  for (uint64_t off = 0; off < 400000; off += 4096) {
    auto r = f->read_at(off, buf.data(), buf.size());
    if (!r.is_ok()) {
      last = r.status();
      EXPECT_LE(off, 300000u);
      EXPECT_GT(off + 4096, 300000u - (64 << 10));
      break;
    }
  }
  ASSERT_FALSE(last.is_ok());
  EXPECT_NE(last.message().find("injected failure"), std::string::npos);
  base->fail_at(UINT64_MAX);  // the failure was not cached: reading again works
  expect_bytes(*f, *base, 299000, 4096);
}

TEST(ReadAhead, ConcurrentReadersSeeTheRightBytes) {
  auto base = std::make_shared<CountingFile>(2 << 20);
  auto f = read_ahead_file(base, small_blocks());
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      std::string got;
      for (int i = 0; i < 300; ++i) {
        uint64_t off = (i % 3 == 0) ? rng() % base->size() : (t * 500000 + i * 1000);
        size_t n = 1 + rng() % 200000;
        got.assign(n, '\0');
        auto r = f->read_at(off, got.data(), n);
        size_t want = off >= base->size() ? 0 : std::min<uint64_t>(n, base->size() - off);
        if (!r.is_ok() || *r != want || got.compare(0, want, base->bytes(), off, want) != 0) ++bad;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad, 0);
}

}  // namespace
}  // namespace shardyard::io
