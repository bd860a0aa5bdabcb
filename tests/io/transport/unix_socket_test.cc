// Tests of io/transport/unix_socket.h: frames with descriptors, bounds, damage, timeouts,
// a peer that goes away, and an end handed to a program started with exec().
#include "io/transport/unix_socket.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstring>

#include "io/transport/shm_segment.h"
#include "process_util.h"
#include "runtime/codec.h"

namespace shardyard::io {
namespace {

using testing::count_open_fds;

std::pair<UnixSocket, UnixSocket> make_pair(size_t max = 64 << 10) {
  auto p = UnixSocket::pair(max);
  EXPECT_TRUE(p.is_ok()) << p.status().to_string();
  return std::move(*p);
}

// A raw message with the frame header's fields as given.
std::string raw(uint32_t magic, uint16_t version, uint16_t type, uint32_t body_bytes,
                const std::string& body) {
  ByteWriter w;
  w.u32(magic);
  w.u32(version | (uint32_t{type} << 16));
  w.u32(body_bytes);
  return w.out + body;
}

Status receive_error(UnixSocket& s) {
  Frame f;
  auto got = s.receive(&f, 1000);
  return got.is_ok() ? Status::ok() : got.status();
}

ino_t inode(int fd) {
  struct stat st;
  return ::fstat(fd, &st) == 0 ? st.st_ino : 0;
}

class UnixSocketTest : public ::testing::Test {
 protected:
  void SetUp() override { fds_ = count_open_fds(); }
  void TearDown() override { EXPECT_EQ(count_open_fds(), fds_) << "descriptors leaked"; }
  int fds_ = 0;
};

TEST_F(UnixSocketTest, CarriesFramesWithDescriptorsCloseOnExec) {
  auto [a, b] = make_pair();
  EXPECT_TRUE(::fcntl(a.fd(), F_GETFD) & FD_CLOEXEC);
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  const ino_t pipe_inode = inode(p[0]);
  Frame out{42, std::string(1000, 'x'), {}};
  out.fds.emplace_back(p[0]);
  out.fds.emplace_back(p[1]);
  ASSERT_TRUE(a.send(out, 1000).is_ok());
  ASSERT_TRUE(a.send({43, "", {}}, 1000).is_ok());
  out.fds.clear();  // ours close; the peer's copies live on
  Frame in;
  auto got = b.receive(&in, 1000);
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  ASSERT_EQ(*got, UnixSocket::Received::kFrame);
  EXPECT_EQ(in.type, 42);
  EXPECT_EQ(in.body, std::string(1000, 'x'));
  ASSERT_EQ(in.fds.size(), 2u);
  for (const auto& fd : in.fds) {
    EXPECT_EQ(inode(fd.get()), pipe_inode);
    EXPECT_TRUE(::fcntl(fd.get(), F_GETFD) & FD_CLOEXEC) << "received descriptors too";
  }
  ASSERT_EQ(::write(in.fds[1].get(), "z", 1), 1);
  char c = 0;
  ASSERT_EQ(::read(in.fds[0].get(), &c, 1), 1);
  EXPECT_EQ(c, 'z');
  ASSERT_EQ(*b.receive(&in, 1000), UnixSocket::Received::kFrame);
  EXPECT_EQ(in.type, 43);
  EXPECT_TRUE(in.body.empty());
  EXPECT_TRUE(in.fds.empty());
}

TEST_F(UnixSocketTest, ReceiveTimesOutAndSeesAPeerThatClosed) {
  auto [a, b] = make_pair();
  Frame f;
  EXPECT_EQ(*b.receive(&f, 0), UnixSocket::Received::kTimeout);
  EXPECT_EQ(*b.receive(&f, 30), UnixSocket::Received::kTimeout);
  // Without a wait too: a frame there is taken, none there is a timeout, not an error.
  ASSERT_TRUE(a.send({7, "now", {}}, 1000).is_ok());
  ASSERT_EQ(*b.receive(&f, 0), UnixSocket::Received::kFrame);
  EXPECT_EQ(f.type, 7);
  EXPECT_EQ(f.body, "now");
  EXPECT_EQ(*b.receive(&f, 0), UnixSocket::Received::kTimeout);
  ASSERT_TRUE(a.send({1, "last", {}}, 1000).is_ok());
  { UnixSocket gone = std::move(a); }
  ASSERT_EQ(*b.receive(&f, 1000), UnixSocket::Received::kFrame) << "what was sent still comes";
  EXPECT_EQ(*b.receive(&f, 0), UnixSocket::Received::kClosed) << "seen without a wait";
  EXPECT_EQ(*b.receive(&f, 1000), UnixSocket::Received::kClosed);
  // Sending to a closed peer is an error, not a SIGPIPE that kills the process.
  Status s = b.send({1, "x", {}}, 1000);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("closed"), std::string::npos) << s.message();
}

TEST_F(UnixSocketTest, APeerThatClosedWithFramesUnreadStillDeliversWhatItSent) {
  // A peer that closes with frames of ours unread resets the socket: the kernel reports
  // ECONNRESET once, ahead of the frames the peer sent before it closed (a worker's last
  // run and finish frame, with a credit of the loader's unread). They come first, then
  // the end, with and without a wait.
  for (int timeout : {0, 1000}) {
    SCOPED_TRACE(timeout);
    auto [a, b] = make_pair();
    ASSERT_TRUE(b.send({5, "unread", {}}, 1000).is_ok());
    ASSERT_TRUE(a.send({6, "run", {}}, 1000).is_ok());
    ASSERT_TRUE(a.send({7, "finish", {}}, 1000).is_ok());
    { UnixSocket gone = std::move(a); }
    Frame f;
    auto got = b.receive(&f, timeout);
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    ASSERT_EQ(*got, UnixSocket::Received::kFrame);
    EXPECT_EQ(f.body, "run");
    ASSERT_EQ(*b.receive(&f, timeout), UnixSocket::Received::kFrame);
    EXPECT_EQ(f.body, "finish");
    EXPECT_EQ(*b.receive(&f, timeout), UnixSocket::Received::kClosed);
  }
}

TEST_F(UnixSocketTest, ShutdownEndsBothDirections) {
  auto [a, b] = make_pair();
  a.shutdown();
  Frame f;
  EXPECT_EQ(*b.receive(&f, 1000), UnixSocket::Received::kClosed);
  EXPECT_EQ(b.send({1, "x", {}}, 100).code(), StatusCode::kUnavailable);
}

TEST_F(UnixSocketTest, OversizedFrameIsAnErrorAndTheSocketGoesOn) {
  auto [a, b] = make_pair(1024);
  EXPECT_EQ(a.send({1, std::string(2000, 'y'), {}}, 100).code(), StatusCode::kInvalidArgument);
  const std::string big = raw(kFrameMagic, kFrameVersion, 1, 5000, std::string(5000, 'y'));
  ASSERT_EQ(::send(a.fd(), big.data(), big.size(), 0), static_cast<ssize_t>(big.size()));
  Status s = receive_error(b);
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_NE(s.message().find("larger than the bound of 1024"), std::string::npos) << s.message();
  ASSERT_TRUE(a.send({2, "ok", {}}, 100).is_ok());
  Frame f;
  ASSERT_EQ(*b.receive(&f, 1000), UnixSocket::Received::kFrame);
  EXPECT_EQ(f.body, "ok");
}

TEST_F(UnixSocketTest, MalformedFramesAreErrors) {
  auto [a, b] = make_pair();
  const std::string cases[] = {
      std::string("short"),
      raw(0x12345678, kFrameVersion, 1, 2, "ab"),
      raw(kFrameMagic, 9, 1, 2, "ab"),
      raw(kFrameMagic, kFrameVersion, 1, 3, "ab"),
      raw(kFrameMagic, kFrameVersion, 1, 0xffffffff, "ab"),
  };
  const char* why[] = {"shorter than its header", "bad magic", "version 9", "says 3 body bytes",
                       "says 4294967295"};
  for (size_t i = 0; i < 5; ++i) {
    ASSERT_EQ(::send(a.fd(), cases[i].data(), cases[i].size(), 0),
              static_cast<ssize_t>(cases[i].size()));
    Status s = receive_error(b);
    EXPECT_EQ(s.code(), StatusCode::kCorrupt) << i;
    EXPECT_NE(s.message().find(why[i]), std::string::npos) << s.message();
  }
}

TEST_F(UnixSocketTest, TooManyDescriptorsAreRefusedAndClosed) {
  auto [a, b] = make_pair();
  Frame many{1, "x", {}};
  for (int i = 0; i < 5; ++i) many.fds.emplace_back(::dup(0));
  EXPECT_EQ(a.send(many, 100).code(), StatusCode::kInvalidArgument);
  // A peer that is not this code sends 6 with sendmsg() itself.
  const std::string m = raw(kFrameMagic, kFrameVersion, 1, 1, "x");
  iovec iov{const_cast<char*>(m.data()), m.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(6 * sizeof(int))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(6 * sizeof(int));
  for (int i = 0; i < 6; ++i) {
    const int fd = many.fds[i % 5].get();
    std::memcpy(CMSG_DATA(c) + i * sizeof(int), &fd, sizeof fd);
  }
  ASSERT_GT(::sendmsg(a.fd(), &msg, 0), 0);
  Status s = receive_error(b);
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_NE(s.message().find("more than 4 descriptors"), std::string::npos) << s.message();
  // TearDown checks that none of the received descriptors stayed open.
}

TEST_F(UnixSocketTest, SendTimesOutWhenThePeerReadsNothing) {
  auto [a, b] = make_pair();
  Status s;
  for (int i = 0; i < 100000 && s.is_ok(); ++i) s = a.send({1, std::string(4000, 'q'), {}}, 50);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("took no frame for 50 ms"), std::string::npos) << s.message();
  auto sent = a.send_now({1, "x", {}});
  ASSERT_TRUE(sent.is_ok());
  EXPECT_FALSE(*sent);
}

TEST_F(UnixSocketTest, AdoptChecksWhatItIsGiven) {
  EXPECT_EQ(UnixSocket::adopt_number("12x", "FD_VAR").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(UnixSocket::adopt_number("", "FD_VAR").status().code(), StatusCode::kInvalidArgument);
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  ::close(p[1]);
  auto r = UnixSocket::adopt_number(std::to_string(p[0]), "FD_VAR");  // owns p[0] now
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("FD_VAR: descriptor"), std::string::npos);
  int s[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, s), 0);
  ::close(s[1]);
  EXPECT_NE(UnixSocket::adopt(UniqueFd(s[0])).status().message().find("SEQPACKET"),
            std::string::npos);
}

