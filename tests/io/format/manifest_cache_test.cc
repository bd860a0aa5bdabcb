// Tests of the manifest cache's freshness and modes (io/format/manifest_scan.h): a shard replaced
// with the old size and mtime is scanned again, kRebuild replaces whatever is cached,
// kBypass removes a cached manifest the scan shows stale, an old format is rebuilt, a cache
// built with the other strict_members setting is used only where it cannot matter, and a
// cache file is checked by its checksum and keeps its stored fingerprint.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "io/format/manifest_scan.h"
#include "io/fs/mapping_guard.h"
#include "tar_fixtures.h"

namespace shardyard::io {
namespace {

namespace fs = std::filesystem;
using test::Fixtures;
using test::TempDir;

int64_t ctime_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
}

// File times come from a coarse clock (a few ms): wait until a change made now gets a
// ctime other than `path`'s, as any real edit after a scan does. Bounded: 5 s at most.
void wait_for_the_clock(const std::string& path, const std::string& probe) {
  const int64_t before = ctime_of(path);
  for (int i = 0; i < 5000; ++i) {
    test::write_file(probe, "tick");
    if (ctime_of(probe) != before) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  FAIL() << "the file clock did not move in 5 s";
}

class ManifestCache : public ::testing::Test {
 protected:
  void SetUp() override {
    original = test::read_file(Fixtures::get().path("py_gnu.tar"));
    test::write_file(shard, original);
    options.cache_dir = cache.path();
  }
  Result<Manifest> build(ScanReport* report, CacheMode mode = CacheMode::kUse) {
    ScanOptions o = options;
    o.cache_mode = mode;
    return build_manifest(local_file_system(), {shard}, o, report);
  }
  // The shard's bytes with member s0000.cls renamed s0000.txt: same size, same samples
  // and byte ranges, another field (what the stale manifest would hide).
  std::string renamed() const {
    std::string bytes = original;
    const size_t at = bytes.find(std::string("s0000.cls\0", 10));
    EXPECT_NE(at, std::string::npos);
    bytes.replace(at + 6, 3, "txt");
    test::fix_checksum(bytes, at);
    return bytes;
  }
  TempDir dir, cache;
  const std::string shard = dir.file("shard-000000.tar");
  std::string original;
  ScanOptions options;
};

// `cp -p new.tar shard.tar` and an in-place rewrite that restores the mtime: size and
// mtime are the old ones, the inode or the ctime are not.
TEST_F(ManifestCache, ShardReplacedWithTheSameSizeAndMtimeIsScannedAgain) {
  for (bool in_place : {false, true}) {
    SCOPED_TRACE(in_place ? "rewritten in place" : "replaced by another file");
    test::write_file(shard, original);
    ScanReport first;
    ASSERT_TRUE(build(&first).is_ok());
    const auto mtime = fs::last_write_time(shard);
    wait_for_the_clock(shard, dir.file("probe"));
    if (in_place) {
      test::write_file(shard, renamed());
    } else {
      test::write_file(dir.file("new.tar"), renamed());
      fs::rename(dir.file("new.tar"), shard);
    }
    fs::last_write_time(shard, mtime);
    ScanReport second;
    auto m = build(&second);
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    EXPECT_FALSE(second.from_cache) << "the replaced shard was read with its old manifest";
    auto info = local_file_system().stat(shard);
    ASSERT_TRUE(info.is_ok());
    EXPECT_EQ(m->sources[0].ctime_ns, info->ctime_ns);
    EXPECT_EQ(m->sources[0].inode, info->inode);
    ScanReport third;
    ASSERT_TRUE(build(&third).is_ok());
    EXPECT_TRUE(third.from_cache) << "the rescan refreshed the cache";
  }
}

// A cached manifest that looks fresh but is wrong (here: one sample fewer) is what only
// `shardyard manifest build` (kRebuild) can replace.
TEST_F(ManifestCache, RebuildReplacesWhateverIsCached) {
  ScanReport first;
  auto right = build(&first);
  ASSERT_TRUE(right.is_ok());
  Manifest wrong = *right;
  wrong.sources[0].samples.pop_back();
  wrong.fingerprint = compute_fingerprint(wrong);
  ASSERT_TRUE(save_manifest(wrong, first.cache_path).is_ok());
  ScanReport used;
  ASSERT_TRUE(build(&used).is_ok());
  EXPECT_TRUE(used.from_cache) << "the setup: the wrong manifest looks fresh";

  ScanReport rebuilt;
  auto m = build(&rebuilt, CacheMode::kRebuild);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_FALSE(rebuilt.from_cache);
  EXPECT_EQ(m->num_samples(), right->num_samples());
  EXPECT_EQ(test::read_file(first.cache_path), encode_manifest(*right));
}

TEST_F(ManifestCache, BypassRemovesAStaleOrDamagedCacheAndKeepsAGoodOne) {
  ScanReport first;
  ASSERT_TRUE(build(&first).is_ok());
  const std::string path = first.cache_path;
  ScanReport good;
  ASSERT_TRUE(build(&good, CacheMode::kBypass).is_ok());
  EXPECT_FALSE(good.from_cache);
  EXPECT_TRUE(fs::exists(path)) << "a cached manifest equal to the scan stays";
  EXPECT_TRUE(good.warnings.empty());

  wait_for_the_clock(shard, dir.file("probe"));
  test::write_file(shard, renamed());
  ScanReport stale;
  ASSERT_TRUE(build(&stale, CacheMode::kBypass).is_ok());
  EXPECT_FALSE(fs::exists(path)) << "a stale cached manifest was left in place";
  EXPECT_TRUE(stale.warnings.empty()) << stale.warnings[0];

  test::write_file(path, "damaged");
  ScanReport damaged;
  ASSERT_TRUE(build(&damaged, CacheMode::kBypass).is_ok());
  EXPECT_FALSE(fs::exists(path)) << "a damaged cached manifest was left in place";
  ScanReport none;
  ASSERT_TRUE(build(&none, CacheMode::kBypass).is_ok());
  EXPECT_FALSE(fs::exists(path)) << "kBypass writes nothing";
  EXPECT_TRUE(none.warnings.empty());
}

// A cache file of format version 1 (no ctime, inode or members_skipped) is never read with
// defaults for what it lacks: it is stale, rescanned and replaced.
TEST_F(ManifestCache, OldFormatVersionIsRebuiltNotMisread) {
  ScanReport first;
  ASSERT_TRUE(build(&first).is_ok());
  std::string bytes = test::read_file(first.cache_path);
  bytes[8] = 1;
  test::write_file(first.cache_path, bytes);
  auto old = load_manifest(first.cache_path);
  ASSERT_FALSE(old.is_ok());
  EXPECT_NE(old.status().message().find("older"), std::string::npos) << old.status().message();
  EXPECT_NE(old.status().message().find("shardyard manifest build"), std::string::npos);

  ScanReport second;
  ASSERT_TRUE(build(&second).is_ok());
  EXPECT_FALSE(second.from_cache);
  EXPECT_EQ(static_cast<unsigned char>(test::read_file(first.cache_path)[8]),
            kManifestFormatVersion);
}

// A cache file is checked by its checksum, and its stored fingerprint is taken as it is:
// computing it again over every key was most of a cached load's time. A manifest file a
// user names (load_manifest's default, `shardyard manifest show FILE`) is checked in full.
TEST_F(ManifestCache, ACachedManifestIsTakenWithItsStoredFingerprint) {
  ScanReport first;
  auto scanned = build(&first);
  ASSERT_TRUE(scanned.is_ok()) << scanned.status().to_string();
  Manifest other = *scanned;
  other.fingerprint ^= 0x5a5a;
  ASSERT_TRUE(save_manifest(other, first.cache_path).is_ok());

  ScanReport second;
  auto cached = build(&second);
  ASSERT_TRUE(cached.is_ok()) << cached.status().to_string();
  EXPECT_TRUE(second.from_cache);
  EXPECT_EQ(cached->fingerprint, other.fingerprint);
  auto full = load_manifest(first.cache_path);
  ASSERT_FALSE(full.is_ok());
  EXPECT_NE(full.status().message().find("fingerprint does not match"), std::string::npos)
      << full.status().message();

  // Damage is still caught by the checksum: rescanned, with the scan's fingerprint.
  std::string bytes = test::read_file(first.cache_path);
  bytes[bytes.size() / 2] ^= 0x01;
  test::write_file(first.cache_path, bytes);
  ScanReport third;
  auto rescanned = build(&third);
  ASSERT_TRUE(rescanned.is_ok()) << rescanned.status().to_string();
  EXPECT_FALSE(third.from_cache);
  EXPECT_EQ(rescanned->fingerprint, scanned->fingerprint);
}

// A cached manifest is mapped, not copied: its sample tables borrow the file's pages, which
// every process of the node loading it shares, and hold the same samples as the scan.
TEST_F(ManifestCache, ALoadedCacheBorrowsTheFilesPages) {
  ScanReport first, second;
  auto scanned = build(&first);
  ASSERT_TRUE(scanned.is_ok()) << scanned.status().to_string();
  auto cached = build(&second);
  ASSERT_TRUE(cached.is_ok()) << cached.status().to_string();
  ASSERT_TRUE(second.from_cache);
  ASSERT_EQ(cached->sources.size(), scanned->sources.size());
  for (size_t i = 0; i < cached->sources.size(); ++i) {
    const auto &c = cached->sources[i].samples, &s = scanned->sources[i].samples;
    EXPECT_TRUE(c.borrowed());
    EXPECT_FALSE(s.borrowed());
    EXPECT_EQ(c.encoded(), s.encoded());
  }
  // A copy shares the pages too; a change makes the copy its own.
  Manifest copy = *cached;
  EXPECT_TRUE(copy.sources[0].samples.borrowed());
  const SampleEntry last = copy.sources[0].samples.back();
  copy.sources[0].samples.pop_back();
  EXPECT_FALSE(copy.sources[0].samples.borrowed());
  EXPECT_EQ(copy.sources[0].samples.size() + 1, cached->sources[0].samples.size());
  EXPECT_EQ(cached->sources[0].samples.back().key, last.key);
}

// The cache is replaced by rename, never rewritten in place; a file cut short under a loaded
// manifest anyway reads zeros (io/fs/mapping_guard.h): wrong samples, which the reader then
// refuses, and a recorded fault naming the file, never a crash or a read past the bytes.
TEST_F(ManifestCache, ACacheCutShortUnderALoadedManifestReadsZeros) {
  ScanReport first;
  ASSERT_TRUE(build(&first).is_ok());
  auto loaded = load_manifest(first.cache_path);
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  ASSERT_TRUE(loaded->sources[0].samples.borrowed());
  ASSERT_EQ(::truncate(first.cache_path.c_str(), 0), 0);
  size_t n = 0;
  for (const auto& e : loaded->sources[0].samples) {
    EXPECT_EQ(e.key, "") << "zeros decode as empty keys";
    ++n;
  }
  EXPECT_EQ(n, loaded->sources[0].samples.size());
  Status fault = mapping_fault();
  ASSERT_FALSE(fault.is_ok());
  EXPECT_NE(fault.message().find(first.cache_path), std::string::npos) << fault.message();
}

TEST_F(ManifestCache, StrictScanUsesALenientCacheOnlyWithoutSkippedMembers) {
  const auto& fx = Fixtures::get();
  test::write_file(shard, test::read_file(fx.path("py_pax_size.tar")));  // files only
  ScanReport lenient;
  ASSERT_TRUE(build(&lenient).is_ok());
  options.strict_members = true;
  ScanReport strict;
  ASSERT_TRUE(build(&strict).is_ok());
  EXPECT_TRUE(strict.from_cache) << "no member was skipped: the scans agree";

  // A README: the lenient scan skipped it, a strict one refuses it, so the lenient cache
  // does not stand for a strict scan.
  test::write_file(shard, test::read_file(fx.path("py_nodot.tar")));
  options.strict_members = false;
  ScanReport with_readme;
  auto m = build(&with_readme);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m->members_skipped(), 1u);
  options.strict_members = true;
  ScanReport refused;
  auto r = build(&refused);
  ASSERT_FALSE(r.is_ok()) << "a strict scan read the lenient cache";
  EXPECT_NE(r.status().message().find("README"), std::string::npos) << r.status().message();
}

// A loose file of a directory source rewritten in place (same name, size and mtime).
TEST(ManifestCacheDirectory, LooseFileRewrittenInPlaceIsNoticed) {
  TempDir dir, cache;
  test::write_file(dir.file("a.cls"), "1");
  test::write_file(dir.file("b.cls"), "2");
  ScanOptions options;
  options.cache_dir = cache.path();
  ScanReport first, second;
  ASSERT_TRUE(build_manifest(local_file_system(), {dir.path()}, options, &first).is_ok());
  const auto mtime = fs::last_write_time(dir.file("a.cls"));
  wait_for_the_clock(dir.file("a.cls"), cache.file("probe"));
  test::write_file(dir.file("a.cls"), "9");
  fs::last_write_time(dir.file("a.cls"), mtime);
  ASSERT_TRUE(build_manifest(local_file_system(), {dir.path()}, options, &second).is_ok());
  EXPECT_FALSE(second.from_cache);
}

}  // namespace
}  // namespace shardyard::io
