// Tests of WebDataset's rule (io/format/tar.h: split_key) and of how the manifest scan and the
// sample reader apply it: members WebDataset skips are skipped and counted, strict_members
// makes them damage, damage confined to one sample drops only that sample. The cases of
// split_key were checked against webdataset/tariterators.py's regular expressions.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "io/format/manifest_scan.h"
#include "io/format/sample_reader.h"
#include "io/format/tar.h"
#include "tar_fixtures.h"

namespace shardyard::io {
namespace {

using test::TempDir;

TEST(SplitKey, KeyAndFieldAsWebDatasetsBasePlusExt) {
  struct Case {
    const char* path;
    const char* key;
    const char* field;
  };
  for (const auto& c : {
           Case{"a/b/x.input.seq.bin", "a/b/x", "input.seq.bin"},
           Case{"s0000.jpg", "s0000", "jpg"},
           Case{"dir.with.dots/s.json", "dir.with.dots/s", "json"},
           Case{"./x/y.cls", "./x/y", "cls"},
           Case{"k.a.b.c", "k", "a.b.c"},
           Case{"S1.JPG", "S1", "jpg"},  // the field is lowercased, the key is not
           Case{"a/B.Input.Seq", "a/B", "input.seq"},
           Case{"x.", "x", ""},
           // A base name that starts with a dot: the folder is the key when its own name
           // has no dot (the regular expression's [^.]+ runs over "a/").
           Case{"a/.hidden", "a/", "hidden"},
           Case{"a/b/._x.jpg", "a/b/", "_x.jpg"},
           Case{"/.x", "/", "x"},
           Case{"__key__.txt", "__key__", "txt"},  // not a metadata name
           Case{"__x__y/z.json", "__x__y/z", "json"},
       }) {
    auto kf = split_key(c.path);
    ASSERT_TRUE(kf.has_value()) << c.path << " was skipped: " << unmatched_reason(c.path);
    EXPECT_EQ(kf->key, c.key) << c.path;
    EXPECT_EQ(kf->field, c.field) << c.path;
  }
}

TEST(SplitKey, SkipsWhatWebDatasetSkipsAndSaysWhy) {
  struct Case {
    const char* path;
    const char* reason;
  };
  for (const auto& c :
       {Case{".hidden", "starts with a dot"}, Case{"._x.jpg", "starts with a dot"},
        Case{"a.b/.hidden", "starts with a dot"}, Case{"./.x", "starts with a dot"},
        Case{"README", "no extension"}, Case{"a.b/README", "no extension"},
        Case{"a/b/", "no extension"}, Case{"", "empty name"}, Case{"__meta__", "metadata"},
        Case{"___", "metadata"}, Case{"__x__/y.json", "metadata"}, Case{"__a.b__", "metadata"}}) {
    EXPECT_FALSE(split_key(c.path).has_value()) << c.path;
    EXPECT_NE(unmatched_reason(c.path).find(c.reason), std::string::npos)
        << c.path << ": " << unmatched_reason(c.path);
  }
}

// Hand-made archives: each member a name and a payload (type '0'), or a name and a type.
struct M {
  std::string name;
  std::string data;
  char type = '0';
};

std::string archive(const std::vector<M>& members) {
  std::string out;
  for (const auto& m : members) {
    if (m.type == '0') {
      out += test::tar_member(m.name, m.data);
    } else {
      out += test::tar_header(m.name, 0, m.type);
    }
  }
  return out + test::tar_end();
}

// Byte offset of member `index` in archive(members).
uint64_t offset_of(const std::vector<M>& members, size_t index) {
  uint64_t at = 0;
  for (size_t i = 0; i < index; ++i)
    at += 512 + (members[i].type == '0' ? (members[i].data.size() + 511) / 512 * 512 : 0);
  return at;
}

class WebDatasetScan : public ::testing::Test {
 protected:
  std::string write(const std::vector<M>& members) {
    const std::string path = dir.file("shard.tar");
    test::write_file(path, archive(members));
    return path;
  }
  Result<SourceEntry> scan(const std::string& path, OnCorrupt policy = OnCorrupt::kFail,
                           bool strict = false) {
    return scan_source(local_file_system(), SourceRef{path, SourceKind::kTar}, policy, strict);
  }
  // Every sample of a one-source manifest, read back in one run.
  std::vector<Item> read_all(const SourceEntry& e) {
    auto m = std::make_shared<Manifest>();
    m->sources.push_back(e);
    m->fingerprint = compute_fingerprint(*m);
    SampleReader reader(local_file_system(), m, BufferPool::create());
    std::vector<Item> items;
    Status st = reader.read(0, 0, e.samples.size(), 0, &items);
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    return items;
  }
  std::vector<std::string> keys(const SourceEntry& e) {
    std::vector<std::string> out;
    for (const auto& s : e.samples) out.push_back(s.key);
    return out;
  }
  TempDir dir;
};

std::vector<std::pair<std::string, std::string>> fields(const Item& item) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& f : item.fields) out.emplace_back(f.name, std::string(f.view()));
  return out;
}

