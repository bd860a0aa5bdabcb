// Tests of runtime/checkpoint.h and the envelope of runtime/codec.h: both checkpoint formats
// round-trip every field; every damage (a flipped byte anywhere, a truncation, a newer
// version, a foreign file) is refused as kCorrupt, never decoded silently wrong; rank files
// are checked against CHECKPOINT; a cut is assembled only when its rank files cover every
// logical shard once; and a checkpoint of another job is refused naming the difference.
#include "runtime/checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/codec.h"
#include "test_manifest.h"

namespace shardyard {
namespace {

const std::string kDir = "/ckpt/job-7";
const std::string kRankName = "/ckpt/job-7/rank-00001.g000003.ckpt";
const std::string kManifestName = "/ckpt/job-7/CHECKPOINT";

// A rank file with every field set, binary and empty worker states included.
RankCheckpoint sample_rank() {
  RankCheckpoint c;
  c.generation = 3;
  c.rank = 1;
  c.fingerprint = 0xfedcba9876543210ULL;
  c.epoch = 7;
  c.step = 12345678901ULL;
  c.shards = {{5, 100, 37}, {0, 9, 9}, {2, 1ULL << 40, 0}};
  c.layout_offset = 17;
  c.layout_items = 1ULL << 33;
  c.worker_states = {"", std::string("\0\xff\x01 state", 9), "plain"};
  return c;
}

CheckpointManifest sample_manifest() {
  CheckpointManifest m;
  m.generation = 3;
  m.created_unix_ms = -1234567;
  m.job.fingerprint = 0xfedcba9876543210ULL;
  m.job.num_items = 999999;
  m.job.logical_shards = 6;
  m.job.chunk_items = 64;
  m.job.seed = 0x8000000000000001ULL;
  m.job.shuffle = true;
  m.job.drop_last = true;
  m.job.distributed_strategy = "strided";
  m.job.worker_strategy = "by-month";
  m.topology.ranks = 2;
  m.topology.workers = 3;
  m.topology.batch_size = 32;
  m.topology.exact_order = false;
  m.epoch = 7;
  m.step = 12345678901ULL;
  m.steps = 12345678999ULL;
  m.layout_step0 = 11;
  m.epoch_complete = true;
  m.ranks = {{0, "rank-00000.g000003.ckpt", 321, 0x1111222233334444ULL},
             {1, "rank-00001.g000003.ckpt", 654, 0x5555666677778888ULL}};
  return m;
}

void expect_same(const RankCheckpoint& a, const RankCheckpoint& b) {
  EXPECT_EQ(a.generation, b.generation);
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.fingerprint, b.fingerprint);
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.layout_offset, b.layout_offset);
  EXPECT_EQ(a.layout_items, b.layout_items);
  ASSERT_EQ(a.shards.size(), b.shards.size());
  for (size_t i = 0; i < a.shards.size(); ++i) {
    EXPECT_EQ(a.shards[i].shard, b.shards[i].shard) << i;
    EXPECT_EQ(a.shards[i].take, b.shards[i].take) << i;
    EXPECT_EQ(a.shards[i].consumed, b.shards[i].consumed) << i;
  }
  EXPECT_EQ(a.worker_states, b.worker_states);
}

