// Tests of io/fs: the writing half of the FileSystem interface on the local file system,
// atomic writes through any file system (a failure at any step leaves no temporary and the
// old file intact), the refusal of a file system that only reads, and the test doubles.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

#include "io/fs/file_system.h"
#include "io/fs/test_file_systems.h"

namespace shardyard::io {
namespace {

namespace stdfs = std::filesystem;
using shardyard::testing::FaultFileSystem;
using shardyard::testing::FsOp;
using shardyard::testing::MemoryFileSystem;

class LocalWriteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "/sy_fs_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr) << pattern;
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    stdfs::remove_all(dir_, ec);
  }
  std::vector<std::string> names() const {
    auto l = local_file_system().list(dir_);
    EXPECT_TRUE(l.is_ok()) << l.status().to_string();
    return l.is_ok() ? *l : std::vector<std::string>();
  }
  std::string dir_;
};

TEST_F(LocalWriteTest, WritesRenamesRemovesAndCreatesDirectories) {
  FileSystem& fs = local_file_system();
  ASSERT_TRUE(fs.create_dir(dir_ + "/sub").is_ok());
  ASSERT_TRUE(fs.create_dir(dir_ + "/sub").is_ok());  // exists: fine
  auto f = fs.new_writable_file(dir_ + "/sub/a");
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  ASSERT_TRUE((*f)->append("hello ").is_ok());
  ASSERT_TRUE((*f)->append("world").is_ok());
  ASSERT_TRUE((*f)->sync().is_ok());
  ASSERT_TRUE((*f)->close().is_ok());
  ASSERT_TRUE(fs.rename(dir_ + "/sub/a", dir_ + "/sub/b").is_ok());
  ASSERT_TRUE(fs.sync_dir(dir_ + "/sub").is_ok());
  EXPECT_EQ(read_file(fs, dir_ + "/sub/b").value(), "hello world");
  EXPECT_EQ(names(), std::vector<std::string>{"sub/b"});
  ASSERT_TRUE(fs.remove(dir_ + "/sub/b").is_ok());
  EXPECT_EQ(fs.remove(dir_ + "/sub/b").code(), StatusCode::kNotFound);
  EXPECT_EQ(read_file(fs, dir_ + "/sub/b").status().code(), StatusCode::kNotFound);
  const Status st = fs.create_dir(dir_ + "/no/parent");
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find(dir_ + "/no/parent"), std::string::npos) << st.message();
}

TEST_F(LocalWriteTest, AtomicWriteReplacesTheFileAndLeavesNoTemporary) {
  ASSERT_TRUE(write_file_atomic(dir_ + "/f", "one", true).is_ok());
  ASSERT_TRUE(write_file_atomic(dir_ + "/f", "two", true).is_ok());
  EXPECT_EQ(read_file(local_file_system(), dir_ + "/f").value(), "two");
  EXPECT_EQ(names(), std::vector<std::string>{"f"});
}

TEST_F(LocalWriteTest, AFailedAtomicWriteKeepsTheOldFileAndRemovesItsTemporary) {
  ASSERT_TRUE(write_file_atomic(dir_ + "/f", "old", true).is_ok());
  for (FsOp op : {FsOp::kWrite, FsOp::kSync, FsOp::kRename}) {
    FaultFileSystem fs(&local_file_system());
    fs.fail_next(op);
    const Status st = write_file_atomic(fs, dir_ + "/f", "new", true);
    ASSERT_FALSE(st.is_ok()) << static_cast<int>(op);
    EXPECT_NE(st.message().find("injected fault"), std::string::npos) << st.message();
    EXPECT_EQ(read_file(local_file_system(), dir_ + "/f").value(), "old");
    EXPECT_EQ(names(), std::vector<std::string>{"f"}) << "a temporary was left behind";
  }
  // A failed sync of the directory comes after the rename: the new bytes are there, and the
  // caller hears that they may not survive a crash.
  FaultFileSystem fs(&local_file_system());
  fs.fail_next(FsOp::kSyncDir);
  EXPECT_FALSE(write_file_atomic(fs, dir_ + "/f", "new", true).is_ok());
  EXPECT_EQ(fs.calls(FsOp::kRename), 1);
}

// A file system that only reads: the interface's defaults.
class ReadOnly : public FileSystem {
 public:
  Result<FileInfo> stat(const std::string& uri) override { return not_found(uri); }
  Result<std::unique_ptr<RandomAccessFile>> open(const std::string& uri) override {
    return not_found(uri);
  }
  Result<std::vector<std::string>> list(const std::string& uri) override { return not_found(uri); }
};

