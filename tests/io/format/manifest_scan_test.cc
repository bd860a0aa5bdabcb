// Tests of io/format/manifest_scan.h: building a manifest over many sources, the manifest cache,
// directory sources, and the atomic manifest file.
#include "io/format/manifest_scan.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "tar_fixtures.h"

namespace shardyard::io {
namespace {

namespace fs = std::filesystem;
using test::Fixtures;
using test::TempDir;

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

void expect_same_sources(const Manifest& a, const Manifest& b) {
  ASSERT_EQ(a.sources.size(), b.sources.size());
  EXPECT_EQ(a.fingerprint, b.fingerprint);
  for (size_t i = 0; i < a.sources.size(); ++i) {
    EXPECT_EQ(a.sources[i].uri, b.sources[i].uri);
    EXPECT_EQ(a.sources[i].samples.size(), b.sources[i].samples.size());
    EXPECT_EQ(a.sources[i].mtime_ns, b.sources[i].mtime_ns);
    EXPECT_EQ(a.sources[i].damaged, b.sources[i].damaged);
  }
}

// Three shards copied from the fixtures: shard-000.tar, shard-001.tar, shard-002.tar.gz.
class ShardDir : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto& fx = Fixtures::get();
    fs::copy_file(fx.path("py_gnu.tar"), dir.file("shard-000.tar"));
    fs::copy_file(fx.path("gnu_posix.tar"), dir.file("shard-001.tar"));
    fs::copy_file(fx.path("py_pax.tar.gz"), dir.file("shard-002.tar.gz"));
  }
  std::vector<std::string> patterns() const {
    return {dir.file("shard-{000..001}.tar"), dir.file("shard-002.tar.gz")};
  }
  TempDir dir;
  TempDir cache;
};

TEST_F(ShardDir, BuildsOneEntryPerSourceInOrderWithAFingerprint) {
  for (unsigned threads : {1u, 3u, 0u}) {
    ScanOptions options;
    options.threads = threads;
    ScanReport report;
    auto m = build_manifest(local_file_system(), patterns(), options, &report);
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    ASSERT_EQ(m->sources.size(), 3u);
    EXPECT_EQ(m->sources[0].uri, dir.file("shard-000.tar"));
    EXPECT_EQ(m->sources[1].uri, dir.file("shard-001.tar"));
    EXPECT_EQ(m->sources[2].uri, dir.file("shard-002.tar.gz"));
    EXPECT_EQ(m->sources[2].kind, SourceKind::kTarGz);
    EXPECT_EQ(m->num_samples(), 24u);
    EXPECT_EQ(m->fingerprint, compute_fingerprint(*m));
    EXPECT_FALSE(report.from_cache);
    EXPECT_TRUE(report.cache_path.empty()) << "no cache dir, no cache";
    EXPECT_TRUE(report.warnings.empty());
  }
}

TEST_F(ShardDir, SecondBuildComesFromTheCache) {
  ScanOptions options;
  options.cache_dir = cache.file("nested/cache");  // created on demand
  ScanReport first;
  auto a = build_manifest(local_file_system(), patterns(), options, &first);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_FALSE(first.from_cache);
  ASSERT_FALSE(first.cache_path.empty());
  EXPECT_EQ(first.cache_path.rfind(options.cache_dir + "/", 0), 0u) << first.cache_path;
  EXPECT_TRUE(fs::exists(first.cache_path));
  EXPECT_TRUE(first.warnings.empty()) << first.warnings[0];

  ScanReport second;
  auto b = build_manifest(local_file_system(), patterns(), options, &second);
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  EXPECT_TRUE(second.from_cache);
  EXPECT_EQ(second.cache_path, first.cache_path);
  expect_same_sources(*a, *b);
  EXPECT_EQ(list_dir(options.cache_dir).size(), 1u) << "one file per list of sources";
}

TEST_F(ShardDir, TouchingOrGrowingAShardInvalidatesTheCache) {
  ScanOptions options;
  options.cache_dir = cache.path();
  ScanReport report;
  ASSERT_TRUE(build_manifest(local_file_system(), patterns(), options, &report).is_ok());
  ASSERT_FALSE(report.from_cache);

  const std::string shard = dir.file("shard-001.tar");
  fs::last_write_time(shard, fs::last_write_time(shard) + std::chrono::seconds(5));
  ScanReport touched;
  auto m = build_manifest(local_file_system(), patterns(), options, &touched);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_FALSE(touched.from_cache) << "mtime changed";
  auto info = local_file_system().stat(shard);
  ASSERT_TRUE(info.is_ok());
  EXPECT_EQ(m->sources[1].mtime_ns, info->mtime_ns);

  ScanReport again;
  ASSERT_TRUE(build_manifest(local_file_system(), patterns(), options, &again).is_ok());
  EXPECT_TRUE(again.from_cache) << "the rescan refreshed the cache";

  // Same mtime, other size.
  const auto mtime = fs::last_write_time(shard);
  fs::resize_file(shard, fs::file_size(shard) + 10240);
  fs::last_write_time(shard, mtime);
  ScanReport grown;
  ASSERT_TRUE(build_manifest(local_file_system(), patterns(), options, &grown).is_ok());
  EXPECT_FALSE(grown.from_cache) << "size changed";
}

