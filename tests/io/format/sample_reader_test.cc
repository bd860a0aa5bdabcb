// Tests of io/format/sample_reader.h: reading runs of samples back from every fixture format and
// from directories, and detecting shards that changed after their manifest was built.
#include "io/format/sample_reader.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "io/format/manifest_scan.h"
#include "tar_fixtures.h"

namespace shardyard::io {
namespace {

using test::ExpectedSample;
using test::Fixtures;
using test::TempDir;

// Read paths of a tar range: always read into a buffer, always memory-map, leave every
// member unread (the walk of headers), leave members of at least 100 bytes unread (small
// ones read beside them).
struct ReadPath {
  size_t map_threshold;
  uint64_t unread_bytes;
};
const ReadPath kReadPaths[] = {{SIZE_MAX, 0}, {0, 0}, {SIZE_MAX, 1}, {SIZE_MAX, 100}};

std::unique_ptr<SampleReader> make_reader(std::shared_ptr<const Manifest> manifest,
                                          const ReadPath& path) {
  auto reader =
      std::make_unique<SampleReader>(local_file_system(), std::move(manifest), BufferPool::create(),
                                     SampleReaderOptions{64, path.map_threshold});
  reader->set_unread_field_bytes(path.unread_bytes);
  return reader;
}

// A field's bytes: its view, or for an unread field what its item's reader reads.
std::string bytes_of(const Item& item, const Field& f) {
  if (!f.unread()) return std::string(f.view());
  const FileReader* reader = unread_reader(item);
  EXPECT_NE(reader, nullptr) << item.key << "." << f.name;
  if (reader == nullptr) return {};
  std::string out(f.size, '\0');
  Status st = reader->read(f.file_offset, reinterpret_cast<uint8_t*>(out.data()), out.size());
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  return out;
}

std::shared_ptr<const Manifest> manifest_of(const std::vector<std::string>& paths) {
  auto m = build_manifest(local_file_system(), paths, ScanOptions{}, nullptr);
  EXPECT_TRUE(m.is_ok()) << m.status().to_string();
  return std::make_shared<const Manifest>(m.is_ok() ? *m : Manifest{});
}

// The item holds exactly the sample's members: field names sorted, bytes as written.
void expect_item(const Item& item, const ExpectedSample& want, uint64_t id) {
  EXPECT_EQ(item.key, want.key);
  EXPECT_EQ(item.id, id);
  std::map<std::string, std::string> expected;
  for (const auto& m : want.members) expected[m.field] = test::payload(m.path, m.size);
  ASSERT_EQ(item.fields.size(), expected.size()) << want.key;
  size_t i = 0;
  for (const auto& [field, bytes] : expected) {
    EXPECT_EQ(item.fields[i].name, field) << want.key;
    EXPECT_EQ(bytes_of(item, item.fields[i]), bytes) << want.key << "." << field;
    ++i;
  }
  EXPECT_EQ(item.payload_bytes(), want.payload_bytes);
}

TEST(SampleReader, ReadsBackExactlyTheBytesWrittenInOneRun) {
  const auto& fx = Fixtures::get();
  for (const auto& name : Fixtures::good_archives()) {
    SCOPED_TRACE(name);
    auto manifest = manifest_of({fx.path(name)});
    const auto want = fx.samples(name);
    ASSERT_EQ(manifest->sources[0].samples.size(), want.size());
    for (const ReadPath& path : kReadPaths) {
      auto made = make_reader(manifest, path);
      SampleReader& reader = *made;
      std::vector<Item> items;
      Status st = reader.read(0, 0, want.size(), 1000, &items);
      ASSERT_TRUE(st.is_ok()) << st.to_string();
      ASSERT_EQ(items.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) expect_item(items[i], want[i], 1000 + i);
      EXPECT_GE(reader.bytes_read(), manifest->payload_bytes());
    }
  }
}

TEST(SampleReader, ReadsAnyRunInAnyOrder) {
  const auto& fx = Fixtures::get();
  for (const std::string name : {"gnu_posix.tar", "py_pax.tar.gz", "gnu_gnu.tar.gz"}) {
    SCOPED_TRACE(name);
    auto manifest = manifest_of({fx.path(name)});
    const auto want = fx.samples(name);
    const uint64_t n = want.size();
    for (const ReadPath& path : kReadPaths) {
      auto made = make_reader(manifest, path);
      SampleReader& reader = *made;
      // Forward runs of every length, then backward runs (a gzip source restarts).
      for (uint64_t len = 1; len <= n; ++len) {
        for (uint64_t first = 0; first + len <= n; first += len) {
          std::vector<Item> items;
          Status st = reader.read(0, first, first + len, first, &items);
          ASSERT_TRUE(st.is_ok()) << first << "+" << len << ": " << st.to_string();
          ASSERT_EQ(items.size(), len);
          for (uint64_t i = 0; i < len; ++i) expect_item(items[i], want[first + i], first + i);
        }
      }
      for (uint64_t first = n; first-- > 0;) {
        std::vector<Item> items;
        ASSERT_TRUE(reader.read(0, first, first + 1, 7, &items).is_ok());
        ASSERT_EQ(items.size(), 1u);
        expect_item(items[0], want[first], 7);
      }
    }
  }
}

// Logical shards that split one source read their runs in turn, as a worker reads the
// shards of its unit: the reader picks up each one's walk where its last run stopped, for
// fewer shards than it keeps walks of per source and for more.
TEST(SampleReader, InterleavedRunsOfOneSourceReadRight) {
  TempDir dir;
  std::string tar;
  const size_t n = 120;
  auto key = [](size_t i) {
    char k[16];
    std::snprintf(k, sizeof k, "s%04zu", i);
    return std::string(k);
  };
  for (size_t i = 0; i < n; ++i) {
    tar += test::tar_member(key(i) + ".cls", std::to_string(i));
    tar += test::tar_member(key(i) + ".txt", std::string(i % 7 + 1, 'a' + i % 26));
  }
  const std::string path = dir.file("one.tar");
  test::write_file(path, tar + test::tar_end());
  auto manifest = manifest_of({path});
  ASSERT_EQ(manifest->source_items(0), n);
  for (size_t streams : {size_t{4}, size_t{30}}) {
    SCOPED_TRACE(streams);
    SampleReader reader(local_file_system(), manifest, BufferPool::create());
    const size_t per = n / streams;
    std::vector<size_t> at(streams, 0);  // samples read of each stream's part
    for (bool left = true; left;) {
      left = false;
      for (size_t k = 0; k < streams; ++k) {
        const size_t len = std::min<size_t>(per - at[k], 1 + (k + at[k]) % 3);
        if (len == 0) continue;
        left = true;
        const uint64_t first = k * per + at[k];
        std::vector<Item> items;
        Status st = reader.read(0, first, first + len, first, &items);
        ASSERT_TRUE(st.is_ok()) << first << "+" << len << ": " << st.to_string();
        ASSERT_EQ(items.size(), len);
        for (size_t i = 0; i < len; ++i) {
          EXPECT_EQ(items[i].key, key(first + i));
          EXPECT_EQ(items[i].id, first + i);
          ASSERT_EQ(items[i].fields.size(), 2u);
          EXPECT_EQ(items[i].fields[0].view(), std::to_string(first + i));
        }
        at[k] += len;
      }
    }
  }
}

TEST(SampleReader, SwitchesBetweenMoreSourcesThanOpenFiles) {
  const auto& fx = Fixtures::get();
  const std::vector<std::string> names = {"py_gnu.tar", "gnu_gnu.tar.gz", "py_ustar.tar"};
  std::vector<std::string> paths;
  for (const auto& n : names) paths.push_back(fx.path(n));
  auto manifest = manifest_of(paths);
  SampleReader reader(local_file_system(), manifest, BufferPool::create(), {1});
  for (int round = 0; round < 3; ++round) {
    for (uint32_t s = 0; s < names.size(); ++s) {
      const auto want = fx.samples(names[s]);
      const uint64_t k = (round * 3 + s) % want.size();
      std::vector<Item> items;
      Status st = reader.read(s, k, k + 1, 0, &items);
      ASSERT_TRUE(st.is_ok()) << names[s] << ": " << st.to_string();
      ASSERT_EQ(items.size(), 1u);
      expect_item(items[0], want[k], 0);
    }
  }
}

// A file system that serves http://test/<i>.tar from one local fixture, counting opens.
class RemoteLookalike : public FileSystemWrapper {
 public:
  RemoteLookalike(std::string local) : FileSystemWrapper(&local_file_system()), local_(local) {}
  Result<std::unique_ptr<RandomAccessFile>> open(const std::string&) override {
    ++opens;
    return target()->open(local_);
  }
  int opens = 0;