// A local file reads from the page cache first without waiting for the disk (RWF_NOWAIT)
// and finishes a range the cache does not hold with ordinary reads: the bytes are the
// file's whether all, part or none of the range is cached, and at its end.
TEST_F(LocalWriteTest, ReadsTheSameBytesWhetherThePageCacheHoldsAllPartOrNoneOfTheRange) {
  const std::string path = dir_ + "/data.bin";
  std::string bytes(3u << 20, '\0');
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<char>((i * 131 + i / 4096) & 0xff);
  {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  // Clean pages can be dropped: write them back first.
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::fsync(fd), 0);
  auto drop = [&](uint64_t at, uint64_t n) {
    (void)::posix_fadvise(fd, static_cast<off_t>(at), static_cast<off_t>(n), POSIX_FADV_DONTNEED);
  };
  auto file = local_file_system().open(path);
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  std::string got;
  auto read = [&](uint64_t at, size_t n) {
    got.assign(n + 100, '\x5a');
    auto r = (*file)->read_at(at, got.data(), n + 100);  // asks past the end too
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    got.resize(r.is_ok() ? *r : 0);
  };
  for (int round = 0; round < 3; ++round) {
    if (round == 1) drop(1u << 20, 2u << 20);  // the back two thirds out of the cache
    if (round == 2) drop(0, 0);                // all of it
    read(0, bytes.size());
    EXPECT_EQ(got.size(), bytes.size()) << "round " << round;
    EXPECT_TRUE(got == bytes) << "round " << round;
    (*file)->will_need(0, bytes.size());  // a hint only: changes no byte
    read(4096 * 200 + 7, 70000);
    EXPECT_EQ(got, bytes.substr(4096 * 200 + 7, 70100)) << "round " << round;
  }
  ::close(fd);
}

// A hint to a local file is worth its cost only while the page cache does not hold what is
// read: a file wants hints until a read finds its whole range cached, and again once a read
// does not.
TEST_F(LocalWriteTest, WantsHintsUntilAReadFindsItsWholeRangeInThePageCache) {
  const std::string path = dir_ + "/hints.bin";
  const std::string bytes(1u << 20, '\x3c');
  {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::fsync(fd), 0);
  // Whether the page cache holds byte `at`, as the file itself asks it (RWF_NOWAIT); -1
  // where this file system cannot say.
  auto cached = [&](uint64_t at) {
    char c;
    iovec iov{&c, 1};
    if (::preadv2(fd, &iov, 1, static_cast<off_t>(at), RWF_NOWAIT) == 1) return 1;
    return errno == EAGAIN ? 0 : -1;
  };
  if (cached(0) < 0) {
    ::close(fd);
    GTEST_SKIP() << "this file system does not answer RWF_NOWAIT reads";
  }
  auto file = local_file_system().open(path);
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  EXPECT_TRUE((*file)->wants_hints()) << "nothing has been read yet";
  std::string got(bytes.size(), '\0');
  ASSERT_TRUE((*file)->read_at(0, got.data(), got.size()).is_ok());
  EXPECT_EQ(got, bytes);
  EXPECT_FALSE((*file)->wants_hints()) << "the range just read was all in the page cache";
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  if (cached(4096) == 0) {  // the kernel dropped it (it may keep pages it cannot drop)
    ASSERT_TRUE((*file)->read_at(4096, got.data(), 8192).is_ok());
    EXPECT_TRUE((*file)->wants_hints()) << "the last read went to the disk";
  }
  ::close(fd);
}

TEST(ReadOnlyFileSystemTest, RefusesEveryWriteNamingTheUriAndWhatToDo) {
  ReadOnly fs;
  const std::string uri = "https://user:secret@example.org/ckpt/x?sig=1";
  std::vector<Status> refusals = {fs.new_writable_file(uri).status(), fs.rename(uri, uri + "2"),
                                  fs.remove(uri), fs.create_dir(uri), fs.sync_dir(uri)};
  for (const Status& st : refusals) {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("example.org/ckpt/x"), std::string::npos) << st.message();
    EXPECT_EQ(st.message().find("secret"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("local or mounted directory"), std::string::npos) << st.message();
  }
}

TEST(MemoryFileSystemTest, HoldsFilesAndDirectoriesWithoutTheDisk) {
  MemoryFileSystem fs;
  ASSERT_TRUE(fs.create_dir("/m").is_ok());
  ASSERT_TRUE(write_file_atomic(fs, "/m/a", "bytes", true).is_ok());
  EXPECT_EQ(fs.contents("/m/a"), "bytes");
  EXPECT_EQ(fs.files(), 1u);
  EXPECT_TRUE(fs.stat("/m")->is_directory);
  EXPECT_EQ(fs.stat("/m/a")->size, 5u);
  EXPECT_EQ(fs.list("/m").value(), std::vector<std::string>{"a"});
  EXPECT_FALSE(fs.new_writable_file("/nope/a").is_ok());
  EXPECT_FALSE(stdfs::exists("/m"));
}

}  // namespace
}  // namespace shardyard::io
