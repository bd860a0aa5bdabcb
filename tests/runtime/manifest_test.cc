// Tests of runtime/manifest.h: the versioned binary format and the dataset fingerprint.
#include "runtime/manifest.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>

#include "runtime/hash.h"
#include "test_manifest.h"

namespace shardyard {
namespace {

Manifest sample_manifest() {
  Manifest m;
  SourceEntry tar;
  tar.uri = "/data/train-000000.tar";
  tar.kind = SourceKind::kTar;
  tar.size_bytes = 10240;
  tar.mtime_ns = 1700000000123456789;
  tar.ctime_ns = 1700000000987654321;
  tar.inode = 0x0123456789abcdefull;
  tar.members_skipped = 3;
  tar.samples = {{"a/000", 0, 2048, 900}, {"a/001", 2048, 4096, 1200}, {"a/002", 4096, 5120, 1}};
  SourceEntry gz;
  gz.uri = "/data/train-000001.tar.gz";
  gz.kind = SourceKind::kTarGz;
  gz.size_bytes = 777;
  gz.mtime_ns = -5;
  gz.samples = {{"b/000", 0, 1024, 10}};
  gz.damaged = true;
  gz.damaged_at = 1024;
  gz.damage = "corrupt: /data/train-000001.tar.gz at byte 1024: bad tar header checksum";
  SourceEntry dir;
  dir.uri = "/data/loose";
  dir.kind = SourceKind::kDirectory;
  dir.size_bytes = 30;
  dir.files = {"x.cls", "x.jpg", "y.cls"};
  dir.files_digest = 0xfedcba9876543210ull;
  dir.samples = {{"x", 0, 2, 20}, {"y", 2, 3, 10}};
  SourceEntry missing;
  missing.uri = "/data/missing.tar";
  missing.damaged = true;
  missing.damage = "missing shard";
  m.sources = {tar, gz, dir, missing};
  m.strict_members = true;
  m.fingerprint = compute_fingerprint(m);
  return m;
}

void expect_same(const Manifest& a, const Manifest& b) {
  EXPECT_EQ(a.fingerprint, b.fingerprint);
  EXPECT_EQ(a.strict_members, b.strict_members);
  ASSERT_EQ(a.sources.size(), b.sources.size());
  for (size_t i = 0; i < a.sources.size(); ++i) {
    const auto &x = a.sources[i], &y = b.sources[i];
    EXPECT_EQ(x.uri, y.uri);
    EXPECT_EQ(x.kind, y.kind);
    EXPECT_EQ(x.size_bytes, y.size_bytes);
    EXPECT_EQ(x.mtime_ns, y.mtime_ns);
    EXPECT_EQ(x.ctime_ns, y.ctime_ns);
    EXPECT_EQ(x.inode, y.inode);
    EXPECT_EQ(x.files_digest, y.files_digest);
    EXPECT_EQ(x.members_skipped, y.members_skipped);
    EXPECT_EQ(x.files, y.files);
    EXPECT_EQ(x.damaged, y.damaged);
    EXPECT_EQ(x.damaged_at, y.damaged_at);
    EXPECT_EQ(x.damage, y.damage);
    ASSERT_EQ(x.samples.size(), y.samples.size());
    for (size_t k = 0; k < x.samples.size(); ++k) {
      EXPECT_EQ(x.samples[k].key, y.samples[k].key);
      EXPECT_EQ(x.samples[k].begin, y.samples[k].begin);
      EXPECT_EQ(x.samples[k].end, y.samples[k].end);
      EXPECT_EQ(x.samples[k].payload_bytes, y.samples[k].payload_bytes);
    }
  }
}

const std::string kName = "/cache/0123456789abcdef.manifest";

void expect_corrupt(const Result<Manifest>& r, const std::string& what) {
  ASSERT_FALSE(r.is_ok()) << what;
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt) << what;
  EXPECT_NE(r.status().message().find(kName), std::string::npos)
      << what << ": the message names the file: " << r.status().message();
}

TEST(ManifestFormat, RoundTripsEveryField) {
  Manifest m = sample_manifest();
  auto back = decode_manifest(encode_manifest(m), kName);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  expect_same(m, *back);
  EXPECT_EQ(encode_manifest(*back), encode_manifest(m));
}

// Without verification (a rank's manifest for its worker processes) the same manifest
// comes back, a wrong checksum or fingerprint goes unnoticed, and damage to the layout is
// still an error: every cut, and every byte of the body changed, never a crash.
TEST(ManifestFormat, DecodesWithoutVerifyingAndStillRefusesABrokenLayout) {
  Manifest m = sample_manifest();
  const std::string bytes = encode_manifest(m);
  auto back = decode_manifest(bytes, kName, ManifestCheck::kLayout);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  expect_same(m, *back);
  std::string wrong_sum = bytes;
  wrong_sum.back() ^= 1;
  EXPECT_TRUE(decode_manifest(wrong_sum, kName, ManifestCheck::kLayout).is_ok());
  EXPECT_FALSE(decode_manifest(wrong_sum, kName).is_ok());
  // Encoded without a checksum: the same bytes but the last 8, which only verify() reads.
  const std::string unchecked = encode_manifest(m, /*checksum=*/false);
  EXPECT_EQ(unchecked.substr(0, unchecked.size() - 8), bytes.substr(0, bytes.size() - 8));
  EXPECT_TRUE(decode_manifest(unchecked, kName, ManifestCheck::kLayout).is_ok());
  EXPECT_FALSE(decode_manifest(unchecked, kName).is_ok());
  for (size_t n = 0; n < bytes.size() - 8; ++n)
    expect_corrupt(decode_manifest(bytes.substr(0, n), kName, ManifestCheck::kLayout), "cut");
  for (size_t i = 24; i < bytes.size() - 8; ++i) {
    std::string changed = bytes;
    changed[i] = static_cast<char>(0xff);
    // An error or another manifest, never a crash.
    (void)decode_manifest(changed, kName, ManifestCheck::kLayout);
  }
}

// The last source's table length, the body's last 8 bytes, larger than the whole body: a
// broken layout, not a source without samples (found by manifest_fuzz).
TEST(ManifestFormat, RefusesATableLongerThanTheBodyUnverifiedToo) {
  Manifest m = sample_manifest();
  ASSERT_TRUE(m.sources.back().samples.empty());
  std::string bytes = encode_manifest(m, /*checksum=*/false);
  for (int i = 0; i < 8; ++i) bytes[bytes.size() - 16 + i] = static_cast<char>(0x7f);
  expect_corrupt(decode_manifest(bytes, kName, ManifestCheck::kLayout), "a table past the body");
  expect_corrupt(decode_manifest(bytes, kName), "a table past the body, verified");
}

TEST(ManifestFormat, RoundTripsAnEmptyManifest) {
  Manifest m;
  m.fingerprint = compute_fingerprint(m);
  auto back = decode_manifest(encode_manifest(m), kName);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_TRUE(back->sources.empty());
}

TEST(ManifestFormat, StartsWithMagicAndVersion) {
  std::string bytes = encode_manifest(sample_manifest());
  ASSERT_GE(bytes.size(), 24u);
  EXPECT_EQ(std::memcmp(bytes.data(), "SYMANIF\0", 8), 0);
  EXPECT_EQ(static_cast<unsigned char>(bytes[8]), kManifestFormatVersion);
}

TEST(ManifestFormat, RejectsBadMagic) {
  std::string bytes = encode_manifest(sample_manifest());
  bytes[0] = 'X';
  auto r = decode_manifest(bytes, kName);
  expect_corrupt(r, "bad magic");
  EXPECT_NE(r.status().message().find("magic"), std::string::npos) << r.status().message();
  expect_corrupt(decode_manifest("not a manifest at all, just some text", kName), "text");
}

// Version 1 lacks the freshness data and skip counts of version 2: refused, never read with
// defaults for them, and the message says how to get a current one.
TEST(ManifestFormat, RejectsAnOlderVersion) {
  std::string bytes = encode_manifest(sample_manifest());
  bytes[8] = static_cast<char>(kManifestFormatVersion - 1);
  auto r = decode_manifest(bytes, kName);
  expect_corrupt(r, "older version");
  EXPECT_NE(r.status().message().find("older"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("shardyard manifest build"), std::string::npos);
}

// A flag byte (damaged, strict_members) other than 0 or 1 is damage, even under a valid
// checksum.
TEST(ManifestFormat, RejectsAFlagThatIsNeitherZeroNorOne) {
  std::string bytes = encode_manifest(sample_manifest());
  ASSERT_EQ(bytes[24 + 8], 1) << "strict_members follows the fingerprint";
  bytes[24 + 8] = 2;
  std::string resealed = bytes.substr(0, bytes.size() - 8);
  Hasher h;
  h.add(std::string_view(resealed).substr(24));
  const uint64_t sum = h.digest();
  for (int i = 0; i < 8; ++i) resealed.push_back(static_cast<char>((sum >> (8 * i)) & 0xff));
  auto r = decode_manifest(resealed, kName);
  expect_corrupt(r, "flag 2");
  EXPECT_NE(r.status().message().find("malformed"), std::string::npos) << r.status().message();
}

TEST(ManifestFormat, RejectsANewerVersion) {
  std::string bytes = encode_manifest(sample_manifest());
  bytes[8] = static_cast<char>(kManifestFormatVersion + 1);
  auto r = decode_manifest(bytes, kName);
  expect_corrupt(r, "newer version");
  EXPECT_NE(r.status().message().find("newer"), std::string::npos) << r.status().message();
}

TEST(ManifestFormat, RejectsEveryTruncation) {
  const std::string bytes = encode_manifest(sample_manifest());
  for (size_t len = 0; len < bytes.size(); ++len)
    expect_corrupt(decode_manifest(bytes.substr(0, len), kName),
                   "cut to " + std::to_string(len) + " bytes");
  auto r = decode_manifest(bytes.substr(0, bytes.size() - 9), kName);
  EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status().message();
}

TEST(ManifestFormat, RejectsAFlippedByteInBodyOrChecksum) {
  const std::string bytes = encode_manifest(sample_manifest());
  // Bytes 16.. are the body size, the body and the checksum.
  for (size_t i = 16; i < bytes.size(); ++i) {
    for (unsigned char flip : {0x01, 0x80}) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(bad[i] ^ flip);
      expect_corrupt(decode_manifest(bad, kName), "flipped byte " + std::to_string(i));
    }
  }
  std::string bad = bytes;
  bad[40] = static_cast<char>(bad[40] ^ 0x10);
  auto r = decode_manifest(bad, kName);
  EXPECT_NE(r.status().message().find("checksum"), std::string::npos) << r.status().message();
}

// The header fields outside the checksum: a version no build ever wrote (0) and flags
// this build does not know must not decode as a valid manifest either.
TEST(ManifestFormat, RejectsVersionZeroAndUnknownFlags) {
  const std::string bytes = encode_manifest(sample_manifest());
  std::string zero_version = bytes;
  zero_version[8] = 0;
  EXPECT_FALSE(decode_manifest(zero_version, kName).is_ok()) << "format version 0 accepted";
  std::string flags = bytes;
  flags[12] = 1;
  EXPECT_FALSE(decode_manifest(flags, kName).is_ok()) << "unknown flags accepted";
}

TEST(ManifestFormat, RejectsAFingerprintThatDoesNotMatchTheContent) {
  Manifest m = sample_manifest();
  m.fingerprint ^= 1;
  auto r = decode_manifest(encode_manifest(m), kName);
  expect_corrupt(r, "wrong fingerprint");
  EXPECT_NE(r.status().message().find("fingerprint"), std::string::npos);
}

// A cache file is checked by its checksum alone: its stored fingerprint is taken as it is
// (build_manifest() wrote it), while damage to any byte, the fingerprint's included, is
// still refused.
TEST(ManifestFormat, ChecksumCheckTakesTheStoredFingerprintAndRefusesDamage) {
  Manifest m = sample_manifest();
  m.fingerprint ^= 1;
  const std::string bytes = encode_manifest(m);
  auto r = decode_manifest(bytes, kName, ManifestCheck::kChecksum);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->fingerprint, m.fingerprint);
  expect_same(m, *r);
  for (size_t i = 24; i < 32; ++i) {  // the stored fingerprint
    std::string bad = bytes;
    bad[i] ^= 0x10;
    expect_corrupt(decode_manifest(bad, kName, ManifestCheck::kChecksum),
                   "fingerprint byte " + std::to_string(i));
  }
  std::string cut = bytes.substr(0, bytes.size() - 1);
  expect_corrupt(decode_manifest(cut, kName, ManifestCheck::kChecksum), "cut");
  std::string sum = bytes;
  sum.back() ^= 1;
  expect_corrupt(decode_manifest(sum, kName, ManifestCheck::kChecksum), "checksum");
  // Block by block, as a file that cannot be mapped is read: the same.
  size_t at = 0;
  ManifestSource source = [&](char* dst, size_t n) -> Result<size_t> {
    const size_t take = std::min<size_t>({n, 7, bytes.size() - at});
    std::memcpy(dst, bytes.data() + at, take);
    at += take;
    return take;
  };
  auto streamed = decode_manifest(source, bytes.size(), kName, ManifestCheck::kChecksum);
  ASSERT_TRUE(streamed.is_ok()) << streamed.status().to_string();
  EXPECT_EQ(streamed->fingerprint, m.fingerprint);
}