 private:
  std::string local_;
};

// Where every source is remote, a reader keeps up to max_open_remote_files open: a remote
// open costs a HEAD, and a worker that reads many small shards in turn opened each again.
TEST(SampleReader, KeepsMoreFilesOpenWhereEverySourceIsRemote) {
  const auto& fx = Fixtures::get();
  const std::string path = fx.path("py_ustar.tar");
  const auto one = manifest_of({path});
  ASSERT_EQ(one->sources.size(), 1u);
  constexpr uint32_t kSources = 70;  // more than max_open_files (64)
  for (const bool remote : {true, false}) {
    auto m = std::make_shared<Manifest>(*one);
    m->sources.clear();
    for (uint32_t i = 0; i < kSources; ++i) {
      SourceEntry e = one->sources[0];
      e.uri = (remote ? "http://test/" : "/test/") + std::to_string(i) + ".tar";
      m->sources.push_back(e);
    }
    RemoteLookalike fs(path);
    SampleReader reader(fs, m, BufferPool::create());
    EXPECT_EQ(reader.max_open_files(), remote ? 1024u : 64u);
    for (int round = 0; round < 2; ++round)
      for (uint32_t s = 0; s < kSources; ++s) {
        std::vector<Item> items;
        Status st = reader.read(s, 0, 1, 0, &items);
        ASSERT_TRUE(st.is_ok()) << st.to_string();
        ASSERT_EQ(items.size(), 1u);
      }
    EXPECT_EQ(fs.opens, remote ? static_cast<int>(kSources) : static_cast<int>(2 * kSources))
        << (remote ? "remote" : "local");
  }
}

// Past max_open_files, the file closed is the one read least recently: a read moves its
// file to the front, so a source read often stays open between the others.
TEST(SampleReader, ClosesTheFileReadLeastRecently) {
  const auto& fx = Fixtures::get();
  const std::string path = fx.path("py_ustar.tar");
  const auto one = manifest_of({path});
  auto m = std::make_shared<Manifest>(*one);
  m->sources.clear();
  for (uint32_t i = 0; i < 3; ++i) {
    SourceEntry e = one->sources[0];
    e.uri = "/test/" + std::to_string(i) + ".tar";
    m->sources.push_back(e);
  }
  RemoteLookalike fs(path);
  SampleReaderOptions o;
  o.max_open_files = 2;
  SampleReader reader(fs, m, BufferPool::create(), o);
  auto read = [&](uint32_t s) {
    std::vector<Item> items;
    Status st = reader.read(s, 0, 1, 0, &items);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    ASSERT_EQ(items.size(), 1u);
  };
  // 0 and 1 open; 0 read again; 2 closes 1, the least recent, and 0 stays open.
  for (uint32_t s : {0u, 1u, 0u, 2u, 0u}) read(s);
  EXPECT_EQ(fs.opens, 3);
  read(1);  // closed above: opened again, closing 2 (0 was read after it)
  EXPECT_EQ(fs.opens, 4);
  read(0);
  EXPECT_EQ(fs.opens, 4);
  read(2);
  EXPECT_EQ(fs.opens, 5);
}

TEST(SampleReader, ItemsKeepTheirBytesAfterTheReaderIsGone) {
  const auto& fx = Fixtures::get();
  auto manifest = manifest_of({fx.path("py_pax.tar")});
  const auto want = fx.samples("py_pax.tar");
  for (const ReadPath& path : kReadPaths) {
    std::vector<Item> items;
    {
      auto made = make_reader(manifest, path);
      SampleReader& reader = *made;
      ASSERT_TRUE(reader.read(0, 0, want.size(), 0, &items).is_ok());
    }
    std::vector<Item> moved = std::move(items);
    for (size_t i = 0; i < want.size(); ++i) expect_item(moved[i], want[i], i);
  }
}

TEST(SampleReader, EmptyRunReadsNothingAndARunPastTheEndIsAnError) {
  const auto& fx = Fixtures::get();
  auto manifest = manifest_of({fx.path("py_gnu.tar")});
  SampleReader reader(local_file_system(), manifest, BufferPool::create());
  std::vector<Item> items;
  EXPECT_TRUE(reader.read(0, 3, 3, 0, &items).is_ok());
  EXPECT_TRUE(items.empty());
  Status st = reader.read(0, 2, 99, 0, &items);
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_NE(st.message().find(fx.path("py_gnu.tar")), std::string::npos) << st.message();
}

TEST(SampleReader, ShardChangedSinceItsManifestIsCorrupt) {
  const auto& fx = Fixtures::get();
  TempDir dir;
  const std::string path = dir.file("shard.tar");
  std::filesystem::copy_file(fx.path("py_ustar.tar"), path);
  auto manifest = manifest_of({path});
  const uint64_t n = manifest->sources[0].samples.size();

  // Another archive with other offsets in its place.
  std::filesystem::copy_file(fx.path("py_gnu.tar"), path,
                             std::filesystem::copy_options::overwrite_existing);
  {
    SampleReader reader(local_file_system(), manifest, BufferPool::create());
    std::vector<Item> items;
    Status st = reader.read(0, 0, n, 0, &items);
    ASSERT_FALSE(st.is_ok()) << "read a changed shard without noticing";
    EXPECT_EQ(st.code(), StatusCode::kCorrupt);
    EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
    // The message names the commands that fix it.
    EXPECT_NE(st.message().find("shardyard manifest build"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("--no-cache"), std::string::npos) << st.message();
    // Another file is not a truncated one: the message says what changed.
    EXPECT_NE(st.message().find("changed since its manifest was built"), std::string::npos)
        << st.message();
    EXPECT_EQ(st.message().find("truncated"), std::string::npos) << st.message();
  }
  // The same bytes with another modification time: changed too (nothing says the bytes
  // are the same without reading them all).
  std::filesystem::copy_file(fx.path("py_ustar.tar"), path,
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::last_write_time(
      path, std::filesystem::last_write_time(path) + std::chrono::seconds(5));
  {
    auto fresh = manifest_of({path});
    std::filesystem::last_write_time(
        path, std::filesystem::last_write_time(path) + std::chrono::seconds(5));
    SampleReader reader(local_file_system(), fresh, BufferPool::create());
    std::vector<Item> items;
    Status st = reader.read(0, 0, 1, 0, &items);
    EXPECT_EQ(st.code(), StatusCode::kCorrupt);
    EXPECT_NE(st.message().find("modification time"), std::string::npos) << st.message();
  }
  // The same archive cut short.
  const std::string bytes = test::read_file(fx.path("py_ustar.tar"));
  test::write_file(path, bytes.substr(0, bytes.size() / 2));
  for (const ReadPath& read_path : kReadPaths) {
    auto made = make_reader(manifest, read_path);
    SampleReader& reader = *made;
    std::vector<Item> items;
    Status st = reader.read(0, n - 1, n, 0, &items);
    ASSERT_FALSE(st.is_ok());
    EXPECT_EQ(st.code(), StatusCode::kCorrupt);
    EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("changed since"), std::string::npos) << st.message();
    EXPECT_EQ(st.message().find("truncated"), std::string::npos) << st.message();
  }
  // Gone.
  std::filesystem::remove(path);
  {
    SampleReader reader(local_file_system(), manifest, BufferPool::create());
    std::vector<Item> items;
    Status st = reader.read(0, 0, 1, 0, &items);
    EXPECT_EQ(st.code(), StatusCode::kNotFound);
  }
}

// The reader keeps its files open. A shard cut short after the reader opened it must give
// a kCorrupt status like one cut before: a memory mapping past the new end of the file
// would raise SIGBUS instead. Run in a child process so a crash fails only this test.
TEST(SampleReaderDeathTest, ShardCutShortWhileOpenIsCorruptNotACrash) {
  const auto& fx = Fixtures::get();
  TempDir dir;
  const std::string path = dir.file("shard.tar");
  std::filesystem::copy_file(fx.path("py_ustar.tar"), path);
  auto manifest = manifest_of({path});
  const uint64_t n = manifest->sources[0].samples.size();
  EXPECT_EXIT(
      {
        SampleReader reader(local_file_system(), manifest, BufferPool::create(), {64, 0});
        std::vector<Item> items;
        if (!reader.read(0, 0, 1, 0, &items).is_ok()) std::_Exit(2);  // opens the file
        std::filesystem::resize_file(path, 4096);
        Status st = reader.read(0, n - 1, n, 0, &items);
        std::_Exit(st.code() == StatusCode::kCorrupt ? 0 : 3);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(SampleReader, ReadsSamplesOfALooseFileDirectory) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("loose/sub"));
  const std::map<std::string, std::string> files = {{"a.cls", "1"},
                                                    {"a.jpg", std::string(5000, 'j')},
                                                    {"b.cls", ""},
                                                    {"sub/c.input.bin", "xyz"},
                                                    {"sub/c.json", "{}"}};
  for (const auto& [name, bytes] : files) test::write_file(dir.file("loose/" + name), bytes);
  auto manifest = manifest_of({dir.file("loose")});
  SampleReader reader(local_file_system(), manifest, BufferPool::create());
  std::vector<Item> items;
  ASSERT_TRUE(reader.read(0, 0, 3, 50, &items).is_ok());
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0].key, "a");
  EXPECT_EQ(items[0].id, 50u);
  EXPECT_EQ(items[0].field("jpg")->view(), files.at("a.jpg"));
  EXPECT_EQ(items[0].field("cls")->view(), "1");
  EXPECT_EQ(items[1].key, "b");
  EXPECT_EQ(items[1].field("cls")->size, 0u);
  EXPECT_EQ(items[2].key, "sub/c");
  EXPECT_EQ(items[2].id, 52u);
  ASSERT_EQ(items[2].fields.size(), 2u);
  EXPECT_EQ(items[2].fields[0].name, "input.bin");
  EXPECT_EQ(items[2].fields[0].view(), "xyz");
  EXPECT_EQ(items[2].fields[1].name, "json");
}

// A sample over the bound fails with its key, in a plain and in a gzip-compressed shard
// (where it would otherwise be inflated into a buffer of its size), before it is read;
// samples under the bound still read.
TEST(SampleReader, SampleOverTheBoundFailsWithItsKey) {
  TempDir dir;
  const std::string tar = test::tar_member("small.bin", std::string(1000, 's')) +
                          test::tar_member("huge.bin", std::string(3 << 20, '\0')) +
                          test::tar_member("after.bin", "a") + test::tar_end();
  test::write_file(dir.file("plain.tar"), tar);
  test::write_file(dir.file("packed.tar"), tar);
  ASSERT_EQ(test::run_command("gzip -n " + dir.file("packed.tar")), 0);
  for (const std::string name : {"plain.tar", "packed.tar.gz"}) {
    const std::string path = dir.file(name);
    auto manifest = manifest_of({path});
    ASSERT_EQ(manifest->sources[0].samples.size(), 3u) << name;
    Status whole = check_sample_bytes(*manifest, 1 << 20);
    EXPECT_EQ(whole.code(), StatusCode::kInvalidArgument) << name;
    EXPECT_NE(whole.message().find("sample 'huge'"), std::string::npos) << whole.message();
    EXPECT_NE(whole.message().find(path), std::string::npos) << whole.message();
    EXPECT_TRUE(check_sample_bytes(*manifest, 4 << 20).is_ok()) << name;

    SampleReader reader(local_file_system(), manifest, BufferPool::create(),
                        {64, 256u << 10, 1 << 20});
    std::vector<Item> items;
    Status st = reader.read(0, 0, 3, 0, &items);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << name;
    EXPECT_NE(st.message().find("sample 'huge'"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("--max-sample-bytes"), std::string::npos) << st.message();
    items.clear();
    ASSERT_TRUE(reader.read(0, 0, 1, 0, &items).is_ok()) << name;
    ASSERT_TRUE(reader.read(0, 2, 3, 2, &items).is_ok()) << name;
    ASSERT_EQ(items.size(), 2u);
    EXPECT_EQ(items[1].field("bin")->view(), "a");
  }
}

// Members of at least the bound in a run of a local tar shard whose samples average that
// much are left unread, with their place in the file; small members are read beside them
// and stay valid after the reader is gone; a compressed shard is read as before.
TEST(SampleReader, LeavesLargeMembersOfALocalTarUnread) {
  TempDir dir;
  const std::string big(300000, 'B'), other(200000, 'O');
  const std::string tar = test::tar_member("a.bin", big) + test::tar_member("a.cls", "7") +
                          test::tar_member("a.json", "{}") + test::tar_member("b.bin", other) +
                          test::tar_member("b.cls", "8") + test::tar_end();
  test::write_file(dir.file("plain.tar"), tar);
  test::write_file(dir.file("packed.tar"), tar);
  ASSERT_EQ(test::run_command("gzip -n " + dir.file("packed.tar")), 0);
  auto manifest = manifest_of({dir.file("plain.tar"), dir.file("packed.tar.gz")});
  std::vector<Item> items;
  {
    SampleReader reader(local_file_system(), manifest, BufferPool::create());
    reader.set_unread_field_bytes(64 << 10);
    ASSERT_TRUE(reader.read(0, 0, 2, 0, &items).is_ok());
    ASSERT_TRUE(reader.read(1, 0, 2, 2, &items).is_ok());
    // Runs whose samples are smaller on average than the bound are read whole.
    reader.set_unread_field_bytes(1 << 20);
    ASSERT_TRUE(reader.read(0, 0, 2, 4, &items).is_ok());
  }
  ASSERT_EQ(items.size(), 6u);
  const Field* bin = items[0].field("bin");
  ASSERT_NE(bin, nullptr);
  EXPECT_TRUE(bin->unread());
  EXPECT_EQ(bin->size, big.size());
  EXPECT_EQ(bin->file_offset, 512u);  // after its header
  EXPECT_EQ(tar.substr(bin->file_offset, bin->size), big);
  EXPECT_FALSE(items[0].field("cls")->unread());
  EXPECT_EQ(items[0].field("cls")->view(), "7");
  EXPECT_EQ(items[0].field("json")->view(), "{}");
  const FileBytes* file = file_bytes_of(items[0].owner);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->source, 0u);
  EXPECT_EQ(file->data, nullptr);  // nothing of the file is mapped
  EXPECT_EQ(bytes_of(items[1], *items[1].field("bin")), other);
  EXPECT_EQ(items[1].field("cls")->view(), "8");
  for (size_t i = 2; i < 6; ++i) {
    SCOPED_TRACE(i);
    for (const auto& f : items[i].fields) EXPECT_FALSE(f.unread()) << f.name;
    EXPECT_EQ(items[i].field("bin")->view(), i % 2 == 0 ? big : other);
  }
}

// An unread field of a shard that is cut short before the batch reads it: the read fails
// naming the shard as changed since its manifest was built, never a short or zeroed field.
TEST(SampleReader, AnUnreadFieldOfAShardCutShortFailsItsRead) {
  TempDir dir;
  const std::string path = dir.file("shard.tar");
  test::write_file(path, test::tar_member("a.bin", std::string(100000, 'x')) +
                             test::tar_member("a.cls", "1") + test::tar_end());
  auto manifest = manifest_of({path});
  SampleReader reader(local_file_system(), manifest, BufferPool::create());
  reader.set_unread_field_bytes(1000);
  std::vector<Item> items;
  ASSERT_TRUE(reader.read(0, 0, 1, 0, &items).is_ok());
  const Field* bin = items[0].field("bin");
  ASSERT_TRUE(bin != nullptr && bin->unread());
  std::filesystem::resize_file(path, 4096);
  std::string out(bin->size, '\0');
  Status st = unread_reader(items[0])->read(bin->file_offset,
                                            reinterpret_cast<uint8_t*>(out.data()), out.size());
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("changed since its manifest was built"), std::string::npos)
      << st.message();
  // The walk of a run over the missing bytes fails the same way.
  std::vector<Item> again;
  Status walk = reader.read(0, 0, 1, 0, &again);
  EXPECT_EQ(walk.code(), StatusCode::kCorrupt);
  EXPECT_NE(walk.message().find("changed since"), std::string::npos) << walk.message();
}

}  // namespace
}  // namespace shardyard::io
