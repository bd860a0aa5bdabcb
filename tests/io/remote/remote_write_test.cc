// The default file system's writes (io::default_file_system(), the Env's by default): local
// paths are written, http(s):// and s3:// uris are refused with an error that names the uri
// and says where checkpoints can go. No server is needed: the refusal comes before any
// request.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "io/remote/remote_file_system.h"

namespace shardyard::io {
namespace {

TEST(RemoteWriteTest, RemoteUrisAreRefusedWithTheirNameAndWhatToDo) {
  FileSystem& fs = default_file_system();
  for (const std::string uri : {"s3://bucket/ckpt/CHECKPOINT", "https://example.org/ckpt/x"}) {
    for (const Status& st : {fs.new_writable_file(uri).status(), fs.rename(uri, uri + ".2"),
                             fs.remove(uri), fs.create_dir(uri), fs.sync_dir(uri)}) {
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << uri;
      EXPECT_NE(st.message().find(uri), std::string::npos) << st.message();
      EXPECT_NE(st.message().find("local or mounted directory"), std::string::npos) << st.message();
    }
  }
}

TEST(RemoteWriteTest, LocalPathsAreWritten) {
  std::string dir = ::testing::TempDir() + "/sy_remote_write_XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  FileSystem& fs = default_file_system();
  ASSERT_TRUE(write_file_atomic(fs, dir + "/f", "bytes", true).is_ok());
  EXPECT_EQ(read_file(fs, dir + "/f").value(), "bytes");
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace
}  // namespace shardyard::io