TEST_F(ShardDir, OtherSourceListsUseOtherCacheFiles) {
  ScanOptions options;
  options.cache_dir = cache.path();
  ScanReport a, b;
  ASSERT_TRUE(build_manifest(local_file_system(), patterns(), options, &a).is_ok());
  ASSERT_TRUE(
      build_manifest(local_file_system(), {dir.file("shard-000.tar")}, options, &b).is_ok());
  EXPECT_FALSE(b.from_cache);
  EXPECT_NE(a.cache_path, b.cache_path);
}

TEST_F(ShardDir, UnreadableCacheFileIsRebuilt) {
  ScanOptions options;
  options.cache_dir = cache.path();
  ScanReport first;
  ASSERT_TRUE(build_manifest(local_file_system(), patterns(), options, &first).is_ok());
  test::write_file(first.cache_path, "garbage, not a manifest");
  ScanReport second;
  auto m = build_manifest(local_file_system(), patterns(), options, &second);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_FALSE(second.from_cache);
  EXPECT_TRUE(load_manifest(first.cache_path).is_ok()) << "rewritten";
}

TEST_F(ShardDir, CacheThatCannotBeWrittenIsAWarningNotAnError) {
  test::write_file(cache.file("a_file"), "x");
  ScanOptions options;
  options.cache_dir = cache.file("a_file/cache");  // below a regular file
  ScanReport report;
  auto m = build_manifest(local_file_system(), patterns(), options, &report);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  ASSERT_EQ(report.warnings.size(), 1u);
  EXPECT_NE(report.warnings[0].find("manifest cache not written"), std::string::npos)
      << report.warnings[0];
  EXPECT_TRUE(report.skipped.empty()) << "a cache not written skips nothing";
}

TEST_F(ShardDir, DamagedSourcesAreSkippedWithAWarningUnderSkipOnly) {
  test::write_file(dir.file("shard-001.tar"),
                   "not a tar file at all, padded" + std::string(600, ' '));
  ScanOptions options;
  options.cache_dir = cache.path();
  auto fail = build_manifest(local_file_system(), patterns(), options, nullptr);
  ASSERT_FALSE(fail.is_ok());
  EXPECT_EQ(fail.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(fail.status().message().find(dir.file("shard-001.tar")), std::string::npos);

  options.on_corrupt = OnCorrupt::kSkip;
  ScanReport skip;
  auto m = build_manifest(local_file_system(), patterns(), options, &skip);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m->num_damaged(), 1u);
  EXPECT_EQ(m->num_samples(), 16u);
  ASSERT_EQ(skip.skipped.size(), 1u);
  EXPECT_NE(skip.skipped[0].find(dir.file("shard-001.tar")), std::string::npos);
  EXPECT_TRUE(skip.warnings.empty()) << "damage is reported as skipped, not as a warning";

  // The cached manifest with damage is reused under kSkip, never under kFail.
  ScanReport cached;
  ASSERT_TRUE(build_manifest(local_file_system(), patterns(), options, &cached).is_ok());
  EXPECT_TRUE(cached.from_cache);
  EXPECT_EQ(cached.skipped.size(), 1u);
  options.on_corrupt = OnCorrupt::kFail;
  ScanReport strict;
  EXPECT_FALSE(build_manifest(local_file_system(), patterns(), options, &strict).is_ok());
  EXPECT_FALSE(strict.from_cache);
}

TEST_F(ShardDir, MissingShardFailsOrIsSkipped) {
  std::vector<std::string> with_missing = {dir.file("shard-{000..003}.tar")};
  auto fail = build_manifest(local_file_system(), with_missing, ScanOptions{}, nullptr);
  ASSERT_FALSE(fail.is_ok());
  EXPECT_EQ(fail.status().code(), StatusCode::kNotFound);
  EXPECT_NE(fail.status().message().find("shard-002.tar"), std::string::npos);
  ScanOptions skip;
  skip.on_corrupt = OnCorrupt::kSkip;
  ScanReport report;
  auto m = build_manifest(local_file_system(), with_missing, skip, &report);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m->sources.size(), 4u);
  EXPECT_EQ(m->num_damaged(), 2u);
  EXPECT_EQ(report.skipped.size(), 2u);
}

