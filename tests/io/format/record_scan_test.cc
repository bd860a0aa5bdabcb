// Tests of io/format/record_scan.h on real files: the records manifest of a windows dataset
// (counts, order, patterns) and every bad input it must refuse, each naming the file.
#include "io/format/record_scan.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/format/manifest_scan.h"
#include "tar_fixtures.h"

namespace shardyard::io {
namespace {

using test::TempDir;

void write_bytes(const std::string& path, size_t n) {
  std::ofstream out(path, std::ios::binary);
  out << std::string(n, '\x5a');
}

WindowSpec spec_of(uint64_t length, uint64_t stride, uint64_t target, bool stitch,
                   uint64_t record_bytes) {
  return make_window_spec(length, stride, target, stitch, record_bytes);
}

// The error of building a manifest of `files` (paths) with `spec`; "" when it succeeds.
std::string error_of(const std::vector<std::string>& files, const WindowSpec& spec) {
  auto m = build_record_manifest(local_file_system(), files, spec);
  return m.is_ok() ? "" : m.status().message();
}

TEST(RecordScan, CountsRecordsAndWindowsPerSourceInOrder) {
  TempDir dir;
  write_bytes(dir.file("1979-01.bin"), 10 * 8);
  write_bytes(dir.file("1979-02.bin"), 7 * 8);
  write_bytes(dir.file("1979-03.bin"), 9 * 8);
  auto m = build_record_manifest(local_file_system(), {dir.path() + "/1979-{01..03}.bin"},
                                 spec_of(4, 2, 1, true, 8));
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  ASSERT_EQ(m->sources.size(), 3u);
  const uint64_t records[] = {10, 7, 9}, windows[] = {5, 4, 3};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(m->sources[i].kind, SourceKind::kRecords);
    EXPECT_EQ(m->sources[i].records, records[i]);
    EXPECT_EQ(m->sources[i].windows, windows[i]);
    EXPECT_EQ(m->sources[i].size_bytes, records[i] * 8);
    EXPECT_TRUE(m->sources[i].samples.empty());
  }
  EXPECT_EQ(m->num_samples(), 12u);
  EXPECT_EQ(m->fingerprint, compute_fingerprint(*m));
  // A directory lists its files in sorted order: the same dataset.
  auto listed = build_record_manifest(local_file_system(), {dir.path()}, spec_of(4, 2, 1, true, 8));
  ASSERT_TRUE(listed.is_ok()) << listed.status().to_string();
  EXPECT_EQ(listed->fingerprint, m->fingerprint);
  // Other windows over the same files are another dataset.
  auto other = build_record_manifest(local_file_system(), {dir.path()}, spec_of(4, 2, 0, true, 8));
  ASSERT_TRUE(other.is_ok());
  EXPECT_NE(other->fingerprint, m->fingerprint);
  // Never cached: the format has no place for windows.
  EXPECT_FALSE(save_manifest(*m, dir.file("m.manifest")).is_ok());
}

TEST(RecordScan, RefusesASizeThatIsNotAMultipleOfTheRecordSize) {
  TempDir dir;
  write_bytes(dir.file("a.bin"), 100);
  auto e = error_of({dir.file("a.bin")}, spec_of(2, 1, 0, false, 8));
  EXPECT_NE(e.find(dir.file("a.bin")), std::string::npos) << e;
  EXPECT_NE(e.find("size 100 bytes is not a multiple of --record-bytes 8 (remainder 4 bytes)"),
            std::string::npos)
      << e;
}

TEST(RecordScan, RefusesAnEmptyFile) {
  TempDir dir;
  write_bytes(dir.file("a.bin"), 64);
  write_bytes(dir.file("empty.bin"), 0);
  auto e = error_of({dir.file("a.bin"), dir.file("empty.bin")}, spec_of(2, 1, 0, true, 8));
  EXPECT_NE(e.find(dir.file("empty.bin") + ": empty record file"), std::string::npos) << e;
}

TEST(RecordScan, RefusesASourceShorterThanTheSpanWithoutStitch) {
  TempDir dir;
  write_bytes(dir.file("a.bin"), 64 * 8);
  write_bytes(dir.file("short.bin"), 5 * 8);
  auto e = error_of({dir.file("a.bin"), dir.file("short.bin")}, spec_of(6, 1, 2, false, 8));
  EXPECT_NE(e.find(dir.file("short.bin") + ": 5 records are fewer than a window's span of 8"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("--stitch"), std::string::npos) << e;
  // With stitch the short source borrows from the next one, but the last has no next.
  EXPECT_EQ(error_of({dir.file("short.bin"), dir.file("a.bin")}, spec_of(6, 1, 2, true, 8)), "");
  e = error_of({dir.file("a.bin"), dir.file("short.bin")}, spec_of(6, 1, 2, true, 8));
  EXPECT_NE(e.find(dir.file("short.bin") + ": yields no window (5 records, a window spans 8"),
            std::string::npos)
      << e;
}

TEST(RecordScan, RefusesZerosAndMissingFiles) {
  TempDir dir;
  write_bytes(dir.file("a.bin"), 64);
  EXPECT_NE(error_of({dir.file("a.bin")}, spec_of(0, 1, 0, false, 8)).find("LENGTH"),
            std::string::npos);
  EXPECT_NE(error_of({dir.file("a.bin")}, spec_of(2, 0, 0, false, 8)).find("STRIDE"),
            std::string::npos);
  EXPECT_NE(error_of({dir.file("a.bin")}, spec_of(2, 1, 0, false, 0)).find("--record-bytes"),
            std::string::npos);
  auto e = error_of({dir.file("a.bin"), dir.file("missing.bin")}, spec_of(2, 1, 0, false, 8));
  EXPECT_NE(e.find("missing.bin"), std::string::npos) << e;
}

}  // namespace
}  // namespace shardyard::io