void expect_same(const CheckpointManifest& a, const CheckpointManifest& b) {
  EXPECT_EQ(a.generation, b.generation);
  EXPECT_EQ(a.created_unix_ms, b.created_unix_ms);
  EXPECT_EQ(a.job.fingerprint, b.job.fingerprint);
  EXPECT_EQ(a.job.num_items, b.job.num_items);
  EXPECT_EQ(a.job.logical_shards, b.job.logical_shards);
  EXPECT_EQ(a.job.chunk_items, b.job.chunk_items);
  EXPECT_EQ(a.job.seed, b.job.seed);
  EXPECT_EQ(a.job.shuffle, b.job.shuffle);
  EXPECT_EQ(a.job.drop_last, b.job.drop_last);
  EXPECT_EQ(a.job.distributed_strategy, b.job.distributed_strategy);
  EXPECT_EQ(a.job.worker_strategy, b.job.worker_strategy);
  EXPECT_EQ(a.topology.ranks, b.topology.ranks);
  EXPECT_EQ(a.topology.workers, b.topology.workers);
  EXPECT_EQ(a.topology.batch_size, b.topology.batch_size);
  EXPECT_EQ(a.topology.exact_order, b.topology.exact_order);
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.steps, b.steps);
  EXPECT_EQ(a.layout_step0, b.layout_step0);
  EXPECT_EQ(a.epoch_complete, b.epoch_complete);
  ASSERT_EQ(a.ranks.size(), b.ranks.size());
  for (size_t i = 0; i < a.ranks.size(); ++i) {
    EXPECT_EQ(a.ranks[i].rank, b.ranks[i].rank) << i;
    EXPECT_EQ(a.ranks[i].name, b.ranks[i].name) << i;
    EXPECT_EQ(a.ranks[i].size, b.ranks[i].size) << i;
    EXPECT_EQ(a.ranks[i].checksum, b.ranks[i].checksum) << i;
  }
}

template <typename T>
void expect_corrupt(const Result<T>& r, const std::string& name, const std::string& what) {
  ASSERT_FALSE(r.is_ok()) << what << ": decoded a damaged file";
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt) << what << ": " << r.status().to_string();
  EXPECT_NE(r.status().message().find(name), std::string::npos)
      << what << ": the message names the file: " << r.status().message();
}

void expect_message(const Status& s, const std::string& part) {
  EXPECT_NE(s.message().find(part), std::string::npos)
      << "expected \"" << part << "\" in: " << s.message();
}

// Both formats, as (name, encoded bytes, decoder).
struct Format {
  std::string what;
  std::string name;
  std::string bytes;
  std::function<Status(std::string_view)> decode;
};

std::vector<Format> formats() {
  return {
      {"rank file", kRankName, encode_rank_checkpoint(sample_rank()),
       [](std::string_view b) { return decode_rank_checkpoint(b, kRankName).status(); }},
      {"manifest", kManifestName, encode_checkpoint_manifest(sample_manifest()),
       [](std::string_view b) { return decode_checkpoint_manifest(b, kManifestName).status(); }},
  };
}

void expect_refused(const Format& f, std::string_view bytes, const std::string& what) {
  const Status s = f.decode(bytes);
  ASSERT_FALSE(s.is_ok()) << f.what << " " << what << ": decoded a damaged file";
  EXPECT_EQ(s.code(), StatusCode::kCorrupt) << f.what << " " << what << ": " << s.to_string();
  EXPECT_NE(s.message().find(f.name), std::string::npos)
      << f.what << " " << what << ": " << s.message();
}

// ---- formats -----------------------------------------------------------------------------

TEST(CheckpointFormat, RankFileRoundTripsEveryField) {
  const RankCheckpoint c = sample_rank();
  const std::string bytes = encode_rank_checkpoint(c);
  auto back = decode_rank_checkpoint(bytes, kRankName);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  expect_same(c, *back);
  EXPECT_EQ(encode_rank_checkpoint(*back), bytes);
}

TEST(CheckpointFormat, RankFileWithoutShardsOrWorkersRoundTrips) {
  RankCheckpoint c;
  auto back = decode_rank_checkpoint(encode_rank_checkpoint(c), kRankName);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  expect_same(c, *back);
}

TEST(CheckpointFormat, ManifestRoundTripsEveryField) {
  for (bool flags : {false, true}) {
    CheckpointManifest m = sample_manifest();
    m.job.shuffle = m.job.drop_last = m.topology.exact_order = m.epoch_complete = flags;
    if (flags) m.ranks.clear();
    const std::string bytes = encode_checkpoint_manifest(m);
    auto back = decode_checkpoint_manifest(bytes, kManifestName);
    ASSERT_TRUE(back.is_ok()) << back.status().to_string();
    expect_same(m, *back);
    EXPECT_EQ(encode_checkpoint_manifest(*back), bytes);
  }
}