// The path a worker process takes: the socket's number in the environment, exec(), adopt.
TEST_F(UnixSocketTest, AnExecedProgramGetsTheSocketByNumberAndSendsDescriptorsBack) {
  auto [parent, child_end] = make_pair();
  ShmSegment seg =
      ShmSegment::create(4096, SegmentOptions{testing::test_shm_dir(), "", "echo"}).value();
  auto map = *seg.map(ShmSegment::Access::kReadWrite);
  std::memset(map->writable_data(), 41, 4096);
  testing::Child child =
      testing::spawn(SY_SHM_PEER, {"echo"},
                     {{"SHARDYARD_TEST_SOCKET_FD", std::to_string(child_end.fd())},
                      {"SHARDYARD_SHM_DIR", testing::test_shm_dir()}},
                     {child_end.fd()});
  ASSERT_GT(child.pid(), 0);
  child_end = UnixSocket();  // the parent's copy of the child's end
  Frame out{1, "the body", {}};
  out.fds.push_back(seg.duplicate().value());
  ASSERT_TRUE(parent.send(out, 5000).is_ok());
  Frame in;
  auto got = parent.receive(&in, 10000);
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  ASSERT_EQ(*got, UnixSocket::Received::kFrame);
  EXPECT_EQ(child.wait(10000), 0);
  EXPECT_EQ(in.body, "echo");
  ASSERT_EQ(in.fds.size(), 1u);
  EXPECT_EQ(map->data()[0], 42) << "the child wrote into the segment it was sent";
  EXPECT_EQ(map->data()[4095], 42);
  auto reply = ShmSegment::adopt(std::move(in.fds[0]), "reply");
  ASSERT_TRUE(reply.is_ok());
  EXPECT_FALSE(reply->map(ShmSegment::Access::kReadWrite).is_ok()) << "sent read-only";
  auto rmap = reply->map(ShmSegment::Access::kReadOnly);
  ASSERT_TRUE(rmap.is_ok());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*rmap)->data()), 8), "the body");
  EXPECT_EQ(*parent.receive(&in, 5000), UnixSocket::Received::kClosed) << "the child exited";
}

}  // namespace
}  // namespace shardyard::io
