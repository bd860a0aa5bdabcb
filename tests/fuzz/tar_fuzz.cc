// libFuzzer target for the tar reader (io/format/tar.h): parse_tar_buffer, scan_tar over an
// in-memory stream, and split_key, on arbitrary bytes. Beyond "no crash, no sanitizer
// report", it checks properties every input must keep:
//   - payload views handed out by parse_tar_buffer lie inside the input;
//   - neither walk reports more entries than the input has header blocks, and scan_tar's
//     entries start at strictly increasing offsets (a walk that goes back can loop forever);
//   - when scan_tar accepts the input, every entry's payload lies inside it, and
//     parse_tar_buffer accepts it too with the same entries (scan_tar is the stricter walk:
//     it also wants each payload's padding);
//   - walk_tar_range over the same bytes (read through a FileReader, members of at least 512
//     bytes left unread) accepts exactly what parse_tar_buffer accepts, with the same
//     entries, the same bytes for the payloads it reads, and no payload only for regular
//     members of at least 512 bytes;
//   - split_key, when it succeeds, splits the path into a non-empty key "." extension, the
//     extension has no '/' and the field is the extension in lower case.
// A broken property aborts with a message, so libFuzzer saves the input as a crash.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "io/format/tar.h"
#include "io/fs/file_system.h"

namespace {

using shardyard::Status;
using shardyard::io::kTarBlock;
using shardyard::io::TarEntry;

void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "tar_fuzz: property broken: %s\n", what);
  std::abort();
}

void check_split_key(std::string_view path) {
  auto kf = shardyard::io::split_key(path);
  if (!kf) {
    check(!shardyard::io::unmatched_reason(path).empty(), "a skipped name without a reason");
    return;
  }
  check(!kf->key.empty(), "split_key gave an empty key");
  check(kf->key.size() + 1 + kf->field.size() == path.size() &&
            path.substr(0, kf->key.size()) == kf->key && path[kf->key.size()] == '.',
        "split_key's key.field is not the path");
  const std::string_view ext = path.substr(kf->key.size() + 1);
  check(ext.find('/') == std::string_view::npos, "split_key's field has a '/'");
  for (size_t i = 0; i < ext.size(); ++i) {
    const char c = ext[i];
    check(kf->field[i] == (c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c),
          "split_key's field is not the extension in lower case");
  }
}

struct Seen {
  std::string path;
  uint64_t size, start, data;
  bool operator==(const Seen& o) const {
    return path == o.path && size == o.size && start == o.start && data == o.data;
  }
};

volatile uint8_t g_sink;

// The input as a file.
class BytesFile : public shardyard::FileReader {
 public:
  BytesFile(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  Status read(uint64_t offset, uint8_t* dst, size_t n) const override {
    if (offset > size_ || n > size_ - offset) return shardyard::corrupt("read past the input");
    if (n > 0) std::memcpy(dst, data_ + offset, n);
    return Status::ok();
  }

 private:
  const uint8_t* data_;
  size_t size_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string source = "fuzz.tar";
  const uint64_t blocks = size / kTarBlock;
  check_split_key(std::string_view(reinterpret_cast<const char*>(data), size));

  std::vector<Seen> parsed;
  Status parse_status = shardyard::io::parse_tar_buffer(
      data, size, 0, source, [&](const TarEntry& e, const uint8_t* payload) {
        check(payload >= data && payload <= data + size, "payload view outside the input");
        check(e.size <= static_cast<uint64_t>(data + size - payload),
              "payload view runs past the input");
        check(e.data_offset == static_cast<uint64_t>(payload - data),
              "data_offset does not match the payload view");
        uint8_t x = 0;
        for (uint64_t i = 0; i < e.size; ++i) x = static_cast<uint8_t>(x ^ payload[i]);
        g_sink = x;
        check(parsed.size() < blocks, "parse_tar_buffer: more entries than header blocks");
        parsed.push_back({e.path, e.size, e.start_offset, e.data_offset});
        check_split_key(e.path);
        return Status::ok();
      });

  std::vector<Seen> walked;
  constexpr uint64_t kUnread = 512;
  const BytesFile file(data, size);
  Status walk_status = shardyard::io::walk_tar_range(
      file, 0, size, source, kUnread, [&](const TarEntry& e, const uint8_t* payload) {
        if (payload == nullptr) {
          check(e.regular && !e.sparse && e.size >= kUnread, "a small member left unread");
        } else {
          check(e.data_offset <= size && e.size <= size - e.data_offset,
                "walk_tar_range: a payload past the input");
          check(e.size == 0 || std::memcmp(payload, data + e.data_offset, e.size) == 0,
                "walk_tar_range read other bytes than the input's");
        }
        check(walked.size() < blocks, "walk_tar_range: more entries than header blocks");
        walked.push_back({e.path, e.size, e.start_offset, e.data_offset});
        return Status::ok();
      });
  check(walk_status.is_ok() == parse_status.is_ok(),
        "walk_tar_range and parse_tar_buffer disagree on the input");
  if (walk_status.is_ok()) check(walked == parsed, "walk_tar_range saw other entries");

  std::vector<Seen> scanned;
  auto stream =
      shardyard::io::memory_stream(std::string(reinterpret_cast<const char*>(data), size));
  Status scan_status = shardyard::io::scan_tar(*stream, source, [&](const TarEntry& e) {
    check(scanned.size() < blocks, "scan_tar: more entries than header blocks");
    check(scanned.empty() || e.start_offset > scanned.back().start,
          "scan_tar went back to an earlier header");
    check(e.data_offset >= e.start_offset + kTarBlock, "entry's data before its header");
    scanned.push_back({e.path, e.size, e.start_offset, e.data_offset});
    check_split_key(e.path);
    return Status::ok();
  });

  if (scan_status.is_ok()) {
    for (const auto& s : scanned) {
      check(s.data <= size && s.size <= size - s.data,
            "scan_tar accepted an entry whose payload is not in the input");
    }
    check(parse_status.is_ok(), "scan_tar accepted what parse_tar_buffer refused");
    check(parsed == scanned, "scan_tar and parse_tar_buffer saw different entries");
  }
  return 0;
}
