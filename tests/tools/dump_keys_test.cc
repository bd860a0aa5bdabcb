// Tests of tools/dump_keys.h: one sample is one line whatever its key holds, and a dump
// folder holds the files of this run's ranks only.
#include "dump_keys.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace shardyard::tools {
namespace {

TEST(EscapeKey, PlainKeysAreUnchanged) {
  EXPECT_EQ(escape_key("s0001/x00017"), "s0001/x00017");
  EXPECT_EQ(escape_key("caf\xc3\xa9 d'\xe2\x82\xac"), "caf\xc3\xa9 d'\xe2\x82\xac");  // UTF-8
  EXPECT_EQ(escape_key(""), "");
}

TEST(EscapeKey, SeparatorsAndControlBytesAreEscaped) {
  EXPECT_EQ(escape_key("a\tb"), "a\\tb");
  EXPECT_EQ(escape_key("a\nb\r"), "a\\nb\\r");
  EXPECT_EQ(escape_key("back\\slash"), "back\\\\slash");
  EXPECT_EQ(escape_key(std::string("\x01\x1f\x7f\0z", 5)), "\\x01\\x1f\\x7f\\x00z");
  // No escaped key holds a TAB or a newline, and different keys stay different.
  const std::string forged = "x\t0\t0\nforged\t5\tdeadbeefdeadbeef\n0\t0\tevil";
  const std::string e = escape_key(forged);
  EXPECT_EQ(e.find('\t'), std::string::npos);
  EXPECT_EQ(e.find('\n'), std::string::npos);
  EXPECT_NE(escape_key("a\\tb"), escape_key("a\tb"));
}

class DumpDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sy-dump-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void touch(const std::string& name) { std::ofstream(dir_ + "/" + name) << "x\n"; }
  bool exists(const std::string& name) { return std::filesystem::exists(dir_ + "/" + name); }
  std::string dir_;
};

TEST_F(DumpDir, RemovesRankFilesOfRanksThisRunDoesNotHave) {
  for (const char* n : {"rank-0.tsv", "rank-1.tsv", "rank-2.tsv", "rank-10.tsv", "rank-x.tsv",
                        "rank-2.tsv.bak", "notes.txt", "rank-.tsv"})
    touch(n);
  ASSERT_TRUE(prepare_dump_dir(dir_, 2).is_ok());
  EXPECT_TRUE(exists("rank-0.tsv"));
  EXPECT_TRUE(exists("rank-1.tsv"));
  EXPECT_FALSE(exists("rank-2.tsv"));
  EXPECT_FALSE(exists("rank-10.tsv"));
  for (const char* kept : {"rank-x.tsv", "rank-2.tsv.bak", "notes.txt", "rank-.tsv"})
    EXPECT_TRUE(exists(kept)) << kept;
}

TEST_F(DumpDir, CreatesTheFolder) {
  ASSERT_TRUE(prepare_dump_dir(dir_ + "/a/b", 1).is_ok());
  EXPECT_TRUE(std::filesystem::is_directory(dir_ + "/a/b"));
  touch("file");
  Status st = prepare_dump_dir(dir_ + "/file/sub", 1);
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("--dump-keys"), std::string::npos);
}

}  // namespace
}  // namespace shardyard::tools
