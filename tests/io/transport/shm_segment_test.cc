// Tests of io/transport/shm_segment.h: unnamed, reserved segments; read-only descriptors;
// the memfd fallback; the message for a shared-memory folder that is too small.
#include "io/transport/shm_segment.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "process_util.h"

namespace shardyard::io {
namespace {

using testing::count_open_fds;
using testing::list_dir;
using testing::test_shm_dir;
using testing::TmpfsMount;
using testing::used_bytes;

SegmentOptions in(const std::string& dir) {
  SegmentOptions o;
  o.dir = dir;
  o.what = "test segment";
  return o;
}

TEST(ShmSegment, IsUnnamedReservedAndCloseOnExec) {
  const std::string dir = test_shm_dir();
  const auto names = list_dir(dir);
  const uint64_t used = used_bytes(dir);
  const int fds = count_open_fds();
  {
    auto seg = ShmSegment::create(8 << 20, in(dir));
    ASSERT_TRUE(seg.is_ok()) << seg.status().to_string();
    EXPECT_EQ(seg->size(), 8u << 20);
    EXPECT_EQ(seg->backing(), "O_TMPFILE in " + dir);
    EXPECT_EQ(list_dir(dir), names) << "a segment has no name in the folder";
    struct stat st;
    ASSERT_EQ(::fstat(seg->fd(), &st), 0);
    EXPECT_EQ(st.st_size, 8 << 20);
    EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, 8u << 20) << "reserved up front";
    if (dir != "/dev/shm") {
      EXPECT_GE(used_bytes(dir), used + (8u << 20));
    }
    EXPECT_TRUE(::fcntl(seg->fd(), F_GETFD) & FD_CLOEXEC);
    auto dup = seg->duplicate();
    ASSERT_TRUE(dup.is_ok());
    EXPECT_TRUE(::fcntl(dup->get(), F_GETFD) & FD_CLOEXEC);
  }
  EXPECT_EQ(count_open_fds(), fds);
  EXPECT_EQ(list_dir(dir), names);
  if (dir != "/dev/shm") {
    EXPECT_EQ(used_bytes(dir), used) << "the memory went back";
  }
}

TEST(ShmSegment, MapsReadWriteAndReadOnly) {
  auto seg = ShmSegment::create(64 << 10, in(test_shm_dir()));
  ASSERT_TRUE(seg.is_ok()) << seg.status().to_string();
  auto rw = seg->map(ShmSegment::Access::kReadWrite);
  auto ro = seg->map(ShmSegment::Access::kReadOnly, 4096, 4096);
  ASSERT_TRUE(rw.is_ok() && ro.is_ok());
  EXPECT_EQ((*ro)->writable_data(), nullptr);
  EXPECT_EQ((*rw)->data()[100], 0) << "zero-filled";
  std::memcpy((*rw)->writable_data() + 4096, "hello", 5);
  EXPECT_EQ(std::memcmp((*ro)->data(), "hello", 5), 0) << "both mappings see one segment";
  EXPECT_FALSE(seg->map(ShmSegment::Access::kReadOnly, 100).is_ok()) << "unaligned offset";
  EXPECT_FALSE(seg->map(ShmSegment::Access::kReadOnly, 0, 1 << 20).is_ok()) << "past the end";
}

TEST(ShmSegment, ReadOnlyDescriptorCannotBeMappedWritable) {
  auto seg = ShmSegment::create(64 << 10, in(test_shm_dir()));
  ASSERT_TRUE(seg.is_ok());
  auto fd = seg->read_only_fd();
  ASSERT_TRUE(fd.is_ok()) << fd.status().to_string();
  EXPECT_TRUE(::fcntl(fd->get(), F_GETFD) & FD_CLOEXEC);
  auto other = ShmSegment::adopt(std::move(*fd), "received");
  ASSERT_TRUE(other.is_ok()) << other.status().to_string();
  EXPECT_EQ(other->size(), 64u << 10);
  auto rw = other->map(ShmSegment::Access::kReadWrite);
  ASSERT_FALSE(rw.is_ok());
  EXPECT_NE(rw.status().message().find("read-write"), std::string::npos) << rw.status().message();
  EXPECT_TRUE(other->map(ShmSegment::Access::kReadOnly).is_ok());
}

TEST(ShmSegment, FallsBackToMemfdWhereTheFolderRefusesTmpfile) {
  auto seg = ShmSegment::create(1 << 20, in("/proc"));  // procfs has no O_TMPFILE
  ASSERT_TRUE(seg.is_ok()) << seg.status().to_string();
  EXPECT_EQ(seg->backing(), "memfd");
  auto map = seg->map(ShmSegment::Access::kReadWrite);
  ASSERT_TRUE(map.is_ok());
  (*map)->writable_data()[(1 << 20) - 1] = 7;
}

TEST(ShmSegment, TakesTheFolderFromTheEnvironment) {
  TmpfsMount tmp(4 << 20);
  if (!tmp.ok()) GTEST_SKIP() << tmp.error();
  ::setenv("SHARDYARD_SHM_DIR", tmp.dir().c_str(), 1);
  EXPECT_EQ(default_shm_dir(), tmp.dir());
  auto seg = ShmSegment::create(1 << 20, SegmentOptions{});
  ::unsetenv("SHARDYARD_SHM_DIR");
  ASSERT_TRUE(seg.is_ok()) << seg.status().to_string();
  EXPECT_EQ(seg->backing(), "O_TMPFILE in " + tmp.dir());
  EXPECT_EQ(default_shm_dir(), "/dev/shm");
}

TEST(ShmSegment, MissingFolderIsAClearError) {
  auto seg = ShmSegment::create(1 << 20, in("/nonexistent/shm"));
  ASSERT_FALSE(seg.is_ok());
  EXPECT_EQ(seg.status().code(), StatusCode::kIoError);
  EXPECT_NE(seg.status().message().find("/nonexistent/shm"), std::string::npos);
  EXPECT_NE(seg.status().message().find("SHARDYARD_SHM_DIR"), std::string::npos);
}

TEST(ShmSegment, TooSmallFolderSaysWhatIsFreeWhatIsNeededAndWhatToDo) {
  TmpfsMount tmp(4 << 20);
  if (!tmp.ok()) GTEST_SKIP() << tmp.error();
  const int fds = count_open_fds();
  SegmentOptions o = in(tmp.dir());
  o.size_option = "--shm-arena-mib";
  auto seg = ShmSegment::create(16 << 20, o);
  ASSERT_FALSE(seg.is_ok());
  const std::string m = seg.status().message();
  EXPECT_EQ(seg.status().code(), StatusCode::kIoError);
  for (const char* part : {"test segment", "4.0 MiB free of 4.0 MiB", "16.0 MiB are needed",
                           "docker run --shm-size=64m", "mount -o remount,size=64m",
                           "SHARDYARD_SHM_DIR", "--shm-arena-mib"})
    EXPECT_NE(m.find(part), std::string::npos) << "missing \"" << part << "\" in: " << m;
  EXPECT_EQ(count_open_fds(), fds);
  EXPECT_TRUE(list_dir(tmp.dir()).empty());
  EXPECT_EQ(used_bytes(tmp.dir()), 0u);
  // What fits still works, and the folder fills only by what was asked.
  auto fits = ShmSegment::create(3 << 20, o);
  ASSERT_TRUE(fits.is_ok()) << fits.status().to_string();
  auto second = ShmSegment::create(2 << 20, o);
  ASSERT_FALSE(second.is_ok()) << "only 1 MiB is left";
  EXPECT_NE(second.status().message().find("1.0 MiB free"), std::string::npos)
      << second.status().message();
}

TEST(ShmSegment, RejectsAnEmptySegmentAndAForeignDescriptor) {
  EXPECT_EQ(ShmSegment::create(0, in(test_shm_dir())).status().code(),
            StatusCode::kInvalidArgument);
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  ::close(p[1]);
  auto pipe = ShmSegment::adopt(UniqueFd(p[0]), "a pipe");
  EXPECT_EQ(pipe.status().code(), StatusCode::kInvalidArgument);
}

TEST(FormatBytes, ReadsLikeAPerson) {
  EXPECT_EQ(format_bytes(512), "512 bytes");
  EXPECT_EQ(format_bytes(64 << 20), "64.0 MiB");
  EXPECT_EQ(format_bytes(3ull << 30), "3.0 GiB");
}

}  // namespace
}  // namespace shardyard::io
