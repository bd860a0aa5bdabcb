// Tests of io/format/sources.h: brace expansion and resolving patterns into sources.
#include "io/format/sources.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tar_fixtures.h"

namespace shardyard::io {
namespace {

using test::TempDir;
using Strings = std::vector<std::string>;

Strings expand(const std::string& pattern) {
  auto r = expand_braces(pattern);
  EXPECT_TRUE(r.is_ok()) << pattern << ": " << r.status().to_string();
  return r.is_ok() ? *r : Strings{};
}

TEST(ExpandBraces, NumericRangeKeepsTheWidthOfAZeroPaddedStart) {
  EXPECT_EQ(expand("train-{000..003}.tar"),
            (Strings{"train-000.tar", "train-001.tar", "train-002.tar", "train-003.tar"}));
  EXPECT_EQ(expand("{01..3}"), (Strings{"01", "02", "03"}));
  EXPECT_EQ(expand("{8..11}"), (Strings{"8", "9", "10", "11"}));
  EXPECT_EQ(expand("s{098..101}"), (Strings{"s098", "s099", "s100", "s101"}));
  EXPECT_EQ(expand("{5..5}"), (Strings{"5"}));
  auto wide = expand("train-{000000..001023}.tar");
  ASSERT_EQ(wide.size(), 1024u);
  EXPECT_EQ(wide.front(), "train-000000.tar");
  EXPECT_EQ(wide.back(), "train-001023.tar");
}

TEST(ExpandBraces, ListsAndProductsLeftToRight) {
  EXPECT_EQ(expand("{a,b}"), (Strings{"a", "b"}));
  EXPECT_EQ(expand("/d/{train,val}.tar"), (Strings{"/d/train.tar", "/d/val.tar"}));
  EXPECT_EQ(expand("x{0..1}-{a,b}.tar"), (Strings{"x0-a.tar", "x0-b.tar", "x1-a.tar", "x1-b.tar"}));
  EXPECT_EQ(expand("{a,b}/{00..01}/{x,y}").size(), 8u);
  EXPECT_EQ(expand("{a,b}/{00..01}/{x,y}")[5], "b/00/y");
  EXPECT_EQ(expand("plain.tar"), (Strings{"plain.tar"}));
}

TEST(ExpandBraces, BadPatternsAreInvalidArgumentsNamingThePattern) {
  for (const std::string pattern :
       {"a{1..3", "a}b", "x{3..1}", "x{a..b}", "x{1..}", "x{0..99999999}", "{-1..2}",
        "{1234567890123456789..1234567890123456790}"}) {
    auto r = expand_braces(pattern);
    ASSERT_FALSE(r.is_ok()) << pattern << " expanded to " << r->size() << " names";
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(pattern), std::string::npos) << r.status().message();
  }
  // A bad brace after a good one is still found.
  auto r = expand_braces("ok-{1,2}-{3..1}");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("{3..1}"), std::string::npos) << r.status().message();
}

TEST(KindFromName, CompressedSuffixesAreTarGz) {
  EXPECT_EQ(kind_from_name("a.tar"), SourceKind::kTar);
  EXPECT_EQ(kind_from_name("a.tar.gz"), SourceKind::kTarGz);
  EXPECT_EQ(kind_from_name("a.tgz"), SourceKind::kTarGz);
  EXPECT_EQ(kind_from_name("s3://b/a.gz.tar"), SourceKind::kTar);
}

void touch(const std::string& path) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  test::write_file(path, "x");
}

TEST(ResolveSources, DirectoryOfShardsExpandsToItsSortedShards) {
  TempDir dir;
  for (const char* f : {"b.tar", "a.tar", "c.tar.gz", "d.tgz", "notes.txt", "sub/e.tar"})
    touch(dir.file(f));
  for (const std::string& given : {dir.path(), dir.path() + "/", dir.path() + "//"}) {
    auto r = resolve_sources(local_file_system(), {given});
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    Strings uris;
    std::vector<SourceKind> kinds;
    for (const auto& s : *r) {
      uris.push_back(s.uri);
      kinds.push_back(s.kind);
    }
    EXPECT_EQ(uris, (Strings{dir.file("a.tar"), dir.file("b.tar"), dir.file("c.tar.gz"),
                             dir.file("d.tgz"), dir.file("sub/e.tar")}))
        << given;
    EXPECT_EQ(kinds,
              (std::vector<SourceKind>{SourceKind::kTar, SourceKind::kTar, SourceKind::kTarGz,
                                       SourceKind::kTarGz, SourceKind::kTar}));
  }
}

TEST(ResolveSources, DirectoryOfLooseSampleFilesIsOneSource) {
  TempDir dir;
  for (const char* f : {"x.cls", "x.jpg", "y.cls", "deeper/z.json"}) touch(dir.file(f));
  auto r = resolve_sources(local_file_system(), {dir.path() + "/"});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].uri, dir.path());
  EXPECT_EQ((*r)[0].kind, SourceKind::kDirectory);
}

TEST(ResolveSources, PatternsExpandInOrderAndMissingFilesAreKept) {
  TempDir dir;
  touch(dir.file("s-01.tar"));
  touch(dir.file("s-02.tar"));
  auto r =
      resolve_sources(local_file_system(), {dir.file("s-{01..03}.tar"), dir.file("other.tgz")});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 4u);
  EXPECT_EQ((*r)[0].uri, dir.file("s-01.tar"));
  EXPECT_EQ((*r)[2].uri, dir.file("s-03.tar")) << "a missing shard is reported by the scan";
  EXPECT_EQ((*r)[3].kind, SourceKind::kTarGz);
}

TEST(ResolveSources, NoPatternsOrABadPatternIsAnError) {
  EXPECT_EQ(resolve_sources(local_file_system(), {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(resolve_sources(local_file_system(), {"/x/{1..2"}).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardyard::io
