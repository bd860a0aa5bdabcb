// Tests of the local file system (io/fs/file_system.h) on what is not a regular file: a FIFO
// given as a source is refused at once, with a message, instead of blocking the reader.
#include "io/fs/file_system.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <string>

#include "io/format/manifest_scan.h"
#include "tar_fixtures.h"

namespace shardyard::io {
namespace {

using test::TempDir;

// Runs `call` on a thread and waits 20 s for it. Were it to block on the FIFO (opening it
// for reading waits for a writer), a writer opens it then, so the test fails instead of
// hanging.
template <typename F>
auto without_hanging(const std::string& fifo, F call) {
  auto result = std::async(std::launch::async, call);
  if (result.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    ADD_FAILURE() << "blocked on the FIFO " << fifo;
    int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }
  return result.get();
}

void expect_refused(const Status& st, const std::string& fifo) {
  ASSERT_FALSE(st.is_ok()) << "a FIFO was accepted";
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find(fifo), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("FIFO"), std::string::npos) << st.message();
}

TEST(LocalFileSystem, FifoIsRefusedNotWaitedFor) {
  TempDir dir;
  const std::string fifo = dir.file("shard-000000.tar");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  auto& fs = local_file_system();
  expect_refused(without_hanging(fifo, [&] { return fs.stat(fifo).status(); }), fifo);
  expect_refused(without_hanging(fifo, [&] { return fs.open(fifo).status(); }), fifo);
  ScanOptions skip;
  skip.on_corrupt = OnCorrupt::kSkip;
  for (const auto& options : {ScanOptions{}, skip}) {
    expect_refused(without_hanging(
                       fifo, [&] { return build_manifest(fs, {fifo}, options, nullptr).status(); }),
                   fifo);
  }
}

TEST(LocalFileSystem, RegularFilesAndDirectoriesStillOpen) {
  TempDir dir;
  test::write_file(dir.file("a.tar"), "abc");
  auto& fs = local_file_system();
  auto info = fs.stat(dir.file("a.tar"));
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  EXPECT_EQ(info->size, 3u);
  EXPECT_GT(info->inode, 0u);
  EXPECT_GT(info->ctime_ns, 0);
  auto file = fs.open(dir.file("a.tar"));
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  char buf[3];
  auto got = (*file)->read_at(0, buf, 3);
  ASSERT_TRUE(got.is_ok());
  EXPECT_EQ(*got, 3u);
  auto d = fs.stat(dir.path());
  ASSERT_TRUE(d.is_ok());
  EXPECT_TRUE(d->is_directory);
}

}  // namespace
}  // namespace shardyard::io