// The fingerprint of a fixed manifest, pinned: docs/manifest-format.md's example (a tar of
// a.cls, a.txt and b.cls). Cache files are trusted for their stored fingerprint
// (ManifestCheck::kChecksum) because only the current format version decodes; if this
// value changes, so must kManifestFormatVersion, or cached manifests would name datasets
// by the old fingerprint while scans name them by the new one.
TEST(ManifestFingerprint, IsPinnedToTheFormatVersion) {
  Manifest m;
  SourceEntry tar;
  tar.uri = "/tmp/mf/t.tar";
  tar.kind = SourceKind::kTar;
  tar.size_bytes = 10240;
  tar.samples = {{"a", 0, 2048, 6}, {"b", 2048, 3072, 1}};
  m.sources = {tar};
  EXPECT_EQ(compute_fingerprint(m), 0xb456e34a75a5e951ull)
      << "compute_fingerprint() changed: bump kManifestFormatVersion (runtime/manifest.h)";
  EXPECT_EQ(kManifestFormatVersion, 3u) << "a new format version: update this test's note";
}

// Rewrites the body size and checksum of an encoded manifest after its body was edited, so
// that only the structural checks behind the checksum can catch the edit.
std::string reseal(std::string bytes, size_t body_size) {
  for (int i = 0; i < 8; ++i) bytes[16 + i] = static_cast<char>((body_size >> (8 * i)) & 0xff);
  bytes.resize(24 + body_size);
  Hasher h;
  h.add(std::string_view(bytes).substr(24, body_size));
  const uint64_t sum = h.digest();
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((sum >> (8 * i)) & 0xff));
  return bytes;
}

