// Checkpoint directories on a FileSystem (io/fs/interface.h): atomic writes, commit and load.
//
// A save writes one file per rank, named by rank and generation
// (rank-00003.g000007.ckpt), then commits by replacing CHECKPOINT, which names the files of
// the new generation. Every file is written to a temporary name in the same directory,
// fsynced, renamed over its final name, and the directory is fsynced: a crash (even
// SIGKILL) at any point leaves either the previous CHECKPOINT with all the files it names,
// or the new one with all of its files. Files of other generations and stale temporaries
// are removed after a commit, and what an aborted or interrupted save left is removed when
// the next save starts (remove_uncommitted). Formats: runtime/checkpoint.h,
// docs/checkpoint-format.md. Every byte goes through the FileSystem given (the job's Env's,
// actors/env.h), never to the disk directly, so an in-memory or fault-injecting file system
// tests this path.
//
// Thread-safe (no shared state); concurrent saves into one directory must come from one
// job's coordinator, which serialises commits.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "io/fs/interface.h"
#include "runtime/checkpoint.h"

namespace shardyard::io {

// Writes dir/name atomically (temporary file, fsync, rename, fsync of the directory).
// Creates `dir` (one level) when it does not exist.
Status write_checkpoint_file(FileSystem& fs, const std::string& dir, const std::string& name,
                             std::string_view bytes);

std::string rank_file_name(uint32_t rank, uint64_t generation);

// One more than the largest generation found in `dir` (in CHECKPOINT or in a rank file's
// name, so an interrupted save's files are never reused); 1 for an empty or new directory.
Result<uint64_t> next_generation(FileSystem& fs, const std::string& dir);

// Replaces CHECKPOINT with `manifest` and removes what no longer belongs to it.
Status commit_checkpoint(FileSystem& fs, const std::string& dir,
                         const CheckpointManifest& manifest);

// Removes what saves that never committed left in `dir` (a cut aborted because a rank
// could not write, a process killed in a save): rank files and their temporaries of every
// generation below `below` but the committed one, and CHECKPOINT's temporaries. Every save
// calls it with its own generation before it writes: every file below that generation is
// dead, as one job saves into a directory at a time (a resume only reads: the directory
// may be another job's). Never touches the committed checkpoint; does nothing when
// CHECKPOINT exists but cannot be read (it may be of a newer format). Best effort: what
// cannot be removed now goes the next time.
void remove_uncommitted(FileSystem& fs, const std::string& dir, uint64_t below);

// The bytes of CHECKPOINT and of every rank file it names (by rank), not yet checked
// beyond CHECKPOINT's own envelope. kNotFound for a directory without a checkpoint or a
// missing rank file.
struct CheckpointFiles {
  std::string manifest;
  std::vector<std::string> rank_files;
};
Result<CheckpointFiles> read_checkpoint_files(FileSystem& fs, const std::string& dir);

// Reads CHECKPOINT and every rank file it names, checking sizes and checksums, and
// assembles the cut. Clear errors: no checkpoint in `dir` (kNotFound), a missing rank file
// (kNotFound), a damaged or truncated file or one of a newer format (kCorrupt).
Result<Checkpoint> load_checkpoint(FileSystem& fs, const std::string& dir);

}  // namespace shardyard::io
