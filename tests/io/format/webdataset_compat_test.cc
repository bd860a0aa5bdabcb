// Every sample of archives written by GNU tar, Python's tarfile and bsdtar, in every format
// they offer, read back as WebDataset reads them: tests/io/webdataset_reference.py writes
// the archives and, for each, what WebDataset's reading yields (key, field names, each
// field's size and CRC-32) and how many members it skips; the scan and the sample reader
// must yield exactly that.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <string>
#include <vector>

#include "io/format/manifest_scan.h"
#include "io/format/sample_reader.h"
#include "tar_fixtures.h"

#ifndef SY_SOURCE_DIR
#error "SY_SOURCE_DIR must name the repository root"
#endif

namespace shardyard::io {
namespace {

using test::TempDir;

std::string hex(std::string_view bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    if (nl > pos) out.push_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return out;
}

// What the scan and the reader yield, in the reference's line format.
std::vector<std::string> shardyard_lines(const std::string& path, size_t map_threshold) {
  auto m = build_manifest(local_file_system(), {path}, ScanOptions{}, nullptr);
  EXPECT_TRUE(m.is_ok()) << m.status().to_string();
  if (!m.is_ok()) return {};
  auto manifest = std::make_shared<const Manifest>(*m);
  SampleReaderOptions options;
  options.map_threshold_bytes = map_threshold;
  SampleReader reader(local_file_system(), manifest, BufferPool::create(), options);
  std::vector<Item> items;
  Status st = reader.read(0, 0, manifest->num_samples(), 0, &items);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  std::vector<std::string> out;
  for (size_t i = 0; i < items.size(); ++i) {
    for (const auto& f : items[i].fields) {
      const auto crc = crc32(0, f.data, static_cast<uInt>(f.size));
      char crc_hex[16];
      std::snprintf(crc_hex, sizeof crc_hex, "%08lx", static_cast<unsigned long>(crc));
      out.push_back(std::to_string(i) + "\t" + hex(items[i].key) + "\t" + hex(f.name) + "\t" +
                    std::to_string(f.size) + "\t" + crc_hex);
    }
  }
  out.push_back("skipped\t" + std::to_string(manifest->members_skipped()));
  return out;
}

TEST(WebDatasetCompat, EverySampleOfEveryWritersArchivesAsWebDatasetYieldsIt) {
  TempDir dir;
  const std::string cmd =
      "python3 " SY_SOURCE_DIR "/tests/io/webdataset_reference.py " + dir.path();
  ASSERT_EQ(test::run_command(cmd), 0) << cmd;
  const auto archives = lines_of(test::read_file(dir.file("archives")));
  ASSERT_GE(archives.size(), 16u);
  for (const auto& name : archives) {
    SCOPED_TRACE(name);
    const auto want = lines_of(test::read_file(dir.file(name + ".expected")));
    ASSERT_GT(want.size(), 12u) << "the reference yielded almost nothing";
    for (size_t map_threshold : {SIZE_MAX, size_t{0}}) {
      const auto got = shardyard_lines(dir.file(name), map_threshold);
      EXPECT_EQ(got, want);
    }
  }
}

}  // namespace
}  // namespace shardyard::io
