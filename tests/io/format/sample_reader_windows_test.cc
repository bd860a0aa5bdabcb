// Tests of io/format/sample_reader.h on records sources: windows read back from real files byte by
// byte, stitched windows equal to tail + head, one buffer per run, and files that changed.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "io/format/record_scan.h"
#include "io/format/sample_reader.h"
#include "tar_fixtures.h"

namespace shardyard::io {
namespace {

using test::TempDir;

constexpr uint64_t kRecordBytes = 12;

// Byte b of record r of file f: distinct enough that a record read from the wrong place,
// file or offset shows.
std::string record_bytes(size_t f, uint64_t r) {
  std::string out(kRecordBytes, '\0');
  for (uint64_t b = 0; b < kRecordBytes; ++b)
    out[b] = static_cast<char>((f * 97 + r * 13 + b * 3 + 1) % 251);
  return out;
}

struct Dataset {
  TempDir dir;
  std::vector<std::string> paths;
  std::vector<uint64_t> records;
  explicit Dataset(std::vector<uint64_t> counts) : records(std::move(counts)) {
    for (size_t f = 0; f < records.size(); ++f) {
      paths.push_back(dir.file("2001-0" + std::to_string(f + 1) + ".bin"));
      std::ofstream out(paths.back(), std::ios::binary);
      for (uint64_t r = 0; r < records[f]; ++r) out << record_bytes(f, r);
    }
  }
  // Record r counted from the start of file f, running on into the next files.
  std::string record(size_t f, uint64_t r) const {
    while (r >= records[f]) r -= records[f++];
    return record_bytes(f, r);
  }
};

WindowSpec spec_of(uint64_t length, uint64_t stride, uint64_t target, bool stitch) {
  return make_window_spec(length, stride, target, stitch, kRecordBytes);
}

std::shared_ptr<const Manifest> manifest_of(const Dataset& d, const WindowSpec& spec) {
  auto m = build_record_manifest(local_file_system(), d.paths, spec);
  EXPECT_TRUE(m.is_ok()) << m.status().to_string();
  return std::make_shared<const Manifest>(m.is_ok() ? *m : Manifest{});
}

// The item is window w of source f: its key, its id, x and y byte for byte.
void expect_window(const Dataset& d, const WindowSpec& spec, const Item& item, size_t f, uint64_t w,
                   uint64_t id) {
  const uint64_t start = w * spec.stride;
  EXPECT_EQ(item.key,
            std::filesystem::path(d.paths[f]).filename().string() + "@" + std::to_string(start));
  EXPECT_EQ(item.id, id);
  std::string x;
  for (uint64_t r = 0; r < spec.length; ++r) x += d.record(f, start + r);
  ASSERT_EQ(item.fields.size(), spec.target > 0 ? 2u : 1u) << item.key;
  EXPECT_EQ(item.fields[0].name, "x");
  EXPECT_EQ(item.fields[0].view(), x) << item.key;
  if (spec.target > 0) {
    EXPECT_EQ(item.fields[1].name, "y");
    EXPECT_EQ(item.fields[1].view(), d.record(f, start + spec.length - 1 + spec.target))
        << item.key;
  }
}

// Read paths: always into a pooled buffer, always mapped where possible.
const size_t kMapThresholds[] = {SIZE_MAX, 0};

TEST(SampleReaderWindows, ReadsEveryWindowByteForByteInOneRunAndInPieces) {
  Dataset d({23, 9, 17});
  for (const auto& spec : {spec_of(4, 1, 0, false), spec_of(5, 3, 2, false), spec_of(6, 2, 1, true),
                           spec_of(10, 4, 3, true), spec_of(1, 1, 0, true)}) {
    auto m = manifest_of(d, spec);
    for (size_t threshold : kMapThresholds) {
      SampleReader reader(local_file_system(), m, BufferPool::create(), {64, threshold});
      uint64_t id = 0;
      for (uint32_t f = 0; f < m->sources.size(); ++f) {
        const uint64_t n = m->source_items(f);
        std::vector<Item> all;
        ASSERT_TRUE(reader.read(f, 0, n, id, &all).is_ok());
        ASSERT_EQ(all.size(), n);
        for (uint64_t w = 0; w < n; ++w) expect_window(d, spec, all[w], f, w, id + w);
        // Every sub-run reads the same windows.
        for (uint64_t a = 0; a < n; a += 2)
          for (uint64_t b = a + 1; b <= n; b += 3) {
            std::vector<Item> part;
            reader.will_need(f, a, b);
            ASSERT_TRUE(reader.read(f, a, b, id + a, &part).is_ok());
            ASSERT_EQ(part.size(), b - a);
            for (uint64_t w = a; w < b; ++w) expect_window(d, spec, part[w - a], f, w, id + w);
          }
        id += n;
      }
    }
  }
}

TEST(SampleReaderWindows, StitchedWindowIsTheTailFollowedByTheNextHead) {
  Dataset d({10, 7});
  const auto spec = spec_of(4, 2, 1, true);  // source 0: starts 0 2 4 | 6 8 stitched
  auto m = manifest_of(d, spec);
  ASSERT_EQ(m->source_items(0), 5u);
  SampleReader reader(local_file_system(), m, BufferPool::create());
  std::vector<Item> items;
  ASSERT_TRUE(reader.read(0, 3, 5, 3, &items).is_ok());
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[1].key, "2001-01.bin@8");
  // Records 8 9 of the first file, then 0 1 of the second; the target is record 2 there.
  EXPECT_EQ(items[1].fields[0].view(),
            record_bytes(0, 8) + record_bytes(0, 9) + record_bytes(1, 0) + record_bytes(1, 1));
  EXPECT_EQ(items[1].fields[1].view(), record_bytes(1, 2));
  EXPECT_EQ(reader.bytes_read(), (10 - 6 + 3) * kRecordBytes);  // one range, tail + head
}

TEST(SampleReaderWindows, WindowsOfARunAreViewsIntoOneSharedBuffer) {
  Dataset d({40, 8});
  const auto spec = spec_of(6, 2, 1, true);
  auto m = manifest_of(d, spec);
  for (size_t threshold : kMapThresholds) {
    SampleReader reader(local_file_system(), m, BufferPool::create(), {64, threshold});
    std::vector<Item> items;
    const uint64_t n = m->source_items(0);
    ASSERT_TRUE(reader.read(0, 0, n, 0, &items).is_ok());
    // One read of the covered records, stitched head included, not one per window.
    EXPECT_EQ(reader.bytes_read(), (40 + 5) * kRecordBytes);  // last start 38, span 7
    std::set<const void*> owners;
    for (const auto& it : items) {
      owners.insert(it.owner.get());
      EXPECT_TRUE(it.owners.empty());
    }
    EXPECT_EQ(owners.size(), 1u);
    // Overlapping windows share bytes: window k+1 starts `stride` records after window k,
    // and the target of a window lies right after its x in the same buffer.
    for (size_t k = 0; k + 1 < items.size(); ++k) {
      EXPECT_EQ(items[k + 1].fields[0].data, items[k].fields[0].data + 2 * kRecordBytes);
      EXPECT_EQ(items[k].fields[1].data, items[k].fields[0].data + 6 * kRecordBytes);
    }
  }
}

TEST(SampleReaderWindows, AFileChangedSinceTheManifestIsAnError) {
  Dataset d({20, 20});
  auto m = manifest_of(d, spec_of(4, 1, 0, true));
  std::filesystem::resize_file(d.paths[1], 2 * kRecordBytes);
  SampleReader reader(local_file_system(), m, BufferPool::create());
  std::vector<Item> items;
  Status st = reader.read(1, 0, 3, 0, &items);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find(d.paths[1]), std::string::npos) << st.to_string();
  // The stitched tail of the first source needs the second's head, which is gone too.
  std::filesystem::resize_file(d.paths[1], 0);
  SampleReader again(local_file_system(), m, BufferPool::create());
  st = again.read(0, 0, m->source_items(0), 0, &items);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find(d.paths[1]), std::string::npos) << st.to_string();
}

}  // namespace
}  // namespace shardyard::io
