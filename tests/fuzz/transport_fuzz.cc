// libFuzzer target for the decoders of the shared-memory data plane (io/transport): what a
// worker process sends the loader, and what the loader hands workers. The first byte picks
// the decoder, the rest is its input:
//   0  an item descriptor block (item_codec.h) over a 64 KiB region, 4 sources of 64 KiB
//      and a data arena of 64 KiB
//   1  a hello frame body, 2 hello-ack, 3 run, 4 finish (shm_frames.h)
//   5  a raw message on a Unix socket (unix_socket.h: header, bounds)
//   6  a broadcast shard image (shm_shard.h), put in a memfd and opened
// Beyond "no crash, no sanitizer report": accepted blocks and bodies re-encode to the very
// same bytes, and every accepted field lies inside its region, its file (mapped, or read:
// sources 1 and 3 give a reader and their fields stay unread) or the data arena. Seeded
// from tests/fuzz/transport_corpus (written by tests/io/transport/item_codec_test.cc).
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "io/transport/item_codec.h"
#include "io/transport/shm_frames.h"
#include "io/transport/shm_shard.h"
#include "io/transport/unix_socket.h"

namespace {

using namespace shardyard;
using namespace shardyard::io;

void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "transport_fuzz: property broken: %s\n", what);
  std::abort();
}

template <typename Frame>
void same_bytes(const Result<Frame>& f, std::string_view in, const char* what) {
  if (f.is_ok()) check(encode(*f) == in, what);
}

// A source's bytes as a file.
class BytesFile : public FileReader {
 public:
  explicit BytesFile(const uint8_t (&bytes)[64 << 10]) : bytes_(bytes) {}
  Status read(uint64_t offset, uint8_t* dst, size_t n) const override {
    if (offset > sizeof bytes_ || n > sizeof bytes_ - offset) return corrupt("past the end");
    std::memcpy(dst, bytes_ + offset, n);
    return Status::ok();
  }

 private:
  const uint8_t (&bytes_)[64 << 10];
};

void items(std::string_view in) {
  static uint8_t region[64 << 10];
  static uint8_t file[64 << 10];   // every source's bytes, for file ranges
  static uint8_t arena[64 << 10];  // the data arena
  static const ArenaView arena_view{arena, sizeof arena};
  const FileRanges files = [](uint32_t source, uint64_t offset, uint64_t size) -> Result<FileView> {
    if (source >= 4 || offset > sizeof file || size > sizeof file - offset)
      return corrupt("past the end");
    // Sources 1 and 3 are read, not mapped: their fields stay unread.
    if (source % 2 == 1) return FileView{nullptr, nullptr, std::make_shared<BytesFile>(file)};
    return FileView{file + offset,
                    file_bytes_owner(FileBytes{nullptr, file, sizeof file, source, 0, {}}),
                    nullptr};
  };
  std::vector<Item> out;
  if (!decode_items(in, region, sizeof region, &out, "fuzz", &files, &arena_view).is_ok()) return;
  PayloadPlan plan;
  for (const auto& item : out) {
    const FileBytes* owner = file_bytes_of(item.owner);
    if (owner == nullptr && !item.owners.empty()) owner = file_bytes_of(item.owners[0]);
    plan.item_sources.push_back(owner == nullptr ? kNoSource : owner->source);
    for (const auto& f : item.fields) {
      if (f.unread()) {
        check(owner != nullptr && owner->reader != nullptr, "an unread field without a reader");
        uint8_t last = 0;
        check(owner->reader->read(f.file_offset + f.size - 1, &last, 1).is_ok(),
              "an unread field outside its file");
        plan.field_offsets.push_back(f.file_offset);
        plan.field_places.push_back(kPlaceFile);
        continue;
      }
      const bool in_region = f.data >= region && f.data + f.size <= region + sizeof region;
      const bool in_file = f.data >= file && f.data + f.size <= file + sizeof file;
      const bool in_arena = f.data >= arena && f.data + f.size <= arena + sizeof arena;
      check(in_region || in_arena || (in_file && owner != nullptr), "field outside");
      const uint8_t* base = in_region ? region : in_arena ? arena : file;
      plan.field_offsets.push_back(static_cast<uint64_t>(f.data - base));
      plan.field_places.push_back(in_region ? kPlaceRegion : in_arena ? kPlaceArena : kPlaceFile);
    }
  }
  ByteWriter again;
  encode_items(out.data(), out.size(), plan, &again);
  check(again.out == in, "an item block re-encodes to other bytes");
}

void socket_frame(std::string_view in) {
  static auto ends = UnixSocket::pair(4096);
  if (!ends.is_ok() || in.size() > 8192) return;
  if (::send(ends->first.fd(), in.data(), in.size(), 0) < 0) return;
  Frame f;
  auto got = ends->second.receive(&f, 0);
  if (!got.is_ok() || *got != UnixSocket::Received::kFrame) return;
  check(f.body == in.substr(kFrameHeaderBytes), "a frame's body is not what was sent");
}

void shard_image(std::string_view in) {
  if (in.empty()) return;
  const int fd = ::memfd_create("fuzz", MFD_CLOEXEC);
  if (fd < 0) return;
  if (::write(fd, in.data(), in.size()) != static_cast<ssize_t>(in.size())) {
    ::close(fd);
    return;
  }
  auto view = ShmShardView::open(UniqueFd(fd), "fuzz image");
  if (!view.is_ok()) return;
  auto shard = (*view)->materialize();
  if (!shard.is_ok()) return;
  for (const auto& item : (*shard)->items)
    for (const auto& f : item.fields)
      if (f.size > 0) (void)std::memchr(f.data, 0x5a, f.size);  // touches every byte
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 7) {
    case 0:
      items(in);
      break;
    case 1:
      same_bytes(decode_hello(in), in, "a hello re-encodes to other bytes");
      break;
    case 2:
      same_bytes(decode_hello_ack(in), in, "a hello-ack re-encodes to other bytes");
      break;
    case 3:
      same_bytes(decode_run(in), in, "a run re-encodes to other bytes");
      break;
    case 4:
      same_bytes(decode_finish(in), in, "a finish re-encodes to other bytes");
      break;
    case 5:
      socket_frame(in);
      break;
    case 6:
      shard_image(in);
      break;
  }
  return 0;
}
