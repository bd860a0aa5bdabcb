// Tests of io/format/tar.h and the tar side of io/format/manifest_scan.h against archives written
// by real tar writers (Python's tarfile and GNU tar in every format), and against damaged archives.
#include "io/format/tar.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "io/format/gzip.h"
#include "io/format/manifest_scan.h"
#include "io/fs/file_system.h"
#include "tar_fixtures.h"

namespace shardyard::io {
namespace {

using test::ExpectedSample;
using test::Fixtures;
using test::Member;
using test::TempDir;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::unique_ptr<ByteStream> open_stream(const std::string& path) {
  auto file = local_file_system().open(path);
  EXPECT_TRUE(file.is_ok()) << file.status().to_string();
  std::shared_ptr<RandomAccessFile> shared(std::move(file).value());
  return ends_with(path, ".gz") ? gzip_stream(shared) : file_stream(shared);
}

// The archive's bytes, inflated when it is gzip-compressed.
std::string archive_bytes(const std::string& path) {
  if (!ends_with(path, ".gz")) return test::read_file(path);
  auto stream = open_stream(path);
  std::string out;
  char buf[4096];
  for (;;) {
    auto got = stream->read(buf, sizeof buf);
    EXPECT_TRUE(got.is_ok()) << got.status().to_string();
    if (!got.is_ok() || *got == 0) break;
    out.append(buf, *got);
  }
  return out;
}

Result<SourceEntry> scan(const std::string& path, OnCorrupt policy = OnCorrupt::kFail) {
  return scan_source(local_file_system(), SourceRef{path, kind_from_name(path)}, policy);
}

// A member path as tarfile lists it: GNU tar stores directories with a trailing slash.
std::string listed_path(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// A member of an archive's listing by path.
Member member(const std::string& archive, const std::string& path) {
  for (const auto& m : Fixtures::get().members(archive))
    if (m.path == path) return m;
  ADD_FAILURE() << archive << " has no member " << path;
  return {};
}

// The error names the file and the byte offset of the damage.
void expect_damage_error(const Status& st, StatusCode code, const std::string& file,
                         const std::string& says, int64_t offset = -1) {
  ASSERT_FALSE(st.is_ok()) << file << ": damage not reported";
  EXPECT_EQ(st.code(), code) << st.to_string();
  EXPECT_NE(st.message().find(file), std::string::npos) << "names the file: " << st.message();
  EXPECT_NE(st.message().find(says), std::string::npos)
      << "says '" << says << "': " << st.message();
  if (offset >= 0) {
    EXPECT_NE(st.message().find("at byte " + std::to_string(offset)), std::string::npos)
        << "names byte " << offset << ": " << st.message();
  }
}

// Under kSkip: the source is marked damaged and keeps exactly the samples that are whole:
// every one before the damage, when the damage does not lie in a payload of the sample in
// progress.
void expect_kept_prefix(const SourceEntry& e, const std::vector<ExpectedSample>& want,
                        size_t whole_before_damage) {
  EXPECT_TRUE(e.damaged);
  EXPECT_FALSE(e.damage.empty());
  EXPECT_NE(e.damage.find(e.uri), std::string::npos) << e.damage;
  ASSERT_EQ(e.samples.size(), whole_before_damage);
  for (size_t i = 0; i < e.samples.size(); ++i) {
    EXPECT_EQ(e.samples[i].key, want[i].key);
    EXPECT_EQ(e.samples[i].begin, want[i].begin);
    EXPECT_EQ(e.samples[i].end, want[i].end);
    EXPECT_EQ(e.samples[i].payload_bytes, want[i].payload_bytes);
  }
}

// ---- well-formed archives --------------------------------------------------------------

TEST(TarFormats, ScanTarReportsEveryMemberWhereTarfileFoundIt) {
  const auto& fx = Fixtures::get();
  for (const auto& name : Fixtures::good_archives()) {
    SCOPED_TRACE(name);
    const auto want = fx.members(name);
    std::vector<TarEntry> got;
    auto stream = open_stream(fx.path(name));
    Status st = scan_tar(*stream, fx.path(name), [&](const TarEntry& e) {
      got.push_back(e);
      return Status::ok();
    });
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      SCOPED_TRACE(want[i].path);
      EXPECT_EQ(listed_path(got[i].path), want[i].path);
      EXPECT_EQ(got[i].regular, want[i].type == 'f');
      EXPECT_EQ(got[i].size, want[i].size);
      EXPECT_EQ(got[i].data_offset, want[i].offset_data);
      EXPECT_EQ(got[i].end_offset(), want[i].end());
      if (name == "py_pax_global.tar" && i == 0) {
        // The global header before the first member counts as part of it, or not.
        EXPECT_TRUE(got[i].start_offset == 0 || got[i].start_offset == want[i].offset);
      } else {
        EXPECT_EQ(got[i].start_offset, want[i].offset);
      }
    }
  }
}

TEST(TarFormats, ParseTarBufferHandsOutThePayloadsWritten) {
  const auto& fx = Fixtures::get();
  for (const auto& name : Fixtures::good_archives()) {
    SCOPED_TRACE(name);
    const std::string bytes = archive_bytes(fx.path(name));
    const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
    const auto want = fx.members(name);
    size_t i = 0;
    Status st = parse_tar_buffer(
        data, bytes.size(), 0, name, [&](const TarEntry& e, const uint8_t* payload) -> Status {
          EXPECT_LT(i, want.size());
          if (i >= want.size()) return internal_error("extra entry");
          EXPECT_EQ(listed_path(e.path), want[i].path);
          EXPECT_EQ(e.data_offset, want[i].offset_data);
          EXPECT_EQ(payload, data + want[i].offset_data);
          if (e.regular) {
            EXPECT_EQ(std::string(reinterpret_cast<const char*>(payload), e.size),
                      test::payload(e.path, e.size))
                << e.path;
          }
          ++i;
          return Status::ok();
        });
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_EQ(i, want.size());
  }
}

TEST(TarFormats, ParseTarBufferStartsAtAnyMemberOffset) {
  // Readers parse a run of samples cut out of the archive at its first header.
  const auto& fx = Fixtures::get();
  const std::string bytes = test::read_file(fx.path("py_pax.tar"));
  for (const auto& s : fx.samples("py_pax.tar")) {
    std::vector<std::string> paths;
    Status st =
        parse_tar_buffer(reinterpret_cast<const uint8_t*>(bytes.data()) + s.begin, s.end - s.begin,
                         s.begin, "py_pax.tar", [&](const TarEntry& e, const uint8_t*) {
                           EXPECT_GE(e.start_offset, s.begin);
                           paths.push_back(e.path);
                           return Status::ok();
                         });
    ASSERT_TRUE(st.is_ok()) << s.key << ": " << st.to_string();
    std::vector<std::string> want;
    for (const auto& m : s.members) want.push_back(m.path);
    EXPECT_EQ(paths, want) << s.key;
  }
}

TEST(TarFormats, ScanSourceGroupsMembersIntoSamplesWithByteRanges) {
  const auto& fx = Fixtures::get();
  for (const auto& name : Fixtures::good_archives()) {
    SCOPED_TRACE(name);
    auto e = scan(fx.path(name));
    ASSERT_TRUE(e.is_ok()) << e.status().to_string();
    const auto want = fx.samples(name);
    EXPECT_EQ(e->uri, fx.path(name));
    EXPECT_EQ(e->kind, ends_with(name, ".gz") ? SourceKind::kTarGz : SourceKind::kTar);
    EXPECT_EQ(e->size_bytes, test::read_file(fx.path(name)).size());
    EXPECT_GT(e->mtime_ns, 0);
    EXPECT_FALSE(e->damaged) << e->damage;
    ASSERT_EQ(e->samples.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      SCOPED_TRACE(want[i].key);
      EXPECT_EQ(e->samples[i].key, want[i].key);
      if (name == "py_pax_global.tar" && i == 0) {
        EXPECT_LE(e->samples[i].begin, want[i].begin);
      } else {
        EXPECT_EQ(e->samples[i].begin, want[i].begin);
      }
      EXPECT_EQ(e->samples[i].end, want[i].end);
      EXPECT_EQ(e->samples[i].payload_bytes, want[i].payload_bytes);
    }
  }
  EXPECT_EQ(fx.samples("py_pax.tar").size(), 8u);
  EXPECT_EQ(fx.samples("py_ustar.tar").size(), 7u) << "ustar cannot hold the 272-byte name";
}

TEST(TarFormats, LongNamesAndDottedFieldsKeepTheirFullKey) {
  const auto& fx = Fixtures::get();
  const std::string very_long =
      std::string(120, 'p') + "/" + std::string(100, 'q') + "/" + std::string(50, 'r') + "/s0006";
  const std::string long_key = std::string(60, 'd') + "/" + std::string(50, 'e') + "/s0004";
  for (const std::string name : {"py_gnu.tar", "py_pax.tar", "gnu_gnu.tar", "gnu_posix.tar",
                                 "py_ustar.tar", "gnu_ustar.tar"}) {
    auto e = scan(fx.path(name));
    ASSERT_TRUE(e.is_ok()) << name << ": " << e.status().to_string();
    std::vector<std::string> keys;
    for (const auto& s : e->samples) keys.push_back(s.key);
    auto has = [&](const std::string& k) {
      return std::find(keys.begin(), keys.end(), k) != keys.end();
    };
    EXPECT_TRUE(has(long_key)) << name << ": a 121-byte path (ustar prefix, GNU L or PAX)";
    EXPECT_TRUE(has("a/b/x")) << name;
    EXPECT_TRUE(has("dir.with.dots/s0003")) << name << ": dots in directories are not keys";
    EXPECT_TRUE(has("s0007")) << name << ": field a.b.c";
    if (name.find("ustar") == std::string::npos) {
      EXPECT_TRUE(has(very_long)) << name << ": a 277-byte path";
    }
  }
}

TEST(TarFormats, PaxSizeRecordOverridesTheHeaderSizeField) {
  const auto& fx = Fixtures::get();
  // The ustar size field of s0000.jpg says 0; only the PAX record says 700.
  auto e = scan(fx.path("py_pax_size.tar"));
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  ASSERT_EQ(e->samples.size(), 2u);
  EXPECT_EQ(e->samples[0].key, "s0000");
  EXPECT_EQ(e->samples[0].payload_bytes, 701u);
  EXPECT_EQ(e->samples[1].key, "s0001");
  EXPECT_EQ(e->samples[1].begin, member("py_pax_size.tar", "s0001.cls").offset);
}

TEST(TarFormats, GzipContentIsRecognisedWhateverTheName) {
  const auto& fx = Fixtures::get();
  TempDir dir;
  test::write_file(dir.file("renamed.tar"), test::read_file(fx.path("py_pax.tar.gz")));
  auto e = scan(dir.file("renamed.tar"));
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  EXPECT_EQ(e->kind, SourceKind::kTarGz);
  EXPECT_EQ(e->samples.size(), fx.samples("py_pax.tar.gz").size());
}

// ---- damaged archives ------------------------------------------------------------------

class DamagedTar : public ::testing::Test {
 protected:
  const Fixtures& fx = Fixtures::get();
  TempDir dir;
  const std::string good = test::read_file(fx.path("py_ustar.tar"));
  const std::vector<ExpectedSample> samples = fx.samples("py_ustar.tar");
  const Member big = member("py_ustar.tar", "big.bin");  // first member of sample 5
  std::string write(const std::string& name, const std::string& bytes) {
    test::write_file(dir.file(name), bytes);
    return dir.file(name);
  }
};

TEST_F(DamagedTar, TruncatedMidPayloadNamesFileAndOffset) {
  const std::string path = write("cut.tar", good.substr(0, big.offset_data + 30000));
  auto fail = scan(path);
  expect_damage_error(fail.status(), StatusCode::kCorrupt, path, "truncated", big.offset);
  auto skip = scan(path, OnCorrupt::kSkip);
  ASSERT_TRUE(skip.is_ok()) << skip.status().to_string();
  // big.bin's header was read, so every sample before it is known to be complete.
  expect_kept_prefix(*skip, samples, 5);
}

// The damage lies in the payload of a sample's second member: that sample is dropped, the
// whole one before it is kept.
TEST_F(DamagedTar, TruncatedInASamplesSecondMemberDropsOnlyThatSample) {
  const Member cls = member("py_ustar.tar", "big.cls");  // second member of sample 5
  const std::string path = write("cut.tar", good.substr(0, cls.offset_data + 2));
  expect_damage_error(scan(path).status(), StatusCode::kCorrupt, path, "truncated", cls.offset);
  auto skip = scan(path, OnCorrupt::kSkip);
  ASSERT_TRUE(skip.is_ok()) << skip.status().to_string();
  expect_kept_prefix(*skip, samples, 5);
}

TEST_F(DamagedTar, TruncatedMidHeaderNamesFileAndOffset) {
  const std::string path = write("cut.tar", good.substr(0, big.offset + 100));
  expect_damage_error(scan(path).status(), StatusCode::kCorrupt, path, "truncated", big.offset);
  auto skip = scan(path, OnCorrupt::kSkip);
  ASSERT_TRUE(skip.is_ok()) << skip.status().to_string();
  expect_kept_prefix(*skip, samples, 5);
}

TEST_F(DamagedTar, TruncatedAfterAnExtensionHeaderIsReported) {
  const std::string pax = test::read_file(fx.path("py_pax.tar"));
  const Member m =
      member("py_pax.tar", std::string(60, 'd') + "/" + std::string(50, 'e') + "/s0004.cls");
  ASSERT_LT(m.offset + 512, m.offset_data) << "the member has a PAX header";
  const std::string path = write("cut.tar", pax.substr(0, m.offset_data - 512));
  expect_damage_error(scan(path).status(), StatusCode::kCorrupt, path, "extension header");
}

TEST_F(DamagedTar, BadHeaderChecksumNamesFileAndOffset) {
  std::string bad = good;
  bad[big.offset + 3] ^= 0x20;  // a letter of the member name
  const std::string path = write("flip.tar", bad);
  expect_damage_error(scan(path).status(), StatusCode::kCorrupt, path, "checksum", big.offset);
  auto skip = scan(path, OnCorrupt::kSkip);
  ASSERT_TRUE(skip.is_ok()) << skip.status().to_string();
  expect_kept_prefix(*skip, samples, 5);
}

TEST_F(DamagedTar, NonTarFileIsCorruptAtByteZero) {
  std::string text;
  while (text.size() < 3000) text += "this is not a tar archive, just some text.\n";
  const std::string path = write("notes.tar", text);
  expect_damage_error(scan(path).status(), StatusCode::kCorrupt, path, "checksum", 0);
  auto skip = scan(path, OnCorrupt::kSkip);
  ASSERT_TRUE(skip.is_ok());
  EXPECT_TRUE(skip->damaged);
  EXPECT_TRUE(skip->samples.empty());
}

TEST_F(DamagedTar, EmptyFileAndEmptyArchiveHaveNoSamples) {
  std::string python_empty = dir.file("python_empty.tar");
  ASSERT_EQ(test::run_command("python3 -c \"import tarfile; tarfile.open('" + python_empty +
                              "', 'w').close()\""),
            0);
  for (const std::string& path :
       {write("empty.tar", ""), write("end_blocks.tar", test::tar_end()), python_empty}) {
    expect_damage_error(scan(path).status(), StatusCode::kCorrupt, path, "no samples");
    auto skip = scan(path, OnCorrupt::kSkip);
    ASSERT_TRUE(skip.is_ok()) << skip.status().to_string();
    EXPECT_TRUE(skip->damaged);
    EXPECT_TRUE(skip->samples.empty());
    ScanOptions options;
    options.on_corrupt = OnCorrupt::kSkip;
    auto m = build_manifest(local_file_system(), {path}, options, nullptr);
    ASSERT_FALSE(m.is_ok()) << "a dataset without samples";
    EXPECT_NE(m.status().message().find("no readable samples"), std::string::npos);
  }
}

TEST_F(DamagedTar, MissingShardIsNotFoundOrSkipped) {
  const std::string path = dir.file("train-000042.tar");
  expect_damage_error(scan(path).status(), StatusCode::kNotFound, path, "missing shard");
  auto skip = scan(path, OnCorrupt::kSkip);
  ASSERT_TRUE(skip.is_ok()) << skip.status().to_string();
  EXPECT_TRUE(skip->damaged);
  EXPECT_TRUE(skip->samples.empty());
  EXPECT_NE(skip->damage.find(path), std::string::npos) << skip->damage;
}

TEST_F(DamagedTar, TruncatedGzipNamesTheFile) {
  // Half of the compressed bytes: the stream ends inside a deflate block.
  const std::string gz = test::read_file(fx.path("gnu_gnu.tar.gz"));
  const std::string path = write("cut.tar.gz", gz.substr(0, gz.size() / 2));
  expect_damage_error(scan(path).status(), StatusCode::kCorrupt, path, "truncated");
  auto skip = scan(path, OnCorrupt::kSkip);
  ASSERT_TRUE(skip.is_ok()) << skip.status().to_string();
  EXPECT_TRUE(skip->damaged);
  const auto want = fx.samples("gnu_gnu.tar.gz");
  ASSERT_LT(skip->samples.size(), want.size());
  for (size_t i = 0; i < skip->samples.size(); ++i) EXPECT_EQ(skip->samples[i].key, want[i].key);
}

TEST_F(DamagedTar, GarbageInsideGzipIsCorrupt) {
  std::string gz = test::read_file(fx.path("gnu_gnu.tar.gz"));
  for (size_t i = gz.size() / 3; i < gz.size() / 3 + 40; ++i)
    gz[i] = static_cast<char>(gz[i] ^ 0x5a);
  const std::string path = write("garbage.tar.gz", gz);
  expect_damage_error(scan(path).status(), StatusCode::kCorrupt, path, "");
}

TEST_F(DamagedTar, FieldRepeatedRightAfterItselfIsCorrupt) {
  const std::string path =
      write("repeat.tar",
            test::tar_member("a.cls", "1") + test::tar_member("a.cls", "2") + test::tar_end());
  expect_damage_error(scan(path).status(), StatusCode::kCorrupt, path, "repeats", 1024);
}

// A sample "a" made of a.cls, a.jpg, a.cls: the manifest counts three fields' bytes but a
// reader can return only one "cls". The scan must refuse it like the consecutive repeat.
TEST_F(DamagedTar, FieldRepeatedLaterInTheSameSampleIsCorrupt) {
  const std::string path =
      write("repeat.tar", test::tar_member("a.cls", "1") + test::tar_member("a.jpg", "JPEG") +
                              test::tar_member("a.cls", "2") + test::tar_end());
  auto e = scan(path);
  EXPECT_FALSE(e.is_ok()) << "a.cls twice in sample 'a' was accepted with payload_bytes "
                          << (e.is_ok() && !e->samples.empty() ? e->samples[0].payload_bytes : 0);
}

// Under kSkip, damaged_at says where the skipped part of the source begins: an offset in
// the source, after the kept samples.
TEST_F(DamagedTar, DamagedAtIsAnOffsetInsideTheSource) {
  const std::string path = write("cut.tar", good.substr(0, big.offset_data + 30000));
  auto skip = scan(path, OnCorrupt::kSkip);
  ASSERT_TRUE(skip.is_ok()) << skip.status().to_string();
  ASSERT_TRUE(skip->damaged);
  ASSERT_FALSE(skip->samples.empty());
  EXPECT_GE(skip->damaged_at, skip->samples.back().end);
  EXPECT_LE(skip->damaged_at, skip->size_bytes)
      << "damaged_at points " << skip->damaged_at - skip->size_bytes << " bytes past the end of a "
      << skip->size_bytes << "-byte file";
}

// A GNU base-256 size of 2^64 - 512 makes the padded payload wrap the stream position back
// to the member's own header. A scan must end (with an error), not walk the same header
// forever.
TEST(TarRobustness, ScanTarRejectsASizeThatWrapsAroundTheOffset) {
  std::string archive = test::tar_member("a.cls", "");  // header only, at 0
  std::string header = test::tar_header("b.bin", 0);    // at 512
  header[124] = static_cast<char>(0x80);
  for (int i = 125; i < 136; ++i) header[i] = 0;
  for (int i = 128; i < 134; ++i) header[i] = static_cast<char>(0xff);
  header[134] = static_cast<char>(0xfe);
  header[135] = 0;
  test::fix_checksum(header, 0);
  archive += header + std::string(2048, '\0');
  int calls = 0;
  auto stream = memory_stream(archive);
  Status st = scan_tar(*stream, "wrap.tar", [&](const TarEntry&) {
    return ++calls > 50 ? internal_error("on_entry called 50 times for 2 headers") : Status::ok();
  });
  EXPECT_LE(calls, 2);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt) << st.to_string();
}

TEST(TarRobustness, ParseTarBufferRejectsASizeBeyondTheBuffer) {
  std::string archive = test::tar_member("a.cls", "x");
  archive.resize(archive.size() - 512);  // header kept, payload block cut
  Status st = parse_tar_buffer(reinterpret_cast<const uint8_t*>(archive.data()), archive.size(),
                               4096, "run.tar", [](const TarEntry&, const uint8_t*) {
                                 ADD_FAILURE() << "no entry should be handed out";
                                 return Status::ok();
                               });
  expect_damage_error(st, StatusCode::kCorrupt, "run.tar", "truncated", 4096);
}

TEST(TarRobustness, ScanTarStopsAtTheFirstZeroBlockOrACleanEnd) {
  const std::string two = test::tar_member("a.cls", "1") + test::tar_member("b.cls", "2");
  for (const std::string& archive : {two, two + test::tar_end(), two + std::string(512, '\0')}) {
    std::vector<std::string> paths;
    auto stream = memory_stream(archive);
    Status st = scan_tar(*stream, "x.tar", [&](const TarEntry& e) {
      paths.push_back(e.path);
      return Status::ok();
    });
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_EQ(paths, (std::vector<std::string>{"a.cls", "b.cls"}));
  }
}

TEST(TarRobustness, ErrorFromTheCallbackStopsTheScan) {
  const std::string archive =
      test::tar_member("a.cls", "1") + test::tar_member("b.cls", "2") + test::tar_end();
  int calls = 0;
  auto stream = memory_stream(archive);
  Status st = scan_tar(*stream, "x.tar", [&](const TarEntry&) {
    ++calls;
    return cancelled("stop");
  });
  EXPECT_EQ(st.code(), StatusCode::kCancelled);
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace shardyard::io