TEST(DirectorySource, LooseFilesAreGroupedIntoSamplesByKey) {
  TempDir dir;
  fs::create_directories(dir.file("loose/sub"));
  for (const auto& [name, bytes] :
       std::vector<std::pair<std::string, std::string>>{{"a.cls", "1"},
                                                        {"a.jpg", "JPEGDATA"},
                                                        {"b.cls", "22"},
                                                        {"sub/c.input.bin", "xyz"},
                                                        {"sub/c.json", "{}"}}) {
    test::write_file(dir.file("loose/" + name), bytes);
  }
  auto m = build_manifest(local_file_system(), {dir.file("loose")}, ScanOptions{}, nullptr);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  ASSERT_EQ(m->sources.size(), 1u);
  const auto& s = m->sources[0];
  EXPECT_EQ(s.kind, SourceKind::kDirectory);
  EXPECT_EQ(s.files,
            (std::vector<std::string>{"a.cls", "a.jpg", "b.cls", "sub/c.input.bin", "sub/c.json"}));
  EXPECT_EQ(s.size_bytes, 16u);
  ASSERT_EQ(s.samples.size(), 3u);
  EXPECT_EQ(s.samples[0].key, "a");
  EXPECT_EQ(s.samples[0].begin, 0u);
  EXPECT_EQ(s.samples[0].end, 2u);
  EXPECT_EQ(s.samples[0].payload_bytes, 9u);
  EXPECT_EQ(s.samples[1].key, "b");
  EXPECT_EQ(s.samples[2].key, "sub/c");
  EXPECT_EQ(s.samples[2].begin, 3u);
  EXPECT_EQ(s.samples[2].end, 5u);
}

// A cached manifest of a loose-file directory must not hide files added later, at the top
// or in a subdirectory (the listing is recursive).
TEST(DirectorySource, CachedManifestSeesFilesAddedLater) {
  TempDir dir, cache;
  fs::create_directories(dir.file("loose/sub"));
  test::write_file(dir.file("loose/a.cls"), "1");
  test::write_file(dir.file("loose/sub/b.cls"), "2");
  ScanOptions options;
  options.cache_dir = cache.path();
  auto count = [&](ScanReport* report) {
    auto m = build_manifest(local_file_system(), {dir.file("loose")}, options, report);
    EXPECT_TRUE(m.is_ok()) << m.status().to_string();
    return m.is_ok() ? m->num_samples() : 0;
  };
  ScanReport first, second, top, nested;
  EXPECT_EQ(count(&first), 2u);
  EXPECT_EQ(count(&second), 2u);
  test::write_file(dir.file("loose/c.cls"), "3");
  EXPECT_EQ(count(&top), 3u) << "a file added at the top";
  test::write_file(dir.file("loose/sub/d.cls"), "4");
  EXPECT_EQ(count(&nested), 4u) << "a file added in a subdirectory";
}

TEST(ManifestFile, SaveThenLoadRoundTripsAndLeavesNoTemporaryFile) {
  TempDir dir;
  const auto& fx = Fixtures::get();
  auto m = build_manifest(local_file_system(), {fx.path("py_gnu.tar")}, ScanOptions{}, nullptr);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  const std::string path = dir.file("dataset.manifest");
  ASSERT_TRUE(save_manifest(*m, path).is_ok());
  ASSERT_TRUE(save_manifest(*m, path).is_ok()) << "overwrites";
  EXPECT_EQ(list_dir(dir.path()), (std::vector<std::string>{"dataset.manifest"}));
  auto back = load_manifest(path);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  expect_same_sources(*m, *back);
  EXPECT_EQ(test::read_file(path), encode_manifest(*m));
}

TEST(ManifestFile, ErrorsNameThePath) {
  TempDir dir;
  Manifest m;
  m.fingerprint = compute_fingerprint(m);
  Status st = save_manifest(m, dir.file("no/such/dir/x.manifest"));
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find(dir.file("no/such/dir/x.manifest")), std::string::npos)
      << st.message();
  EXPECT_EQ(list_dir(dir.path()).size(), 0u);

  auto missing = load_manifest(dir.file("absent.manifest"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(dir.file("absent.manifest")), std::string::npos);

  test::write_file(dir.file("bad.manifest"), "SYMANIF");
  auto bad = load_manifest(dir.file("bad.manifest"));
  EXPECT_EQ(bad.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(bad.status().message().find(dir.file("bad.manifest")), std::string::npos);
}

// Sets an environment variable for the scope's life and restores it afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(ManifestFile, DefaultCacheDirFollowsTheEnvironment) {
  ScopedEnv home("HOME", "/home/someone");
  {
    ScopedEnv a("SHARDYARD_CACHE_DIR", "/fast/cache");
    ScopedEnv b("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(default_cache_dir(), "/fast/cache");
  }
  {
    ScopedEnv a("SHARDYARD_CACHE_DIR", nullptr);
    ScopedEnv b("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(default_cache_dir(), "/xdg/shardyard");
  }
  {
    ScopedEnv a("SHARDYARD_CACHE_DIR", "");
    ScopedEnv b("XDG_CACHE_HOME", nullptr);
    EXPECT_EQ(default_cache_dir(), "/home/someone/.cache/shardyard");
  }
}

}  // namespace
}  // namespace shardyard::io