// A shard of samples with a README, a LICENSE, macOS metadata, a metadata name, a folder
// and a symbolic link among them: WebDataset yields the samples, and so does the scan.
const std::vector<M> kMixed = {
    {"README", "read me"}, {"s0.jpg", "JPEG0"}, {"LICENSE", "MIT"},  {"s0.CLS", "0"},
    {"._s1.jpg", "mac"},   {"s1.jpg", "JPEG1"}, {"__meta__", "{}"},  {"d/", "", '5'},
    {"d/s2.jpg", "", '2'}, {"d/s2.cls", "2"},   {"d/s2.TXT", "two"},
};

TEST_F(WebDatasetScan, MembersWithoutAKeyAreSkippedAndCounted) {
  const std::string path = write(kMixed);
  auto e = scan(path);
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  EXPECT_FALSE(e->damaged) << e->damage;
  EXPECT_EQ(keys(*e), (std::vector<std::string>{"s0", "s1", "d/s2"}));
  EXPECT_EQ(e->members_skipped, 6u) << "README, LICENSE, ._s1.jpg, __meta__, d/, the link";
  // A skipped member between two members of one sample does not end it (WebDataset's
  // group_by_keys ignores it): s0 runs from s0.jpg to s0.CLS, over LICENSE.
  EXPECT_EQ(e->samples[0].begin, offset_of(kMixed, 1));
  EXPECT_EQ(e->samples[0].end, offset_of(kMixed, 4));
  EXPECT_EQ(e->samples[0].payload_bytes, 6u);

  const auto items = read_all(*e);
  ASSERT_EQ(items.size(), 3u);
  using F = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(fields(items[0]), (F{{"cls", "0"}, {"jpg", "JPEG0"}}));
  EXPECT_EQ(fields(items[1]), (F{{"jpg", "JPEG1"}}));
  EXPECT_EQ(fields(items[2]), (F{{"cls", "2"}, {"txt", "two"}}));
}

TEST_F(WebDatasetScan, ShardOfOnlySkippedMembersHasNoSamples) {
  const std::string path = write({{"README", "x"}, {"LICENSE", "y"}});
  auto e = scan(path);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("no samples (2 members skipped)"), std::string::npos)
      << e.status().message();
}

TEST_F(WebDatasetScan, StrictMakesSkippedMembersDamageButNotDirectories) {
  const std::string dirs = write({{"d/", "", '5'}, {"d/s0.cls", "0"}, {"e/", "", '5'}});
  auto ok = scan(dirs, OnCorrupt::kFail, /*strict=*/true);
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  EXPECT_EQ(ok->members_skipped, 2u);

  const std::string path = write(kMixed);
  auto fail = scan(path, OnCorrupt::kFail, true);
  ASSERT_FALSE(fail.is_ok());
  EXPECT_EQ(fail.status().code(), StatusCode::kCorrupt);
  for (const std::string& says : {path, std::string("at byte 0"), std::string("'README'"),
                                  std::string("no extension"), std::string("--strict")})
    EXPECT_NE(fail.status().message().find(says), std::string::npos)
        << "says " << says << ": " << fail.status().message();

  // Under kSkip the source is damaged (reported, counted) and keeps every sample.
  auto skip = scan(path, OnCorrupt::kSkip, true);
  ASSERT_TRUE(skip.is_ok()) << skip.status().to_string();
  EXPECT_TRUE(skip->damaged);
  EXPECT_EQ(skip->damaged_at, 0u);
  EXPECT_NE(skip->damage.find("'README'"), std::string::npos) << skip->damage;
  EXPECT_NE(skip->damage.find("(and 4 more)"), std::string::npos) << skip->damage;
  EXPECT_EQ(keys(*skip), (std::vector<std::string>{"s0", "s1", "d/s2"}));

  const std::string link = write({{"s0.cls", "0"}, {"s0.jpg", "", '2'}});
  auto linked = scan(link, OnCorrupt::kFail, true);
  ASSERT_FALSE(linked.is_ok());
  EXPECT_NE(linked.status().message().find("symbolic link"), std::string::npos)
      << linked.status().message();
}

