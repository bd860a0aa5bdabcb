// Tests of io/persist/checkpoint_store.h on the local file system (and, to show that every byte
// goes through the FileSystem given, in memory and under injected faults): atomic writes that leave
// no temporary, generation numbering that never reuses the files of an interrupted save, commits
// that clean up only what no longer belongs to the checkpoint, and loads that either return the
// committed cut intact or say clearly what is missing or damaged. Every test works in its own fresh
// directory.
#include "io/persist/checkpoint_store.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "io/fs/file_system.h"
#include "io/fs/test_file_systems.h"

namespace shardyard::io {
namespace {

namespace fs = std::filesystem;

class CheckpointStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "/sy_ckpt_store_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr) << pattern;
    base_ = pattern;
    dir_ = base_ + "/ckpt";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(base_, ec);
  }

  std::set<std::string> list(const std::string& dir) const {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
    return out;
  }
  void put(const std::string& name, const std::string& bytes) const {
    fs::create_directories(dir_);
    std::ofstream(dir_ + "/" + name, std::ios::binary) << bytes;
  }
  std::string get(const std::string& name) const {
    auto bytes = read_file(local_file_system(), dir_ + "/" + name);
    EXPECT_TRUE(bytes.is_ok()) << bytes.status().to_string();
    return bytes.is_ok() ? *bytes : std::string();
  }

  std::string base_;  // fresh for every test, removed after it
  std::string dir_;   // the checkpoint directory: base_/ckpt, not created yet
};

// The rank files of a 2-rank cut over 4 logical shards, at `generation` and `step`.
std::vector<RankCheckpoint> rank_files(uint64_t generation, uint64_t step) {
  RankCheckpoint r0;
  r0.generation = generation;
  r0.rank = 0;
  r0.fingerprint = 77;
  r0.epoch = 2;
  r0.step = step;
  r0.shards = {{0, 10, step}, {2, 10, step}};
  r0.layout_items = 20;
  r0.worker_states = {"state-a", ""};
  RankCheckpoint r1 = r0;
  r1.rank = 1;
  r1.shards = {{3, 10, step}, {1, 9, std::min<uint64_t>(step, 9)}};
  r1.layout_items = 19;
  r1.worker_states = {"", std::string("\0b", 2)};
  return {r0, r1};
}

CheckpointManifest manifest_for(uint64_t generation, uint64_t step) {
  CheckpointManifest m;
  m.generation = generation;
  m.created_unix_ms = 1700000000000;
  m.job.fingerprint = 77;
  m.job.num_items = 39;
  m.job.logical_shards = 4;
  m.job.chunk_items = 2;
  m.job.seed = 5;
  m.job.distributed_strategy = "strided";
  m.job.worker_strategy = "strided";
  m.topology = {2, 2, 1, true};
  m.epoch = 2;
  m.step = step;
  m.steps = 20;
  return m;
}

// Writes the rank files of `generation` (and with `commit`, CHECKPOINT naming them).
CheckpointManifest save(const std::string& dir, uint64_t generation, uint64_t step,
                        bool commit = true, FileSystem& fs = local_file_system()) {
  CheckpointManifest m = manifest_for(generation, step);
  for (const auto& r : rank_files(generation, step)) {
    const std::string bytes = encode_rank_checkpoint(r);
    const std::string name = rank_file_name(r.rank, generation);
    EXPECT_TRUE(write_checkpoint_file(fs, dir, name, bytes).is_ok());
    m.ranks.push_back({r.rank, name, bytes.size(), file_checksum(bytes)});
  }
  if (commit) {
    EXPECT_TRUE(commit_checkpoint(fs, dir, m).is_ok());
  }
  return m;
}

void expect_cut(const Result<Checkpoint>& ck, uint64_t generation, uint64_t step) {
  ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
  EXPECT_EQ(ck->manifest.generation, generation);
  EXPECT_EQ(ck->manifest.step, step);
  ASSERT_EQ(ck->ranks.size(), 2u);
  const EpochCursor c = ck->cursor();
  EXPECT_EQ(c.epoch, 2u);
  EXPECT_EQ(c.step, step);
  EXPECT_EQ(c.take, (std::vector<uint64_t>{10, 9, 10, 10}));
  EXPECT_EQ(c.consumed, (std::vector<uint64_t>{step, std::min<uint64_t>(step, 9), step, step}));
  EXPECT_EQ(c.layout_items, (std::vector<uint64_t>{20, 19}));
  EXPECT_EQ(ck->worker_states(),
            (std::vector<std::string>{"state-a", "", "", std::string("\0b", 2)}));
}

