// A ByteStream that inflates a gzip file (.tar.gz shards) with zlib.
//
// Positions are offsets in the uncompressed stream. Skipping inflates and discards (gzip
// cannot seek), so readers of compressed sources read forward only; concatenated gzip
// members are read as one stream. Single-owner.
#pragma once

#include <memory>

#include "io/fs/file_system.h"

namespace shardyard::io {

std::unique_ptr<ByteStream> gzip_stream(std::shared_ptr<RandomAccessFile> file);

// True when the file starts with the gzip magic bytes.
bool looks_gzip(RandomAccessFile& file);

}  // namespace shardyard::io
