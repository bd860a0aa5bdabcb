#include "io/format/gzip.h"

#include <zlib.h>

#include <cstring>
#include <vector>

namespace shardyard::io {

namespace {

class GzipStream : public ByteStream {
 public:
  explicit GzipStream(std::shared_ptr<RandomAccessFile> file) : file_(std::move(file)) {
    std::memset(&z_, 0, sizeof z_);
    ok_ = inflateInit2(&z_, 16 + MAX_WBITS) == Z_OK;
    in_.resize(256 << 10);
  }
  ~GzipStream() override { inflateEnd(&z_); }

  Result<size_t> read(void* dst, size_t n) override {
    if (!ok_) return internal_error(file_->uri() + ": cannot start zlib");
    z_.next_out = static_cast<Bytef*>(dst);
    z_.avail_out = static_cast<uInt>(n);
    while (z_.avail_out > 0 && !finished_) {
      if (z_.avail_in == 0) {
        SY_ASSIGN_OR_RETURN(size_t got, file_->read_at(file_pos_, in_.data(), in_.size()));
        file_pos_ += got;
        if (got == 0) {
          if (started_member_)
            return corrupt(file_->uri() + ": truncated gzip stream at uncompressed byte " +
                           std::to_string(pos_ + (n - z_.avail_out)));
          finished_ = true;
          break;
        }
        z_.next_in = in_.data();
        z_.avail_in = static_cast<uInt>(got);
      }
      started_member_ = true;
      int rc = inflate(&z_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        started_member_ = false;
        inflateReset(&z_);  // another gzip member may follow
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        return corrupt(file_->uri() + ": corrupt gzip data near uncompressed byte " +
                       std::to_string(pos_ + (n - z_.avail_out)) + ": " +
                       (z_.msg ? z_.msg : "zlib error"));
      }
    }
    size_t done = n - z_.avail_out;
    pos_ += done;
    return done;
  }

  Status skip(uint64_t n) override {
    std::vector<uint8_t> sink(std::min<uint64_t>(n, 256 << 10));
    while (n > 0) {
      SY_ASSIGN_OR_RETURN(size_t got, read(sink.data(), std::min<uint64_t>(n, sink.size())));
      if (got == 0) {
        pos_ += n;  // past the end: the next read returns 0
        return Status::ok();
      }
      n -= got;
    }
    return Status::ok();
  }

  uint64_t position() const override { return pos_; }

 private:
  std::shared_ptr<RandomAccessFile> file_;
  z_stream z_;
  bool ok_ = false;
  bool finished_ = false;
  bool started_member_ = false;
  std::vector<uint8_t> in_;
  uint64_t file_pos_ = 0;
  uint64_t pos_ = 0;
};

}  // namespace

std::unique_ptr<ByteStream> gzip_stream(std::shared_ptr<RandomAccessFile> file) {
  return std::make_unique<GzipStream>(std::move(file));
}

bool looks_gzip(RandomAccessFile& file) {
  uint8_t magic[2] = {0, 0};
  auto got = file.read_at(0, magic, 2);
  return got.is_ok() && *got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
}

}  // namespace shardyard::io
