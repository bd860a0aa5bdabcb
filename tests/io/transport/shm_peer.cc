// shm_peer: the other process of the io/transport tests, started with fork() + exec() the
// way a rank starts a worker process: the socket's descriptor number comes in the
// environment (SHARDYARD_TEST_SOCKET_FD).
//
//   shm_peer produce SEED PACKETS MAX_ITEMS MAX_FIELD_BYTES
//       connects as a producer and pushes PACKETS packets of the stream (test_items.h), or
//       packets until a push fails when PACKETS is 0; then finish(OK). Exit 0 when done, 2
//       when a push failed, 3 when it was cancelled, 4 when it could not connect.
//   shm_peer echo
//       receives a frame with a segment, adds 1 to each of its bytes, and answers with a
//       frame that carries a new segment holding the frame's body.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "io/transport/shm_channel.h"
#include "io/transport/shm_segment.h"
#include "io/transport/unix_socket.h"
#include "test_items.h"

using namespace shardyard;
using namespace shardyard::io;

namespace {

int produce(UnixSocket socket, char** argv) {
  testing::StreamSpec spec;
  spec.seed = std::strtoull(argv[0], nullptr, 10);
  const uint64_t packets = std::strtoull(argv[1], nullptr, 10);
  spec.max_items = static_cast<uint32_t>(std::strtoul(argv[2], nullptr, 10));
  spec.max_field_bytes = static_cast<uint32_t>(std::strtoul(argv[3], nullptr, 10));
  auto producer = ShmProducer::connect(std::move(socket), 10000, 60000);
  if (!producer.is_ok()) {
    std::fprintf(stderr, "shm_peer: %s\n", producer.status().to_string().c_str());
    return 4;
  }
  for (uint64_t i = 0; packets == 0 || i < packets; ++i) {
    Status s = (*producer)->push(testing::make_packet(spec, i));
    if (!s.is_ok()) {
      std::fprintf(stderr, "shm_peer: %s\n", s.to_string().c_str());
      return s.code() == StatusCode::kCancelled ? 3 : 2;
    }
  }
  (*producer)->finish(Status::ok());
  return 0;
}

int echo(UnixSocket socket) {
  Frame f;
  auto got = socket.receive(&f, 10000);
  if (!got.is_ok() || *got != UnixSocket::Received::kFrame || f.fds.size() != 1) return 5;
  auto seg = ShmSegment::adopt(std::move(f.fds[0]), "echo segment");
  if (!seg.is_ok()) return 6;
  auto map = seg->map(ShmSegment::Access::kReadWrite);
  if (!map.is_ok()) return 7;
  for (size_t i = 0; i < (*map)->size(); ++i) ++(*map)->writable_data()[i];
  SegmentOptions o;
  o.dir = std::getenv("SHARDYARD_SHM_DIR") ? std::getenv("SHARDYARD_SHM_DIR") : "";
  auto reply = ShmSegment::create(f.body.size(), o);
  if (!reply.is_ok()) return 8;
  auto rmap = reply->map(ShmSegment::Access::kReadWrite);
  if (!rmap.is_ok()) return 9;
  std::memcpy((*rmap)->writable_data(), f.body.data(), f.body.size());
  Frame out{7, "echo", {}};
  auto fd = reply->read_only_fd();
  if (!fd.is_ok()) return 10;
  out.fds.push_back(std::move(*fd));
  return socket.send(out, 10000).is_ok() ? 0 : 11;
}

}  // namespace

int main(int argc, char** argv) {
  const char* fd = std::getenv("SHARDYARD_TEST_SOCKET_FD");
  auto socket = UnixSocket::adopt_number(fd ? fd : "", "SHARDYARD_TEST_SOCKET_FD");
  if (!socket.is_ok()) {
    std::fprintf(stderr, "shm_peer: %s\n", socket.status().to_string().c_str());
    return 1;
  }
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "produce" && argc == 6) return produce(std::move(*socket), argv + 2);
  if (mode == "echo") return echo(std::move(*socket));
  std::fprintf(stderr, "usage: shm_peer produce SEED PACKETS MAX_ITEMS MAX_FIELD | echo\n");
  return 1;
}
