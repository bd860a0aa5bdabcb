// ReadAheadFile: turns many small reads of a slow (remote) file into few large ones.
//
// It wraps a RandomAccessFile whose every read_at costs a round trip (a ranged GET) and
// keeps a bounded set of cached blocks of the file:
//  - a read that continues where one of the last few reads ended (or where will_need()
//    pointed) is sequential: its missing bytes are fetched as a whole block (the first block is
//    `initial_block_bytes`, and each sequential read doubles it up to `block_bytes`), and
//    once blocks are full size the next `readahead_blocks` blocks are fetched in the
//    background on the I/O task pool;
//  - a large read (at least block_bytes) goes straight into the caller's memory, split into
//    block-sized ranged reads that run in parallel;
//  - any other read (a header after a seek past a payload) fetches exactly what it asks.
// A block is dropped as soon as its last byte has been read (each byte is read once by the
// tar scan and by the sample reader), and the blocks of one file hold at most
// `max_cached_bytes` (the oldest goes first). A byte budget, not a block count: a worker
// interleaving many logical shards of one file has many small hinted blocks in flight.
// will_need(offset, n) fetches [offset, offset + n) (at least 64 KiB) in the background;
// a file that has had a hint gets no blind read-ahead; hint_bytes() asks a reader that reads
// the file in order to name its next pieces in one hint of up to `hint_bytes` (one request
// for them all instead of one per piece). map(offset, n) gives a view of a
// fetched block that holds the whole range (a hinted chunk), so the reader's items keep
// the block instead of a copy of it; nullptr when no block holds it (the caller reads).
//
// Thread-safe: read_at and will_need may be called from several threads; the background
// fetches hold the wrapped file (shared) and their block, never the ReadAheadFile.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "io/fs/file_system.h"

namespace shardyard::io {

struct ReadAheadOptions {
  size_t block_bytes = 8u << 20;  // SHARDYARD_HTTP_BLOCK_BYTES
  size_t initial_block_bytes = 256u << 10;
  uint32_t readahead_blocks = 2;        // SHARDYARD_HTTP_READAHEAD_BLOCKS; 0 = none
  size_t max_cached_bytes = 48u << 20;  // per open file: SHARDYARD_HTTP_FILE_CACHE_BYTES
  // What a reader's hint had best name (RandomAccessFile::hint_bytes()):
  // SHARDYARD_HTTP_HINT_BYTES; 0 = one chunk per hint.
  size_t hint_bytes = 512u << 10;

  static Result<ReadAheadOptions> from_env();
};

std::unique_ptr<RandomAccessFile> read_ahead_file(std::shared_ptr<RandomAccessFile> base,
                                                  const ReadAheadOptions& options);

// The process's pool of I/O threads for background fetches (SHARDYARD_HTTP_THREADS,
// default 8). Tasks must not wait for other tasks of the pool.
void run_io_task(std::function<void()> task);

}  // namespace shardyard::io