TEST(ManifestFormat, RejectsAStructurallyBadBodyWithAValidChecksum) {
  const std::string bytes = encode_manifest(sample_manifest());
  const size_t body_size = bytes.size() - 32;
  ASSERT_TRUE(decode_manifest(reseal(bytes, body_size), kName).is_ok()) << "reseal is exact";

  std::string longer = bytes.substr(0, 24 + body_size) + std::string(1, '\0');
  auto r = decode_manifest(reseal(longer, body_size + 1), kName);
  expect_corrupt(r, "a trailing body byte");
  EXPECT_NE(r.status().message().find("malformed"), std::string::npos) << r.status().message();

  expect_corrupt(decode_manifest(reseal(bytes, body_size - 1), kName), "a body cut short");

  std::string many = bytes;
  for (int i = 0; i < 8; ++i) many[24 + 8 + i] = static_cast<char>(0xff);  // num_sources
  r = decode_manifest(reseal(many, body_size), kName);
  expect_corrupt(r, "an implausible source count");
  EXPECT_NE(r.status().message().find("implausible"), std::string::npos) << r.status().message();
}

// The packed sample table behind a valid checksum: a table byte changed anywhere (a varint
// made longer than its data, a key prefix longer than the key before it, a range pointing
// elsewhere) is refused or decodes to another, consistent manifest whose fingerprint then
// does not match, never a read out of bounds. The name of the fault is the table's.
TEST(ManifestFormat, RefusesADamagedSampleTableBehindAValidChecksum) {
  const std::string bytes = encode_manifest(sample_manifest());
  const size_t body_size = bytes.size() - 32;
  // The first source's table: its bytes follow its u64 sample count and u64 table size.
  const Manifest m = sample_manifest();
  const std::string_view table = m.sources[0].samples.encoded();
  const size_t at = bytes.find(table);
  ASSERT_NE(at, std::string::npos);
  bool named = false;
  for (size_t i = at; i < at + table.size(); ++i) {
    for (unsigned char v : {0x00, 0x7f, 0x80, 0xff}) {
      std::string bad = bytes;
      if (bad[i] == static_cast<char>(v)) continue;
      bad[i] = static_cast<char>(v);
      auto r = decode_manifest(reseal(bad, body_size), kName);
      expect_corrupt(r, "table byte " + std::to_string(i - at) + " set to " + std::to_string(v));
      named = named || r.status().message().find("sample table is malformed") != std::string::npos;
    }
  }
  EXPECT_TRUE(named) << "no damage was named as the table's";
}