TEST(CheckpointFormat, StartsWithItsOwnMagicAndTheFormatVersion) {
  const std::string rank = encode_rank_checkpoint(sample_rank());
  const std::string manifest = encode_checkpoint_manifest(sample_manifest());
  EXPECT_EQ(std::memcmp(rank.data(), "SYCKRNK\0", 8), 0);
  EXPECT_EQ(std::memcmp(manifest.data(), "SYCKPT\0\0", 8), 0);
  EXPECT_EQ(load_le(rank.data() + 8, 4), kCheckpointFormatVersion);
  EXPECT_EQ(load_le(manifest.data() + 8, 4), kCheckpointManifestFormatVersion);
}

TEST(CheckpointFormat, RejectsEverySingleByteChangeAnywhere) {
  size_t checked = 0;
  for (const auto& f : formats()) {
    for (size_t i = 0; i < f.bytes.size(); ++i) {
      for (int x = 1; x < 256; ++x) {
        std::string bad = f.bytes;
        bad[i] = static_cast<char>(bad[i] ^ x);
        expect_refused(f, bad, "byte " + std::to_string(i) + " xor " + std::to_string(x));
        if (HasFailure()) return;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 50000u);
}

TEST(CheckpointFormat, RejectsEveryTruncationAndTrailingBytes) {
  for (const auto& f : formats()) {
    for (size_t len = 0; len < f.bytes.size(); ++len) {
      expect_refused(f, std::string_view(f.bytes).substr(0, len),
                     "cut to " + std::to_string(len) + " bytes");
      if (HasFailure()) return;
    }
    expect_refused(f, f.bytes + '\0', "one byte appended");
    expect_message(f.decode(std::string_view(f.bytes).substr(0, f.bytes.size() - 1)), "truncated");
  }
}

TEST(CheckpointFormat, RejectsANewerVersionSayingSo) {
  for (const auto& f : formats()) {
    std::string bytes = f.bytes;
    const uint32_t v = kCheckpointFormatVersion + 1;
    for (int i = 0; i < 4; ++i) bytes[8 + i] = static_cast<char>((v >> (8 * i)) & 0xff);
    expect_refused(f, bytes, "newer version");
    expect_message(f.decode(bytes), "newer");
  }
}

TEST(CheckpointFormat, RejectsAForeignFileAsNotAShardyardFile) {
  const auto fs = formats();
  for (const auto& f : fs) {
    for (const std::string& bytes :
         {std::string("just some text, long enough to hold an envelope header"), std::string(),
          std::string("SYCK")}) {
      expect_refused(f, bytes, "foreign bytes");
      if (bytes.size() >= 8) expect_message(f.decode(bytes), "not a shardyard");
    }
  }
  // A rank file is not a manifest, and the other way round.
  expect_message(fs[1].decode(fs[0].bytes), "not a shardyard");
  expect_message(fs[0].decode(fs[1].bytes), "not a shardyard");
}

TEST(CheckpointFormat, RejectsImplausibleCountsWithAValidChecksum) {
  // A well-sealed body that claims 2^32-1 shards or workers must fail fast, not allocate.
  ByteWriter w;
  w.u64(1);  // generation
  w.u32(0);  // rank
  w.u64(2);  // fingerprint
  w.u32(0);  // epoch
  w.u64(0);  // step
  w.u64(0);  // layout_offset
  w.u64(0);  // layout_items
  ByteWriter shards = w;
  shards.u32(0xffffffffu);
  const char rank_magic[8] = {'S', 'Y', 'C', 'K', 'R', 'N', 'K', '\0'};
  auto r =
      decode_rank_checkpoint(seal(rank_magic, kCheckpointFormatVersion, shards.out), kRankName);
  expect_corrupt(r, kRankName, "shard count");
  ByteWriter workers = w;
  workers.u32(0);
  workers.u32(0xffffffffu);
  r = decode_rank_checkpoint(seal(rank_magic, kCheckpointFormatVersion, workers.out), kRankName);
  expect_corrupt(r, kRankName, "worker count");
}

TEST(CheckpointFormat, RejectsAManifestWithAnEmptyTopology) {
  for (int field = 0; field < 4; ++field) {
    CheckpointManifest m = sample_manifest();
    if (field == 0) m.topology.ranks = 0;
    if (field == 1) m.topology.workers = 0;
    if (field == 2) m.topology.batch_size = 0;
    if (field == 3) m.job.logical_shards = 0;
    expect_corrupt(decode_checkpoint_manifest(encode_checkpoint_manifest(m), kManifestName),
                   kManifestName, "empty topology field " + std::to_string(field));
  }
}

// ---- stage states ------------------------------------------------------------------------

TEST(StageStates, RoundTripEmptyBinaryAndLongStates) {
  const std::vector<std::vector<std::string>> cases = {
      {},
      {""},
      {"", "", ""},
      {std::string("\0\0\0\0", 4), std::string(1, '\xff')},
      {std::string(100000, 'x'), "rng:12345", ""},
  };
  for (const auto& states : cases) {
    auto back = decode_stage_states(encode_stage_states(states));
    ASSERT_TRUE(back.is_ok()) << back.status().to_string();
    EXPECT_EQ(*back, states);
  }
}

TEST(StageStates, RejectsTruncationAndTrailingBytes) {
  const std::string bytes = encode_stage_states({"abc", std::string("\0x", 2), ""});
  for (size_t len = 0; len < bytes.size(); ++len) {
    auto r = decode_stage_states(std::string_view(bytes).substr(0, len));
    ASSERT_FALSE(r.is_ok()) << "cut to " << len;
    EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
  }
  auto r = decode_stage_states(bytes + "z");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
  r = decode_stage_states(std::string("\xff\xff\xff\xff", 4));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
}

// ---- a consistent cut --------------------------------------------------------------------

// A cut of 2 ranks, 2 workers each, over 5 logical shards.
struct Cut {
  CheckpointManifest manifest;
  std::vector<RankCheckpoint> ranks;
  std::vector<std::string> files;  // encoded rank files, by rank
};

Cut sample_cut() {
  Cut c;
  c.manifest = sample_manifest();
  c.manifest.job.logical_shards = 5;
  c.manifest.topology.ranks = 2;
  c.manifest.topology.workers = 2;
  c.manifest.topology.batch_size = 4;
  c.manifest.epoch_complete = false;
  c.manifest.step = 3;
  c.manifest.steps = 10;
  c.manifest.layout_step0 = 0;
  RankCheckpoint r0;
  r0.generation = c.manifest.generation;
  r0.rank = 0;
  r0.fingerprint = c.manifest.job.fingerprint;
  r0.epoch = c.manifest.epoch;
  r0.step = c.manifest.step;
  r0.shards = {{4, 8, 4}, {1, 8, 4}, {2, 8, 4}};
  r0.layout_offset = 0;
  r0.layout_items = 24;
  r0.worker_states = {"w0", ""};
  RankCheckpoint r1 = r0;
  r1.rank = 1;
  r1.shards = {{3, 7, 6}, {0, 9, 6}};
  r1.layout_offset = 2;
  r1.layout_items = 14;
  r1.worker_states = {std::string("\0w2", 3), "w3"};
  c.ranks = {r0, r1};
  c.manifest.ranks.clear();
  for (const auto& r : c.ranks) {
    c.files.push_back(encode_rank_checkpoint(r));
    c.manifest.ranks.push_back({r.rank, "rank-0000" + std::to_string(r.rank) + ".g000003.ckpt",
                                c.files.back().size(), file_checksum(c.files.back())});
  }
  return c;
}

TEST(CheckpointAssemble, AcceptsAConsistentCut) {
  Cut c = sample_cut();
  auto ck = Checkpoint::assemble(c.manifest, c.ranks);
  ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
  ASSERT_EQ(ck->ranks.size(), 2u);
  expect_same(ck->ranks[1], c.ranks[1]);
}

TEST(CheckpointAssemble, CursorIsIndexedByLogicalShard) {
  Cut c = sample_cut();
  auto ck = Checkpoint::assemble(c.manifest, c.ranks);
  ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
  const EpochCursor cur = ck->cursor();
  EXPECT_EQ(cur.epoch, c.manifest.epoch);
  EXPECT_EQ(cur.step, 3u);
  EXPECT_EQ(cur.take, (std::vector<uint64_t>{9, 8, 8, 7, 8}));
  EXPECT_EQ(cur.consumed, (std::vector<uint64_t>{6, 4, 4, 6, 4}));
  EXPECT_EQ(cur.ranks, 2u);
  EXPECT_EQ(cur.batch_size, 4u);
  EXPECT_EQ(cur.steps, 10u);
  EXPECT_EQ(cur.layout_step0, 0u);
  EXPECT_EQ(cur.layout_offset, (std::vector<uint64_t>{0, 2}));
  EXPECT_EQ(cur.layout_items, (std::vector<uint64_t>{24, 14}));
  EXPECT_FALSE(cur.complete());
  EXPECT_EQ(ck->worker_states(),
            (std::vector<std::string>{"w0", "", std::string("\0w2", 3), "w3"}));
  EXPECT_EQ(ck->resume_epoch(), c.manifest.epoch);
  ck->manifest.epoch_complete = true;
  EXPECT_EQ(ck->resume_epoch(), c.manifest.epoch + 1);
}

void expect_assemble_refused(const Cut& c, const std::string& part, const std::string& what) {
  auto ck = Checkpoint::assemble(c.manifest, c.ranks);
  ASSERT_FALSE(ck.is_ok()) << what;
  EXPECT_EQ(ck.status().code(), StatusCode::kCorrupt) << what;
  expect_message(ck.status(), part);
}

TEST(CheckpointAssemble, RefusesAMissingLogicalShard) {
  Cut c = sample_cut();
  c.ranks[1].shards.pop_back();  // shard 0
  expect_assemble_refused(c, "logical shard 0", "missing shard");
}

TEST(CheckpointAssemble, RefusesAShardListedTwice) {
  Cut c = sample_cut();
  c.ranks[1].shards.push_back({2, 8, 4});  // also on rank 0
  expect_assemble_refused(c, "logical shard 2", "shard on two ranks");
  c = sample_cut();
  c.ranks[0].shards.push_back(c.ranks[0].shards[0]);
  expect_assemble_refused(c, "logical shard 4", "shard twice on one rank");
}

TEST(CheckpointAssemble, RefusesAShardOutOfRange) {
  Cut c = sample_cut();
  c.ranks[0].shards[0].shard = 5;
  expect_assemble_refused(c, "logical shard 5", "shard out of range");
}

TEST(CheckpointAssemble, RefusesConsumedPastTake) {
  Cut c = sample_cut();
  c.ranks[1].shards[0].consumed = c.ranks[1].shards[0].take + 1;
  expect_assemble_refused(c, "consumed past its take", "consumed > take");
  c = sample_cut();
  c.ranks[1].shards[0].consumed = c.ranks[1].shards[0].take;  // equal is fine
  EXPECT_TRUE(Checkpoint::assemble(c.manifest, c.ranks).is_ok());
}

TEST(CheckpointAssemble, RefusesRankFilesOfAnotherGenerationOrCut) {
  Cut c = sample_cut();
  c.ranks[1].generation = 2;
  expect_assemble_refused(c, "generation", "older generation");
  c = sample_cut();
  c.ranks[0].step = c.manifest.step + 1;
  expect_assemble_refused(c, "another cut", "another step");
  c = sample_cut();
  c.ranks[0].epoch = c.manifest.epoch - 1;
  expect_assemble_refused(c, "another cut", "another epoch");
  c = sample_cut();
  c.ranks[1].fingerprint ^= 1;
  expect_assemble_refused(c, "another cut", "another dataset");
}

TEST(CheckpointAssemble, RefusesRankFilesInTheWrongPlaceOrCount) {
  Cut c = sample_cut();
  std::swap(c.ranks[0], c.ranks[1]);
  expect_assemble_refused(c, "rank", "ranks swapped");
  c = sample_cut();
  c.ranks.pop_back();
  expect_assemble_refused(c, "rank files", "one rank file missing");
  c = sample_cut();
  c.ranks[0].worker_states.push_back("extra");
  expect_assemble_refused(c, "workers", "state of 3 workers for 2");
}

// ---- decode_checkpoint -------------------------------------------------------------------

TEST(DecodeCheckpoint, DecodesACutFromItsFiles) {
  Cut c = sample_cut();
  auto ck = decode_checkpoint(encode_checkpoint_manifest(c.manifest), c.files, kDir);
  ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
  expect_same(ck->manifest, c.manifest);
  ASSERT_EQ(ck->ranks.size(), 2u);
  expect_same(ck->ranks[0], c.ranks[0]);
  expect_same(ck->ranks[1], c.ranks[1]);
}

TEST(DecodeCheckpoint, RejectsAModifiedRankFileAsAChecksumMismatch) {
  const Cut c = sample_cut();
  const std::string manifest = encode_checkpoint_manifest(c.manifest);
  for (uint32_t r = 0; r < 2; ++r) {
    for (size_t i = 0; i < c.files[r].size(); ++i) {
      auto files = c.files;
      files[r][i] = static_cast<char>(files[r][i] ^ 0x20);
      auto ck = decode_checkpoint(manifest, files, kDir);
      ASSERT_FALSE(ck.is_ok()) << "rank " << r << " byte " << i;
      EXPECT_EQ(ck.status().code(), StatusCode::kCorrupt);
      expect_message(ck.status(), "checksum mismatch");
      expect_message(ck.status(), c.manifest.ranks[r].name);
    }
  }
}

TEST(DecodeCheckpoint, RejectsAShorterOrLongerRankFile) {
  const Cut c = sample_cut();
  const std::string manifest = encode_checkpoint_manifest(c.manifest);
  for (size_t len = 0; len < c.files[1].size(); ++len) {
    auto files = c.files;
    files[1].resize(len);
    auto ck = decode_checkpoint(manifest, files, kDir);
    ASSERT_FALSE(ck.is_ok()) << "cut to " << len;
    EXPECT_EQ(ck.status().code(), StatusCode::kCorrupt);
    expect_message(ck.status(), "truncated");
  }
  auto files = c.files;
  files[0] += "x";
  auto ck = decode_checkpoint(manifest, files, kDir);
  ASSERT_FALSE(ck.is_ok());
  EXPECT_EQ(ck.status().code(), StatusCode::kCorrupt);
}

TEST(DecodeCheckpoint, RejectsRankFilesSwappedOrMissing) {
  const Cut c = sample_cut();
  const std::string manifest = encode_checkpoint_manifest(c.manifest);
  auto swapped = c.files;
  std::swap(swapped[0], swapped[1]);
  auto ck = decode_checkpoint(manifest, swapped, kDir);
  ASSERT_FALSE(ck.is_ok());
  EXPECT_EQ(ck.status().code(), StatusCode::kCorrupt);
  auto fewer = c.files;
  fewer.pop_back();
  ck = decode_checkpoint(manifest, fewer, kDir);
  ASSERT_FALSE(ck.is_ok());
  EXPECT_EQ(ck.status().code(), StatusCode::kCorrupt);
}

TEST(DecodeCheckpoint, RejectsAManifestNamingARankOutOfRange) {
  Cut c = sample_cut();
  c.manifest.ranks[1].rank = 2;
  auto ck = decode_checkpoint(encode_checkpoint_manifest(c.manifest), c.files, kDir);
  ASSERT_FALSE(ck.is_ok());
  EXPECT_EQ(ck.status().code(), StatusCode::kCorrupt);
  expect_message(ck.status(), "rank 2");
}

TEST(DecodeCheckpoint, RejectsARankFileOfAnotherGenerationWithAValidChecksum) {
  // A stale rank file whose size and checksum CHECKPOINT records (e.g. a mix-up while
  // copying) is still refused: its generation is not CHECKPOINT's.
  Cut c = sample_cut();
  c.ranks[0].generation = 2;
  c.files[0] = encode_rank_checkpoint(c.ranks[0]);
  c.manifest.ranks[0].size = c.files[0].size();
  c.manifest.ranks[0].checksum = file_checksum(c.files[0]);
  auto ck = decode_checkpoint(encode_checkpoint_manifest(c.manifest), c.files, kDir);
  ASSERT_FALSE(ck.is_ok());
  EXPECT_EQ(ck.status().code(), StatusCode::kCorrupt);
  expect_message(ck.status(), "generation");
}

TEST(DecodeCheckpoint, CursorResumesTheEpochItWasCutFrom) {
  // A cut of a real plan, through the files and back, is accepted by plan_epoch.
  const Manifest m = testing::make_manifest({30, 47, 23});
  const ItemIndex index(m);
  const LogicalShards shards(100, 10);
  PlanSpec spec;
  spec.logical_shards = 10;
  spec.chunk_items = 4;
  spec.seed = 9;
  spec.shuffle = true;
  auto plan = plan_epoch(m, index, shards, spec, Topology{3, 2}, 5, 2);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  const uint64_t step = 3;
  CheckpointManifest cm;
  cm.generation = 1;
  cm.job.fingerprint = m.fingerprint;
  cm.job.num_items = 100;
  cm.job.logical_shards = 10;
  cm.job.chunk_items = 4;
  cm.topology = {3, 2, 5, true};
  cm.epoch = 2;
  cm.step = step;
  cm.steps = plan->steps;
  std::vector<std::string> files;
  for (uint32_t r = 0; r < 3; ++r) {
    const RankPlan& rp = plan->ranks[r];
    RankCheckpoint rc;
    rc.generation = 1;
    rc.rank = r;
    rc.fingerprint = m.fingerprint;
    rc.epoch = 2;
    rc.step = step;
    rc.layout_offset = rp.layout_offset;
    rc.layout_items = rp.layout_items;
    rc.worker_states = {"", ""};
    const auto counts = interleave_counts(rp.take, plan->batch_begin(r, step));
    for (size_t k = 0; k < rp.shards.size(); ++k)
      rc.shards.push_back({rp.shards[k], rp.take[k], counts[k]});
    files.push_back(encode_rank_checkpoint(rc));
    cm.ranks.push_back(
        {r, "r" + std::to_string(r), files.back().size(), file_checksum(files.back())});
  }
  auto ck = decode_checkpoint(encode_checkpoint_manifest(cm), files, kDir);
  ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
  const EpochCursor cursor = ck->cursor();
  for (const Topology& t : {Topology{3, 1}, Topology{2, 4}, Topology{5, 1}}) {
    auto resumed = plan_epoch(m, index, shards, spec, t, 5, ck->resume_epoch(), &cursor);
    ASSERT_TRUE(resumed.is_ok()) << resumed.status().to_string();
    EXPECT_EQ(resumed->first_step, step);
    uint64_t left = 0;
    for (const auto& rp : resumed->ranks) left += rp.items - rp.start;
    EXPECT_EQ(left, 100 - 3 * 5 * step) << "R=" << t.ranks;
  }
}

// ---- check_same_job ----------------------------------------------------------------------

CheckpointJob sample_job() {
  CheckpointJob j;
  j.fingerprint = 42;
  j.num_items = 1000;
  j.logical_shards = 64;
  j.chunk_items = 16;
  j.seed = 7;
  j.shuffle = true;
  j.drop_last = false;
  j.distributed_strategy = "strided";
  j.worker_strategy = "contiguous";
  return j;
}

TEST(CheckSameJob, AcceptsTheSameJob) {
  EXPECT_TRUE(check_same_job(sample_job(), sample_job()).is_ok());
}

TEST(CheckSameJob, RejectsCheckpointOfOtherDataset) {
  for (int field = 0; field < 2; ++field) {
    CheckpointJob now = sample_job();
    if (field == 0) now.fingerprint = 43;
    if (field == 1) now.num_items = 1001;
    const Status s = check_same_job(sample_job(), now);
    ASSERT_FALSE(s.is_ok());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    expect_message(s, "another dataset");
  }
}

TEST(CheckSameJob, RejectsEachOtherDifferenceNamingIt) {
  const std::vector<std::pair<std::string, std::function<void(CheckpointJob*)>>> cases = {
      {"logical shards", [](CheckpointJob* j) { j->logical_shards = 65; }},
      {"chunk items", [](CheckpointJob* j) { j->chunk_items = 8; }},
      {"seed", [](CheckpointJob* j) { j->seed = 8; }},
      {"shuffle", [](CheckpointJob* j) { j->shuffle = false; }},
      {"drop_last", [](CheckpointJob* j) { j->drop_last = true; }},
      {"distributed strategy", [](CheckpointJob* j) { j->distributed_strategy = "contiguous"; }},
      {"worker strategy", [](CheckpointJob* j) { j->worker_strategy = "strided"; }},
  };
  for (const auto& [name, change] : cases) {
    CheckpointJob now = sample_job();
    change(&now);
    const Status s = check_same_job(sample_job(), now);
    ASSERT_FALSE(s.is_ok()) << name;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << name;
    expect_message(s, name);
    expect_message(s, "another job");
  }
}

}  // namespace
}  // namespace shardyard