TEST(RankFileName, NamesRankAndGeneration) {
  EXPECT_EQ(rank_file_name(3, 7), "rank-00003.g000007.ckpt");
  EXPECT_EQ(rank_file_name(0, 1234567), "rank-00000.g1234567.ckpt");
}

TEST_F(CheckpointStoreTest, WriteCreatesTheDirectoryAndLeavesNoTemporary) {
  ASSERT_FALSE(fs::exists(dir_));
  const std::string bytes("first\0version", 13);
  ASSERT_TRUE(write_checkpoint_file(local_file_system(), dir_, "a.ckpt", bytes).is_ok());
  EXPECT_EQ(list(dir_), (std::set<std::string>{"a.ckpt"}));
  EXPECT_EQ(get("a.ckpt"), bytes);
  ASSERT_TRUE(write_checkpoint_file(local_file_system(), dir_, "a.ckpt", "second").is_ok());
  EXPECT_EQ(list(dir_), (std::set<std::string>{"a.ckpt"}));
  EXPECT_EQ(get("a.ckpt"), "second");
}

TEST_F(CheckpointStoreTest, WriteReportsADirectoryItCannotCreate) {
  const Status s =
      write_checkpoint_file(local_file_system(), base_ + "/no/such/parent", "a.ckpt", "x");
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find(base_ + "/no/such/parent"), std::string::npos) << s.message();
}

TEST_F(CheckpointStoreTest, NextGenerationIsOneForAMissingOrEmptyDirectory) {
  auto g = next_generation(local_file_system(), dir_);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(*g, 1u);
  fs::create_directories(dir_);
  g = next_generation(local_file_system(), dir_);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(*g, 1u);
}

TEST_F(CheckpointStoreTest, NextGenerationFollowsTheCommittedOne) {
  save(dir_, 1, 3);
  EXPECT_EQ(next_generation(local_file_system(), dir_).value(), 2u);
  save(dir_, 4, 5);
  EXPECT_EQ(next_generation(local_file_system(), dir_).value(), 5u);
}

TEST_F(CheckpointStoreTest, NextGenerationSkipsTheFilesOfAnInterruptedSave) {
  save(dir_, 1, 3);
  put("rank-00000.g000009.ckpt", "left by a save that crashed before its commit");
  auto g = next_generation(local_file_system(), dir_);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_GT(*g, 9u);
  // Also without any CHECKPOINT.
  fs::remove(dir_ + "/" + kCheckpointManifestName);
  EXPECT_GT(next_generation(local_file_system(), dir_).value(), 9u);
}

TEST_F(CheckpointStoreTest, CommitRemovesOtherGenerationsAndStaleTemporaries) {
  save(dir_, 1, 3);
  save(dir_, 2, 4, /*commit=*/false);
  put("rank-00001.g000009.ckpt", "stray");
  put("rank-00000.g000002.ckpt.tmp.4242.0", "half written");
  put(std::string(kCheckpointManifestName) + ".tmp.4242.1", "half written");
  put("README.txt", "not ours");
  const CheckpointManifest m = manifest_for(2, 4);
  CheckpointManifest named = m;
  for (uint32_t r = 0; r < 2; ++r) {
    const std::string name = rank_file_name(r, 2);
    const std::string bytes = get(name);
    named.ranks.push_back({r, name, bytes.size(), file_checksum(bytes)});
  }
  ASSERT_TRUE(commit_checkpoint(local_file_system(), dir_, named).is_ok());
  EXPECT_EQ(list(dir_), (std::set<std::string>{kCheckpointManifestName, "rank-00000.g000002.ckpt",
                                               "rank-00001.g000002.ckpt", "README.txt"}));
  expect_cut(load_checkpoint(local_file_system(), dir_), 2, 4);
}