// A file longer than its envelope says is damage too, not extra bytes to ignore.
TEST(ManifestFormat, RejectsBytesAfterTheChecksum) {
  const std::string bytes = encode_manifest(sample_manifest()) + "x";
  auto r = decode_manifest(bytes, kName);
  expect_corrupt(r, "a byte after the checksum");
  EXPECT_NE(r.status().message().find("1 bytes after its checksum"), std::string::npos)
      << r.status().message();
  expect_corrupt(decode_manifest(bytes, kName, ManifestCheck::kLayout),
                 "a byte after the checksum, unverified");
}

// The fuzzer's seeds (tests/fuzz/manifest_corpus, written by `shardyard manifest build`) are
// manifests of this format: when the format changes, write them again.
TEST(ManifestFormat, TheFuzzSeedsAreCurrentManifests) {
  for (const char* name : {"one_tar", "two_tars_blocks", "directory"}) {
    const std::string path = std::string(SY_SOURCE_DIR) + "/tests/fuzz/manifest_corpus/" + name;
    std::ifstream in(path, std::ios::binary);
    ASSERT_TRUE(in) << path;
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto r = decode_manifest(bytes, path);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string()
                           << " (rewrite the seeds with `shardyard manifest build`)";
    EXPECT_EQ(encode_manifest(*r), bytes) << path;
  }
}