namespace shardyard {
namespace {

// Rank files of version 1 (before the dispatcher's and the loader's state) still load, and
// version 2 keeps both states.
TEST(CheckpointFormat, ReadsVersionOneRankFilesAndKeepsDispatcherAndLoaderState) {
  RankCheckpoint c;
  c.generation = 3;
  c.rank = 1;
  c.fingerprint = 9;
  c.shards = {{4, 10, 2}};
  c.worker_states = {"w0", ""};
  c.dispatcher_state = "dispatch";
  c.loader_state = "post";
  const std::string v2 = encode_rank_checkpoint(c);
  auto back = decode_rank_checkpoint(v2, "rank-1");
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->dispatcher_state, "dispatch");
  EXPECT_EQ(back->loader_state, "post");

  c.dispatcher_state.clear();
  c.loader_state.clear();
  const std::string v2_empty = encode_rank_checkpoint(c);
  // The same body without its two (empty) trailing strings, sealed as version 1.
  const size_t header = kEnvelopeHeaderBytes, tail = 8;  // the checksum
  std::string body = v2_empty.substr(header, v2_empty.size() - header - tail - 8);
  const char rank_magic[8] = {'S', 'Y', 'C', 'K', 'R', 'N', 'K', '\0'};
  auto v1 = decode_rank_checkpoint(seal(rank_magic, 1, body), "rank-1");
  ASSERT_TRUE(v1.is_ok()) << v1.status().to_string();
  EXPECT_EQ(v1->worker_states, c.worker_states);
  EXPECT_EQ(v1->shards.size(), 1u);
  EXPECT_TRUE(v1->dispatcher_state.empty());
}

}  // namespace
}  // namespace shardyard