// What an aborted save (a rank could not write) or a killed one left: the next save removes
// it below its own generation; the committed checkpoint stays whole.
TEST_F(CheckpointStoreTest, RemoveUncommittedCleansAbortedSavesAndKeepsTheCommittedCut) {
  save(dir_, 3, 4);
  save(dir_, 4, 5, /*commit=*/false);  // aborted: rank files that no CHECKPOINT names
  put("rank-00001.g000004.ckpt.tmp.4242.0", "half written");
  put("rank-00000.g000003.ckpt.tmp.4242.1", "half written");
  put(std::string(kCheckpointManifestName) + ".tmp.4242.2", "half written");
  put("rank-00000.g000006.ckpt.tmp.4242.3", "being written by the save of generation 6");
  put("README.txt", "not ours");
  remove_uncommitted(local_file_system(), dir_, 6);  // the save of generation 6 starts
  EXPECT_EQ(list(dir_),
            (std::set<std::string>{kCheckpointManifestName, "rank-00000.g000003.ckpt",
                                   "rank-00001.g000003.ckpt", "rank-00000.g000006.ckpt.tmp.4242.3",
                                   "README.txt"}));
  expect_cut(load_checkpoint(local_file_system(), dir_), 3, 4);
  remove_uncommitted(local_file_system(), dir_, UINT64_MAX);
  EXPECT_EQ(list(dir_), (std::set<std::string>{kCheckpointManifestName, "rank-00000.g000003.ckpt",
                                               "rank-00001.g000003.ckpt", "README.txt"}));
  expect_cut(load_checkpoint(local_file_system(), dir_), 3, 4);
}

TEST_F(CheckpointStoreTest, RemoveUncommittedLeavesADirectoryItCannotJudge) {
  save(dir_, 2, 4);
  save(dir_, 3, 5, /*commit=*/false);
  put(kCheckpointManifestName, "not a checkpoint manifest (or one of a newer format)");
  const auto before = list(dir_);
  remove_uncommitted(local_file_system(), dir_, UINT64_MAX);
  EXPECT_EQ(list(dir_), before);
  remove_uncommitted(local_file_system(), dir_ + "/missing", UINT64_MAX);  // no directory: nothing to do
}

TEST_F(CheckpointStoreTest, LoadRoundTripsACommittedCut) {
  const CheckpointManifest m = save(dir_, 1, 6);
  auto ck = load_checkpoint(local_file_system(), dir_);
  expect_cut(ck, 1, 6);
  if (HasFailure()) return;
  EXPECT_EQ(encode_checkpoint_manifest(ck->manifest), encode_checkpoint_manifest(m));
  for (const auto& r : rank_files(1, 6))
    EXPECT_EQ(encode_rank_checkpoint(ck->ranks[r.rank]), encode_rank_checkpoint(r));
  auto files = read_checkpoint_files(local_file_system(), dir_);
  ASSERT_TRUE(files.is_ok()) << files.status().to_string();
  EXPECT_EQ(files->manifest, get(kCheckpointManifestName));
  ASSERT_EQ(files->rank_files.size(), 2u);
  EXPECT_EQ(files->rank_files[1], get(rank_file_name(1, 1)));
}

TEST_F(CheckpointStoreTest, LoadSaysThereIsNoCheckpoint) {
  for (bool create : {false, true}) {
    if (create) fs::create_directories(dir_);
    auto ck = load_checkpoint(local_file_system(), dir_);
    ASSERT_FALSE(ck.is_ok());
    EXPECT_EQ(ck.status().code(), StatusCode::kNotFound);
    EXPECT_NE(ck.status().message().find("no checkpoint"), std::string::npos)
        << ck.status().message();
  }
  // Rank files alone are not a checkpoint.
  save(dir_, 1, 2, /*commit=*/false);
  auto ck = load_checkpoint(local_file_system(), dir_);
  ASSERT_FALSE(ck.is_ok());
  EXPECT_EQ(ck.status().code(), StatusCode::kNotFound);
}

TEST_F(CheckpointStoreTest, LoadNamesAMissingRankFile) {
  save(dir_, 1, 2);
  fs::remove(dir_ + "/" + rank_file_name(1, 1));
  auto ck = load_checkpoint(local_file_system(), dir_);
  ASSERT_FALSE(ck.is_ok());
  EXPECT_EQ(ck.status().code(), StatusCode::kNotFound);
  EXPECT_NE(ck.status().message().find("rank 1"), std::string::npos) << ck.status().message();
  EXPECT_NE(ck.status().message().find(rank_file_name(1, 1)), std::string::npos)
      << ck.status().message();
}