// A source kind byte outside SourceKind must not decode into a manifest: readers would
// treat the unknown kind as a plain tar.
TEST(ManifestFormat, RejectsAnUnknownSourceKind) {
  Manifest m = sample_manifest();
  m.sources[0].kind = static_cast<SourceKind>(7);
  m.fingerprint = compute_fingerprint(m);
  auto r = decode_manifest(encode_manifest(m), kName);
  EXPECT_FALSE(r.is_ok()) << "source kind 7 was accepted";
}

TEST(Fingerprint, ChangesWithKeysOffsetsSizesAndOrder) {
  const Manifest m = sample_manifest();
  const uint64_t base = compute_fingerprint(m);
  auto changed = [&](auto edit) {
    Manifest x = m;
    edit(x);
    return compute_fingerprint(x) != base;
  };
  EXPECT_TRUE(changed([](Manifest& x) {
    testing::edit_sample(&x.sources[0].samples, 1, [](SampleEntry& e) { e.key = "a/00X"; });
  }));
  EXPECT_TRUE(changed([](Manifest& x) {
    testing::edit_sample(&x.sources[0].samples, 1, [](SampleEntry& e) { e.begin += 512; });
  }));
  EXPECT_TRUE(changed([](Manifest& x) {
    testing::edit_sample(&x.sources[0].samples, 1, [](SampleEntry& e) { e.end += 512; });
  }));
  EXPECT_TRUE(changed([](Manifest& x) {
    testing::edit_sample(&x.sources[0].samples, 2, [](SampleEntry& e) { e.payload_bytes = 2; });
  }));
  EXPECT_TRUE(changed([](Manifest& x) { x.sources[0].samples.pop_back(); }));
  EXPECT_TRUE(changed([](Manifest& x) { std::swap(x.sources[0], x.sources[1]); }));
  EXPECT_TRUE(changed([](Manifest& x) { x.sources[0].uri = "/data/train-000009.tar"; }));
  EXPECT_TRUE(changed([](Manifest& x) { x.sources[0].kind = SourceKind::kTarGz; }));
  EXPECT_TRUE(changed([](Manifest& x) { x.sources.pop_back(); }));
}

