// Checkpoint state and its on-disk format (docs/checkpoint-format.md).
//
// A checkpoint is a consistent cut of a job at one step of one epoch: what the trainers of
// all ranks consumed, never what workers produced ahead. It is small and topology-free:
// per logical shard how many items the epoch takes from it and how many were consumed (a
// prefix of the shard's epoch order), plus the job's identity (fingerprint, L, seed, ...),
// the batch layout in force (so a resume at the same R and batch size continues the very
// same batches) and the declared state of stateful stages. Its size depends on L and on
// stage state, never on the dataset's size or on buffered samples.
//
// On disk a checkpoint directory holds one file per rank and a manifest, CHECKPOINT, that
// names the rank files of the committed generation with their sizes and checksums. Every
// file is an envelope (runtime/codec.h) with its own magic and format version. Writing the
// files atomically is io/persist/checkpoint_store.h; this header is plain data, encoding and the
// checks that decide whether a checkpoint may resume a job.
//
// Pure functions and value types; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/shard.h"
#include "runtime/status.h"

namespace shardyard {

// Rank files: version 2 added the dispatcher's and the loader's stage state; version 1
// files still load. CHECKPOINT is unchanged since version 1.
inline constexpr uint32_t kCheckpointFormatVersion = 2;
inline constexpr uint32_t kCheckpointManifestFormatVersion = 1;
inline constexpr char kCheckpointManifestName[] = "CHECKPOINT";

// What a checkpoint must share with the job that resumes it.
struct CheckpointJob {
  uint64_t fingerprint = 0;  // manifest fingerprint of the dataset
  uint64_t num_items = 0;
  uint32_t logical_shards = 0;
  uint32_t chunk_items = 0;
  uint64_t seed = 0;
  bool shuffle = false;
  bool drop_last = false;
  std::string distributed_strategy;
  std::string worker_strategy;
};

// Refuses a checkpoint of another job, naming the first difference.
Status check_same_job(const CheckpointJob& saved, const CheckpointJob& now);

// The topology the checkpoint was taken at (a resume may use another).
struct CheckpointTopology {
  uint32_t ranks = 1;
  uint32_t workers = 1;
  uint32_t batch_size = 1;
  bool exact_order = true;
};

struct ShardProgress {
  uint32_t shard = 0;
  uint64_t take = 0;      // items this epoch delivers from the shard
  uint64_t consumed = 0;  // of those, consumed by the trainer
};

// One rank's part of the cut.
struct RankCheckpoint {
  uint64_t generation = 0;
  uint32_t rank = 0;
  uint64_t fingerprint = 0;
  uint32_t epoch = 0;
  uint64_t step = 0;                  // steps this rank's trainer consumed in the epoch
  std::vector<ShardProgress> shards;  // the rank's logical shards
  uint64_t layout_offset = 0;
  uint64_t layout_items = 0;
  // Per worker of the rank: the saved state of its stateful stages (encode_stage_states),
  // as of the last item of that worker the trainer consumed; empty when none.
  std::vector<std::string> worker_states;
  // The state of the rank's non-replicable stages: those of its dispatcher (as of the last
  // item the trainer consumed) and those after the merge point, run by its loader.
  std::string dispatcher_state;
  std::string loader_state;
};

struct RankFileRef {
  uint32_t rank = 0;
  std::string name;  // file name inside the checkpoint directory
  uint64_t size = 0;
  uint64_t checksum = 0;  // Hasher digest of the whole file
};

// The CHECKPOINT file: the committed generation.
struct CheckpointManifest {
  uint64_t generation = 0;
  int64_t created_unix_ms = 0;
  CheckpointJob job;
  CheckpointTopology topology;
  uint32_t epoch = 0;
  uint64_t step = 0;   // the cut: steps consumed in `epoch` on every rank
  uint64_t steps = 0;  // one past the epoch's last step number
  uint64_t layout_step0 = 0;
  bool epoch_complete = false;  // the cut is the end of `epoch`: resume at epoch + 1
  std::vector<RankFileRef> ranks;
};

std::string encode_rank_checkpoint(const RankCheckpoint& c);
Result<RankCheckpoint> decode_rank_checkpoint(std::string_view bytes, const std::string& name);
std::string encode_checkpoint_manifest(const CheckpointManifest& m);
Result<CheckpointManifest> decode_checkpoint_manifest(std::string_view bytes,
                                                      const std::string& name);

// The whole cut: a manifest and every rank file it names, checked against each other.
struct Checkpoint {
  CheckpointManifest manifest;
  std::vector<RankCheckpoint> ranks;  // by rank

  // Validates that the rank files belong to the manifest (generation, fingerprint, epoch,
  // step) and that every logical shard appears in exactly one of them.
  static Result<Checkpoint> assemble(CheckpointManifest manifest,
                                     std::vector<RankCheckpoint> ranks);
  // Where the epoch stands, across all shards (the input of plan_epoch's resume).
  EpochCursor cursor() const;
  // Saved worker states, by global worker (rank * workers + worker) of the saved topology.
  std::vector<std::string> worker_states() const;
  // The epoch a resume starts: `epoch`, or the next one when the cut is its end.
  uint32_t resume_epoch() const {
    return manifest.epoch_complete ? manifest.epoch + 1 : manifest.epoch;
  }
};

// Decodes a CHECKPOINT file and the rank files it names (by rank), checking each rank
// file's size and checksum against CHECKPOINT, then assembles the cut. `dir` names the
// checkpoint in messages.
Result<Checkpoint> decode_checkpoint(std::string_view manifest,
                                     const std::vector<std::string>& rank_files,
                                     const std::string& dir);

// A whole cut as one byte string, for trainers that keep the loader's state in their own
// checkpoints (Loader::state(), Loader::load_state()): the CHECKPOINT bytes and every rank
// file's bytes, in an envelope of its own (magic "SYCKSTAT", docs/checkpoint-format.md).
struct CheckpointState {
  std::string manifest;                 // the bytes CHECKPOINT would hold
  std::vector<std::string> rank_files;  // by rank
};
std::string encode_checkpoint_state(const CheckpointState& state);
// Checks the envelope and the layout only; decode_checkpoint() checks the contents.
Result<CheckpointState> decode_checkpoint_state(std::string_view bytes);

// A worker's stage states: one entry per stateful stage of the pipeline, in order.
std::string encode_stage_states(const std::vector<std::string>& states);
Result<std::vector<std::string>> decode_stage_states(std::string_view bytes);

// Hasher digest of a file's bytes (the checksum CHECKPOINT records for a rank file).
uint64_t file_checksum(std::string_view bytes);

}  // namespace shardyard