TEST_F(CheckpointStoreTest, LoadRefusesADamagedOrTruncatedFile) {
  save(dir_, 1, 2);
  const std::string rank1 = rank_file_name(1, 1);
  const std::string good = get(rank1);
  const std::string manifest = get(kCheckpointManifestName);
  for (size_t i = 0; i < good.size(); i += 7) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x04);
    put(rank1, bad);
    auto ck = load_checkpoint(local_file_system(), dir_);
    ASSERT_FALSE(ck.is_ok()) << "byte " << i;
    EXPECT_EQ(ck.status().code(), StatusCode::kCorrupt) << ck.status().to_string();
    EXPECT_NE(ck.status().message().find(rank1), std::string::npos) << ck.status().message();
  }
  put(rank1, good.substr(0, good.size() / 2));
  auto ck = load_checkpoint(local_file_system(), dir_);
  ASSERT_FALSE(ck.is_ok());
  EXPECT_EQ(ck.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(ck.status().message().find("truncated"), std::string::npos) << ck.status().message();
  put(rank1, good);
  put(kCheckpointManifestName, manifest.substr(0, manifest.size() - 1));
  ck = load_checkpoint(local_file_system(), dir_);
  ASSERT_FALSE(ck.is_ok());
  EXPECT_EQ(ck.status().code(), StatusCode::kCorrupt);
  put(kCheckpointManifestName, manifest);
  expect_cut(load_checkpoint(local_file_system(), dir_), 1, 2);
}

TEST_F(CheckpointStoreTest, CrashDuringASaveKeepsThePreviousCheckpoint) {
  save(dir_, 1, 3);
  // The next save wrote its rank files (and a half-written CHECKPOINT temporary) and died
  // before renaming CHECKPOINT.
  save(dir_, 2, 8, /*commit=*/false);
  put(std::string(kCheckpointManifestName) + ".tmp.999.0", "CHECKPOINT of generation 2, cut sh");
  expect_cut(load_checkpoint(local_file_system(), dir_), 1, 3);
  // The retry takes a generation that the interrupted save did not use.
  auto g = next_generation(local_file_system(), dir_);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(*g, 3u);
  save(dir_, *g, 9);
  expect_cut(load_checkpoint(local_file_system(), dir_), 3, 9);
  EXPECT_EQ(list(dir_), (std::set<std::string>{kCheckpointManifestName, rank_file_name(0, 3),
                                               rank_file_name(1, 3)}));
}

TEST(CheckpointStoreMemoryTest, SavesAndLoadsThroughTheFileSystemGiven) {
  testing::MemoryFileSystem mem;
  const std::string dir = "/ckpt";
  EXPECT_EQ(next_generation(mem, dir).value(), 1u);
  save(dir, 1, 3, true, mem);
  save(dir, 2, 5, true, mem);
  expect_cut(load_checkpoint(mem, dir), 2, 5);
  EXPECT_EQ(next_generation(mem, dir).value(), 3u);
  // Generation 1 went with the commit of generation 2: CHECKPOINT and two rank files.
  EXPECT_EQ(mem.files(), 3u);
  EXPECT_FALSE(fs::exists(dir));
}

TEST_F(CheckpointStoreTest, ACommitThatFailsLeavesThePreviousCheckpoint) {
  save(dir_, 1, 3);
  testing::FaultFileSystem faulty(&local_file_system());
  CheckpointManifest m = manifest_for(2, 5);
  for (const auto& r : rank_files(2, 5)) {
    const std::string bytes = encode_rank_checkpoint(r);
    ASSERT_TRUE(
        write_checkpoint_file(local_file_system(), dir_, rank_file_name(r.rank, 2), bytes).is_ok());
    m.ranks.push_back({r.rank, rank_file_name(r.rank, 2), bytes.size(), file_checksum(bytes)});
  }
  faulty.fail_next(testing::FsOp::kRename, 1);
  const Status st = commit_checkpoint(faulty, dir_, m);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("injected fault"), std::string::npos) << st.message();
  expect_cut(load_checkpoint(local_file_system(), dir_), 1, 3);
  // The interrupted generation never counts again.
  EXPECT_EQ(next_generation(local_file_system(), dir_).value(), 3u);
}

}  // namespace
}  // namespace shardyard::io