TEST(Fingerprint, DoesNotDependOnWhereTheShardsAre) {
  const Manifest m = sample_manifest();
  const uint64_t base = compute_fingerprint(m);
  Manifest moved = m;
  moved.sources[0].uri = "s3://bucket/some/prefix/train-000000.tar";
  moved.sources[1].uri = "https://host:8080/x/train-000001.tar.gz";
  moved.sources[2].uri = "/mnt/other/loose/";
  moved.sources[3].uri = "missing.tar";
  EXPECT_EQ(compute_fingerprint(moved), base);
  // Nor on the scan's bookkeeping: file sizes, times, inodes, skip counts and damage notes.
  moved.sources[0].mtime_ns = 1;
  moved.sources[0].size_bytes = 1;
  moved.sources[0].ctime_ns = 2;
  moved.sources[0].inode = 3;
  moved.sources[0].members_skipped = 4;
  moved.strict_members = false;
  EXPECT_EQ(compute_fingerprint(moved), base);
}

TEST(ManifestSummary, CountsSamplesBytesDamageAndSeekability) {
  Manifest m = sample_manifest();
  EXPECT_EQ(m.num_samples(), 6u);
  EXPECT_EQ(m.payload_bytes(), 900u + 1200 + 1 + 10 + 20 + 10);
  EXPECT_EQ(m.num_damaged(), 2u);
  EXPECT_EQ(m.members_skipped(), 3u);
  EXPECT_FALSE(m.seekable()) << "a .tar.gz source cannot be read at any sample";
  m.sources.erase(m.sources.begin() + 1);
  EXPECT_TRUE(m.seekable());
  m.fingerprint = 0x00ab;
  EXPECT_EQ(m.fingerprint_hex(), "00000000000000ab");
  EXPECT_STREQ(source_kind_name(SourceKind::kTar), "tar");
  EXPECT_STREQ(source_kind_name(SourceKind::kTarGz), "tar.gz");
  EXPECT_STREQ(source_kind_name(SourceKind::kDirectory), "directory");
}

}  // namespace
}  // namespace shardyard
