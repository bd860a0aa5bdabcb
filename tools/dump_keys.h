// The --dump-keys files of `shardyard run`: DIR/rank-<r>.tsv, one line per delivered sample.
//
// A line is `epoch<TAB>step<TAB>key<TAB>bytes<TAB>sha256_16` (sha256_16: the first 16 hex
// digits of the SHA-256 of the sample's field payloads, fields in name order). Keys are
// escaped so that one sample is always one line whatever its member names hold: a
// backslash becomes \\, TAB \t, LF \n, CR \r, any other byte below 0x20 and 0x7f become
// \xHH (two lowercase hex digits); every other byte, UTF-8 included, is written as it is.
// A key without those bytes is written unchanged.
//
// Lines are written and flushed after every batch, so the file is complete up to the last
// batch the trainer received, however the run ends (also when it is killed between
// batches).
//
// Single-owner: one DumpWriter per rank thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "digest.h"
#include "runtime/batch.h"
#include "runtime/status.h"

namespace shardyard::tools {

std::string escape_key(std::string_view key);

// Creates `dir` and removes the rank-<r>.tsv files of ranks >= `ranks` that an earlier run
// with more ranks left there, so the folder holds this run's files only.
Status prepare_dump_dir(const std::string& dir, uint32_t ranks);

class DumpWriter {
 public:
  DumpWriter() = default;
  ~DumpWriter();
  DumpWriter(const DumpWriter&) = delete;
  DumpWriter& operator=(const DumpWriter&) = delete;
  // Truncates and opens DIR/rank-<rank>.tsv.
  Status open(const std::string& dir, uint32_t rank);
  bool is_open() const { return file_ != nullptr; }
  // One line per sample of `b`, then a flush.
  Status add(const Batch& b);
  Status close();

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
  std::string lines_;
  Sha256 sha_;
};

}  // namespace shardyard::tools