// A repeated field spoils one sample; the archive around it is whole. Under kSkip that
// sample is dropped and the scan goes on to the samples after it, which a reader then
// reads across the gap.
TEST_F(WebDatasetScan, RepeatedFieldUnderSkipDropsOnlyThatSample) {
  const std::vector<M> members = {{"a.cls", "1"}, {"b.cls", "2"}, {"b.jpg", "JPEG"},
                                  {"b.CLS", "3"}, {"c.cls", "4"}, {"d.cls", "5"}};
  const std::string path = write(members);
  auto fail = scan(path);
  ASSERT_FALSE(fail.is_ok());
  EXPECT_NE(fail.status().message().find("repeats"), std::string::npos);
  EXPECT_NE(fail.status().message().find("at byte " + std::to_string(offset_of(members, 3))),
            std::string::npos)
      << fail.status().message();

  auto skip = scan(path, OnCorrupt::kSkip);
  ASSERT_TRUE(skip.is_ok()) << skip.status().to_string();
  EXPECT_TRUE(skip->damaged);
  EXPECT_EQ(skip->damaged_at, offset_of(members, 3));
  EXPECT_EQ(keys(*skip), (std::vector<std::string>{"a", "c", "d"}));
  const auto items = read_all(*skip);
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[1].key, "c");
  EXPECT_EQ(fields(items[2]), (std::vector<std::pair<std::string, std::string>>{{"cls", "5"}}));
}

TEST_F(WebDatasetScan, EmptyNamesAndV7DirectoriesAreSkippedMembers) {
  // An empty name (a checksum-valid header tarfile reads) and a NUL-type member named
  // "d/" (how old v7 archives, and bsdtar's v7 format, store a directory).
  const std::string path = write({{"", "x"}, {"d/", "", '\0'}, {"s0.cls", "0"}});
  auto e = scan(path, OnCorrupt::kFail, /*strict=*/false);
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  EXPECT_EQ(keys(*e), (std::vector<std::string>{"s0"}));
  EXPECT_EQ(e->members_skipped, 2u);
  auto strict = scan(path, OnCorrupt::kFail, true);
  ASSERT_FALSE(strict.is_ok()) << "the empty name is not a directory";
  EXPECT_NE(strict.status().message().find("empty name"), std::string::npos)
      << strict.status().message();
}

// Links, devices and FIFOs have no payload whatever their size field says: tarfile reads
// the next header right after them.
TEST_F(WebDatasetScan, NonFileMembersHaveNoPayload) {
  for (char type : {'1', '2', '3', '4', '5', '6'}) {
    SCOPED_TRACE(std::string("type ") + type);
    std::string bytes = test::tar_header("x.dev", 0, type);
    bytes.replace(124, 12, std::string("00000001000") + '\0');  // 512
    test::fix_checksum(bytes, 0);
    bytes += test::tar_member("s0.cls", "0") + test::tar_end();
    const std::string path = dir.file("shard.tar");
    test::write_file(path, bytes);
    auto e = scan(path);
    ASSERT_TRUE(e.is_ok()) << e.status().to_string();
    EXPECT_EQ(keys(*e), (std::vector<std::string>{"s0"}));
  }
}

// Loose files follow the same rule: a README among them is skipped, not the end.
TEST(WebDatasetDirectory, FileWithoutAnExtensionIsSkippedAndCounted) {
  TempDir dir;
  for (const char* name : {"a.cls", "b.cls", "c.cls", "zz_README", ".DS_Store"})
    test::write_file(dir.file(name), "x");
  const SourceRef ref{dir.path(), SourceKind::kDirectory};
  auto e = scan_source(local_file_system(), ref, OnCorrupt::kFail);
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  EXPECT_FALSE(e->damaged);
  EXPECT_EQ(e->members_skipped, 2u);
  ASSERT_EQ(e->samples.size(), 3u);
  EXPECT_EQ(e->samples[2].key, "c");
  auto strict = scan_source(local_file_system(), ref, OnCorrupt::kFail, true);
  ASSERT_FALSE(strict.is_ok());
  EXPECT_NE(strict.status().message().find(".DS_Store"), std::string::npos)
      << strict.status().message();
}

}  // namespace
}  // namespace shardyard::io
