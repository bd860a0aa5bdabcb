// Integration tests of io/remote/remote_file_system.h against real servers on loopback: nginx,
// s3rver and the fault proxy of tests/servers/servers.py, which starts them and runs this
// binary (ctest: io_remote_integration). Run alone, every test skips with a message.
#include "io/remote/remote_file_system.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "io/format/manifest_scan.h"
#include "io/format/sample_reader.h"
#include "io/remote/http_client.h"
#include "tar_fixtures.h"

namespace shardyard::io {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

#define REQUIRE_SERVERS()                                                                \
  if (env("SY_TEST_HTTP_URL").empty())                                                   \
  GTEST_SKIP() << "no test servers: run through tests/servers/servers.py --fixtures -- " \
                  "(ctest does)"

// Byte i of the fixture remote/blob.bin (servers.py: blob_byte).
uint8_t blob_byte(uint64_t i) { return static_cast<uint8_t>((i * 7 + (i >> 12)) & 0xFF); }
constexpr uint64_t kBlobSize = 3 * 1024 * 1024 + 123;

RemoteOptions fast_options() {
  RemoteOptions o;
  o.http.retry.max_retries = 4;
  o.http.retry.backoff_base_ms = 10;
  o.http.retry.backoff_max_ms = 50;
  o.http.low_speed_time_s = 2;
  o.http.connect_timeout_ms = 2000;
  o.read_ahead.block_bytes = 1 << 20;
  return o;
}

S3Config s3_config() {
  S3Config c;
  c.credentials = {"S3RVER", "S3RVER", ""};
  c.endpoint_url = env("SY_TEST_S3_ENDPOINT");
  return c;
}

void expect_blob(RandomAccessFile& f, uint64_t offset, size_t n) {
  std::string buf(n, '\0');
  auto r = f.read_at(offset, buf.data(), n);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  size_t want = offset >= kBlobSize ? 0 : std::min<uint64_t>(n, kBlobSize - offset);
  ASSERT_EQ(*r, want);
  for (size_t i = 0; i < want; ++i)
    ASSERT_EQ(static_cast<uint8_t>(buf[i]), blob_byte(offset + i)) << "at byte " << offset + i;
}

// Requests the fault proxy saw for `path` (its /_stats log), as "METHOD RANGE" strings.
std::vector<std::string> proxy_log(const std::string& path) {
  HttpClient client(HttpOptions{});
  auto body = client.get_body(env("SY_TEST_PROXY_URL") + "/_stats", nullptr);
  EXPECT_TRUE(body.is_ok());
  std::vector<std::string> out;
  if (!body.is_ok()) return out;
  const std::string key = "[\"" + path + "\", \"";
  for (size_t at = body->find(key); at != std::string::npos; at = body->find(key, at + 1)) {
    size_t m = at + key.size(), m_end = body->find('"', m);
    size_t r = body->find('"', m_end + 1) + 1, r_end = body->find('"', r);
    out.push_back(body->substr(m, m_end - m) + " " + body->substr(r, r_end - r));
  }
  return out;
}

TEST(HttpFileSystem, StatOpenAndRangedReads) {
  REQUIRE_SERVERS();
  auto fs = http_file_system(fast_options());
  const std::string url = env("SY_TEST_HTTP_URL") + "/remote/blob.bin";
  auto info = fs->stat(url);
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  EXPECT_EQ(info->size, kBlobSize);
  EXPECT_NE(info->mtime_ns, 0);
  auto f = fs->open(url);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_EQ((*f)->size(), kBlobSize);
  EXPECT_EQ((*f)->version(), info->mtime_ns);
  for (uint64_t off = 0; off < 200000; off += 4000) expect_blob(**f, off, 4000);  // sequential
  expect_blob(**f, 2000000, 512);                                                 // a seek
  expect_blob(**f, 100, 3 << 20);                                                 // large
  expect_blob(**f, kBlobSize - 10, 100);                                          // the end
  expect_blob(**f, kBlobSize, 10);
}

TEST(HttpFileSystem, MissingObjectIsNotFoundAndTheErrorShowsNoQueryString) {
  REQUIRE_SERVERS();
  auto fs = http_file_system(fast_options());
  auto r = fs->open(env("SY_TEST_HTTP_URL") + "/remote/nope.bin?X-Amz-Signature=SECRETSIG");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("/remote/nope.bin"), std::string::npos);
  EXPECT_NE(r.status().message().find("404"), std::string::npos);
  EXPECT_EQ(r.status().message().find("SECRETSIG"), std::string::npos) << r.status().message();
}

TEST(HttpFileSystem, ForbiddenIsNotRetried) {
  REQUIRE_SERVERS();
  auto fs = http_file_system(fast_options());
  const std::string path = "/_f/403/remote/blob.bin";
  auto r = fs->stat(env("SY_TEST_PROXY_URL") + path);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIoError);
  EXPECT_NE(r.status().message().find("403"), std::string::npos);
  EXPECT_EQ(proxy_log(path).size(), 1u);
}

TEST(HttpFileSystem, ServiceUnavailableAndSlowDownAreRetried) {
  REQUIRE_SERVERS();
  auto fs = http_file_system(fast_options());
  for (std::string path : {"/_f/503x3/remote/blob.bin", "/_f/slowdownx2,429x1/remote/blob.bin"}) {
    auto f = fs->open(env("SY_TEST_PROXY_URL") + path);
    ASSERT_TRUE(f.is_ok()) << f.status().to_string();
    expect_blob(**f, 0, 1000);
    EXPECT_EQ(proxy_log(path).size(), 5u) << path;  // 3 faults + HEAD + GET
  }
}

TEST(HttpFileSystem, ABrokenBodyResumesAtTheByteWhereItBroke) {
  REQUIRE_SERVERS();
  auto fs = http_file_system(fast_options());
  const std::string path = "/_f/drop:100000x2/remote/blob.bin";
  auto f = fs->open(env("SY_TEST_PROXY_URL") + path);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  expect_blob(**f, 0, 1 << 20);  // one block-sized GET, cut twice
  auto log = proxy_log(path);
  ASSERT_EQ(log.size(), 4u);
  EXPECT_EQ(log[1], "GET bytes=0-1048575");
  EXPECT_EQ(log[2], "GET bytes=100000-1048575");  // resumed where the first body broke
  EXPECT_EQ(log[3], "GET bytes=200000-1048575");
}

// The client follows its connections from open to close (it closes them itself, to know
// which sockets to acknowledge on): connections that a server breaks are closed, not leaked.
TEST(HttpFileSystem, ConnectionsAServerBreaksAreClosed) {
  REQUIRE_SERVERS();
  auto open_fds = [] {
    size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
      (void)e;
      ++n;
    }
    return n;
  };
  RemoteOptions o = fast_options();
  o.http.retry.max_retries = 16;
  auto fs = http_file_system(o);
  auto f = fs->open(env("SY_TEST_HTTP_URL") + "/remote/blob.bin");
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  expect_blob(**f, 0, 1 << 20);  // the connections this thread keeps are open now
  const size_t before = open_fds();
  const std::string path = "/_f/drop:50000x12/remote/blob.bin";
  auto g = fs->open(env("SY_TEST_PROXY_URL") + path);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  expect_blob(**g, 0, 1 << 20);  // one block-sized GET, broken 12 times
  EXPECT_EQ(proxy_log(path).size(), 14u);
  // At most the kept-alive connection to the proxy is new; 12 broken ones are gone.
  EXPECT_LE(open_fds(), before + 2);
}

TEST(HttpFileSystem, AStalledTransferTimesOutAndResumes) {
  REQUIRE_SERVERS();
  auto o = fast_options();
  o.http.low_speed_time_s = 1;
  auto fs = http_file_system(o);
  const std::string path = "/_f/stall:5000x1/remote/blob.bin";
  auto f = fs->open(env("SY_TEST_PROXY_URL") + path);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  auto t0 = std::chrono::steady_clock::now();
  expect_blob(**f, 0, 20000);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 10.0);
  auto log = proxy_log(path);
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log[2].rfind("GET bytes=5000-", 0), 0u) << log[2];
}

TEST(HttpFileSystem, RetriesRunOutWithAClearError) {
  REQUIRE_SERVERS();
  auto o = fast_options();
  o.http.retry.max_retries = 2;
  auto fs = http_file_system(o);
  const uint64_t retries_before = remote_read_retries();
  auto r = fs->stat(env("SY_TEST_PROXY_URL") + "/_f/503/remote/blob.bin");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(remote_read_retries() - retries_before, 2u) << "the monitor's counter saw them";
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("503"), std::string::npos);
  EXPECT_NE(r.status().message().find("gave up after 2 retries"), std::string::npos);
  EXPECT_NE(r.status().message().find("/remote/blob.bin"), std::string::npos);

  auto refused = fs->stat("http://127.0.0.1:1/x.tar");  // nothing listens on port 1
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
}

// A server that sends a byte a second, and one that sends part of a body and then nothing
// on an open connection: every attempt makes progress, so only the deadline ends the read.
TEST(HttpFileSystem, ATricklingOrStalledServerEndsAtTheDeadline) {
  REQUIRE_SERVERS();
  auto o = fast_options();
  o.http.low_speed_time_s = 1;
  o.http.deadline_s = 3;
  auto fs = http_file_system(o);
  for (const std::string fault : {"slow:1", "hang:5000"}) {
    auto f = fs->open(env("SY_TEST_PROXY_URL") + "/_f/" + fault + "/remote/blob.bin");
    ASSERT_TRUE(f.is_ok()) << f.status().to_string();
    std::string buf(1 << 20, '\0');
    auto r = (*f)->read_at(0, buf.data(), buf.size());
    ASSERT_FALSE(r.is_ok()) << fault;
    EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << fault;
    EXPECT_NE(r.status().message().find("within 3 s (SHARDYARD_HTTP_DEADLINE_S"), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("/remote/blob.bin"), std::string::npos);
    // The object is given up for this open file: the next read does not wait again.
    auto again = (*f)->read_at(4096, buf.data(), 4096);
    EXPECT_EQ(again.status().code(), StatusCode::kUnavailable);
  }
}

// A server that answers every ranged GET with the whole object: the object is fetched once,
// whole, and every range is served from that one download.
TEST(HttpFileSystem, AnObjectWhoseServerIgnoresRangeIsReadOnce) {
  REQUIRE_SERVERS();
  auto fs = http_file_system(fast_options());
  const std::string path = "/_f/norange/remote/blob.bin";
  auto f = fs->open(env("SY_TEST_PROXY_URL") + path);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  expect_blob(**f, 0, 1000);
  expect_blob(**f, 2 << 20, 300000);
  expect_blob(**f, 100, 5000);  // backwards: still no new request
  expect_blob(**f, kBlobSize - 10, 100);
  // A second open of the object reads the same download.
  auto g = fs->open(env("SY_TEST_PROXY_URL") + path);
  ASSERT_TRUE(g.is_ok());
  expect_blob(**g, 1 << 20, 70000);
  auto log = proxy_log(path);
  int gets = 0;
  for (const auto& l : log) gets += l.rfind("GET", 0) == 0;
  EXPECT_EQ(gets, 2) << "the first ranged GET, dropped at its 200, then one whole download";
}

int count_of(const std::vector<std::string>& log, const std::string& method) {
  int n = 0;
  for (const auto& l : log) n += l.rfind(method + " ", 0) == 0;
  return n;
}

// open_known: the caller's size and version instead of a HEAD. Every answer is checked
// against them, so another version fails the first read (after one HEAD that confirms it)
// and another size fails it at once (the answer's Content-Range says the size).
// The blob's size and version (a HEAD straight to nginx), named by its URL through the
// fault proxy at `path` ("/_f/SPEC/remote/blob.bin").
FileInfo blob_through_proxy(FileSystem& fs, const std::string& path) {
  auto info = fs.stat(env("SY_TEST_HTTP_URL") + "/remote/blob.bin");
  EXPECT_TRUE(info.is_ok()) << info.status().to_string();
  FileInfo known = info.is_ok() ? *info : FileInfo{};
  EXPECT_NE(known.mtime_ns, 0);
  known.uri = env("SY_TEST_PROXY_URL") + path;
  return known;
}

// The first read of a file opened with `known`: OK, or why it failed.
Status first_read(FileSystem& fs, const FileInfo& known) {
  auto f = fs.open_known(known);
  if (!f.is_ok()) return f.status();
  std::string buf(4096, '\0');
  auto r = (*f)->read_at(0, buf.data(), buf.size());
  return r.is_ok() ? Status::ok() : r.status();
}

TEST(HttpFileSystem, OpenKnownSendsNoHeadAndChecksEveryAnswer) {
  REQUIRE_SERVERS();
  auto fs = http_file_system(fast_options());
  const std::string path = "/_f/pass:1/remote/blob.bin";
  FileInfo known = blob_through_proxy(*fs, path);
  const int64_t version = known.mtime_ns;
  auto f = fs->open_known(known);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_EQ((*f)->size(), kBlobSize);
  EXPECT_EQ((*f)->version(), version);
  expect_blob(**f, 0, 70000);
  expect_blob(**f, 2000000, 300000);
  auto log = proxy_log(path);
  EXPECT_EQ(count_of(log, "HEAD"), 0);
  EXPECT_GE(count_of(log, "GET"), 2);

  const std::string other = "/_f/pass:2/remote/blob.bin";
  known.uri = env("SY_TEST_PROXY_URL") + other;
  known.mtime_ns = version + 1;
  Status st = first_read(*fs, known);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt) << st.to_string();
  EXPECT_NE(st.message().find("changed"), std::string::npos) << st.message();
  EXPECT_EQ(count_of(proxy_log(other), "HEAD"), 1);

  known.uri = env("SY_TEST_PROXY_URL") + "/_f/pass:3/remote/blob.bin";
  known.size = kBlobSize + 1;
  known.mtime_ns = version;
  st = first_read(*fs, known);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt) << st.to_string();
  EXPECT_NE(st.message().find("is now " + std::to_string(kBlobSize) + " bytes"), std::string::npos)
      << st.message();

  // A missing object: the first read says so, as open() would have.
  FileInfo none;
  none.uri = env("SY_TEST_HTTP_URL") + "/remote/none.bin";
  none.size = 100;
  st = first_read(*fs, none);
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.to_string();
}

// A reader opens a remote shard with its manifest's size and version, so a run sends no
// HEAD per shard; a shard rewritten since its manifest was built (the same size, another
// modification time, so another ETag) still fails at its first read, named as changed.
TEST(HttpFileSystem, AReaderSendsNoHeadAndRefusesAShardChangedSinceItsManifest) {
  REQUIRE_SERVERS();
  namespace fsys = std::filesystem;
  using test::tar_end;
  using test::tar_member;
  using test::write_file;
  const std::string dir = env("SY_TEST_ROOT") + "/changed";
  fsys::create_directories(dir);
  auto shard = [](char fill) {
    return tar_member("s0.bin", std::string(3000, fill)) + tar_member("s1.bin", "one") + tar_end();
  };
  write_file(dir + "/shard.tar", shard('a'));
  auto fs = http_file_system(fast_options());
  const std::string path = "/_f/pass:4/changed/shard.tar";
  auto built = build_manifest(*fs, {env("SY_TEST_PROXY_URL") + path}, ScanOptions{}, nullptr);
  ASSERT_TRUE(built.is_ok()) << built.status().to_string();
  auto manifest = std::make_shared<const Manifest>(*built);
  ASSERT_EQ(manifest->source_items(0), 2u);
  const int heads = count_of(proxy_log(path), "HEAD");

  SampleReader reader(*fs, manifest, BufferPool::create(), SampleReaderOptions{});
  std::vector<Item> items;
  Status st = reader.read(0, 0, 2, 0, &items);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].field("bin")->view(), std::string(3000, 'a'));
  EXPECT_EQ(count_of(proxy_log(path), "HEAD"), heads) << "the reader sent a HEAD";

  write_file(dir + "/shard.tar", shard('b'));
  fsys::last_write_time(dir + "/shard.tar",
                        fsys::last_write_time(dir + "/shard.tar") + std::chrono::seconds(10));
  SampleReader later(*fs, manifest, BufferPool::create(), SampleReaderOptions{});
  items.clear();
  st = later.read(0, 0, 2, 0, &items);
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find("changed since its manifest was built"), std::string::npos)
      << st.message();
  for (const auto& item : items) {
    const Field* f = item.field("bin");
    if (f != nullptr) {
      EXPECT_NE(f->view(), std::string(3000, 'b')) << "bytes of the new file";
    }
  }
}

// A server that ignores Range: the whole object is spooled as without a known version,
// and its answer is checked all the same. A file whose version no answer has named (the
// server is known to ignore Range, so no GET goes out for it) gets one HEAD before it is
// served from a spool.
TEST(HttpFileSystem, OpenKnownChecksAnObjectWhoseServerIgnoresRange) {
  REQUIRE_SERVERS();
  auto fs = http_file_system(fast_options());
  const std::string path = "/_f/norange:1/remote/blob.bin";
  FileInfo known = blob_through_proxy(*fs, path);
  auto f = fs->open_known(known);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  expect_blob(**f, 0, 1000);
  expect_blob(**f, 2 << 20, 300000);
  EXPECT_EQ(count_of(proxy_log(path), "HEAD"), 0);

  const std::string other = "/_f/norange:2/remote/blob.bin";
  known.uri = env("SY_TEST_PROXY_URL") + other;
  known.mtime_ns += 1;
  Status st = first_read(*fs, known);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt) << st.to_string();
  auto log = proxy_log(other);
  EXPECT_EQ(count_of(log, "HEAD"), 1);
  EXPECT_EQ(count_of(log, "GET"), 0);
}

// A server whose GETs carry another ETag than its HEADs (a proxy in between may): one HEAD
// vouches for the object, and its reads go on without another.
TEST(HttpFileSystem, OneHeadVouchesForAServerWhoseGetsCarryOtherValidators) {
  REQUIRE_SERVERS();
  auto fs = http_file_system(fast_options());
  const std::string path = "/_f/otheretag/remote/blob.bin";
  auto f = fs->open_known(blob_through_proxy(*fs, path));
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  expect_blob(**f, 0, 70000);
  expect_blob(**f, 2000000, 300000);
  expect_blob(**f, 100, 3 << 20);
  auto log = proxy_log(path);
  EXPECT_EQ(count_of(log, "HEAD"), 1);
  EXPECT_GE(count_of(log, "GET"), 3);
}

// Ranged GETs and HEADs of http:// URLs are made without libcurl (http_direct.h); an
// answer such a request cannot take is asked for again through libcurl: a redirect (which
// it follows; the fault proxy redirects the open's HEAD too), a chunked body. A 206 for
// another range than the one asked for is an error, never wrong bytes. (ctest runs this
// binary with SHARDYARD_HTTP_DIRECT=0 too.)
TEST(HttpFileSystem, RedirectsAndChunkedBodiesAreReadAndAWrongRangeIsRefused) {
  REQUIRE_SERVERS();
  auto fs = http_file_system(fast_options());
  for (const std::string fault : {"redirect", "chunked"}) {
    const std::string path = "/_f/" + fault + "/remote/blob.bin";
    auto f = fs->open(env("SY_TEST_PROXY_URL") + path);
    ASSERT_TRUE(f.is_ok()) << fault << ": " << f.status().to_string();
    EXPECT_EQ((*f)->size(), kBlobSize) << fault;
    expect_blob(**f, 0, 4000);
    expect_blob(**f, 2000000, 300000);
    expect_blob(**f, 100, 3 << 20);  // large: block-sized reads into the caller's memory
  }
  auto f = fs->open(env("SY_TEST_PROXY_URL") + "/_f/badrange/remote/blob.bin");
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  std::string buf(4096, '\0');
  auto r = (*f)->read_at(1000, buf.data(), buf.size());
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("another byte range"), std::string::npos)
      << r.status().message();
}

// The direct path resolves names (within the connect timeout) and IPv6 literals, and says
// which host it could not reach.
TEST(HttpClient, RangedGetsResolveNamesAndIpv6LiteralsAndNameWhatFailed) {
  REQUIRE_SERVERS();
  HttpOptions o;
  o.retry.max_retries = 0;
  o.connect_timeout_ms = 2000;
  HttpClient client(o);
  std::string url = env("SY_TEST_HTTP_URL") + "/remote/blob.bin";
  url.replace(url.find("127.0.0.1"), 9, "localhost");  // a name, not an address
  std::string buf(70000, '\0');
  auto got = client.get_range(url, nullptr, 5000, buf.data(), buf.size(), kBlobSize, nullptr);
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  ASSERT_EQ(*got, buf.size());
  for (size_t i = 0; i < buf.size(); ++i)
    ASSERT_EQ(static_cast<uint8_t>(buf[i]), blob_byte(5000 + i)) << "at byte " << 5000 + i;

  for (const auto& [where, says] :
       {std::pair<std::string, std::string>{"http://[::1]:1/x", "could not connect to ::1 port 1"},
        {"http://localhost:1/x", "could not connect to localhost port 1"},
        {"http://no-such-host.invalid/x", "could not resolve host no-such-host.invalid"}}) {
    auto r = client.get_range(where, nullptr, 0, buf.data(), 10, -1, nullptr);
    ASSERT_FALSE(r.is_ok()) << where;
    if (env("SHARDYARD_HTTP_DIRECT") != "0") {  // libcurl words its messages its own way
      EXPECT_NE(r.status().message().find(says), std::string::npos) << r.status().message();
    }
  }
}

// After cancel_transfers() (a command stopping on a signal) no request starts or goes on.
TEST(HttpFileSystemDeathTest, CancelledTransfersEndAtOnce) {
  REQUIRE_SERVERS();
  EXPECT_EXIT(
      {
        auto fs = http_file_system(fast_options());
        auto f = fs->open(env("SY_TEST_PROXY_URL") + "/_f/hang:5000/remote/blob.bin");
        if (!f.is_ok()) std::_Exit(2);
        std::thread stop([] {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          cancel_transfers();
        });
        std::string buf(1 << 20, '\0');
        auto r = (*f)->read_at(0, buf.data(), buf.size());
        stop.join();
        if (r.status().code() != StatusCode::kCancelled) std::_Exit(3);
        auto later = fs->stat(env("SY_TEST_HTTP_URL") + "/remote/blob.bin");
        std::_Exit(later.status().code() == StatusCode::kCancelled ? 0 : 4);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(HttpFileSystem, CannotListAFolder) {
  REQUIRE_SERVERS();
  auto fs = http_file_system(fast_options());
  auto r = fs->list(env("SY_TEST_HTTP_URL") + "/many/");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("brace"), std::string::npos);
}

TEST(S3FileSystem, StatOpenAndReadSignedRequests) {
  REQUIRE_SERVERS();
  auto fs = s3_file_system(s3_config(), fast_options());
  const std::string uri = "s3://" + env("SY_TEST_S3_BUCKET") + "/remote/blob.bin";
  auto info = fs->stat(uri);
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  EXPECT_EQ(info->size, kBlobSize);
  auto f = fs->open(uri);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  expect_blob(**f, 0, 70000);
  expect_blob(**f, 3000000, 200000);
  auto missing = fs->open("s3://" + env("SY_TEST_S3_BUCKET") + "/remote/none.bin");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message().find("S3RVER"), std::string::npos);
}

// The same for S3: the object read with the listing's size and version, no HEAD needed;
// another version fails the first read.
TEST(S3FileSystem, OpenKnownReadsAndRefusesAnotherVersion) {
  REQUIRE_SERVERS();
  auto fs = s3_file_system(s3_config(), fast_options());
  const std::string uri = "s3://" + env("SY_TEST_S3_BUCKET") + "/remote/blob.bin";
  auto info = fs->stat(uri);
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  FileInfo known = *info;
  auto f = fs->open_known(known);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_EQ((*f)->version(), info->mtime_ns);
  expect_blob(**f, 0, 70000);
  expect_blob(**f, 3000000, 200000);
  known.mtime_ns += 1;
  Status st = first_read(*fs, known);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt) << st.to_string();
}

TEST(S3FileSystem, ListsAPrefixAcrossPages) {
  REQUIRE_SERVERS();
  auto fs = s3_file_system(s3_config(), fast_options());
  auto r = fs->list("s3://" + env("SY_TEST_S3_BUCKET") + "/many/");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 1001u);  // s3rver pages at 1000 keys
  EXPECT_EQ(r->front(), "obj-0000.tar");
  EXPECT_EQ(r->back(), "obj-1000.tar");
  EXPECT_TRUE(std::is_sorted(r->begin(), r->end()));
  auto none = fs->list("s3://" + env("SY_TEST_S3_BUCKET") + "/nothing-here/");
  ASSERT_TRUE(none.is_ok());
  EXPECT_TRUE(none->empty());
}

TEST(S3Addressing, PathStyleForAnEndpointVirtualHostedForAws) {
  S3Config c;
  c.endpoint_url = "http://127.0.0.1:9000";
  EXPECT_EQ(*s3_object_url(c, "s3://b/d/x y.tar"), "http://127.0.0.1:9000/b/d/x%20y.tar");
  EXPECT_EQ(*s3_list_url(c, "b", "d/", ""), "http://127.0.0.1:9000/b?list-type=2&prefix=d%2F");
  S3Config aws;
  aws.region = "eu-west-1";
  EXPECT_EQ(*s3_object_url(aws, "s3://b/k.tar"), "https://b.s3.eu-west-1.amazonaws.com/k.tar");
  EXPECT_EQ(*s3_list_url(aws, "b", "", "tok/en="),
            "https://b.s3.eu-west-1.amazonaws.com/?list-type=2&continuation-token=tok%2Fen%3D");
  EXPECT_FALSE(s3_object_url(c, "s3://b").is_ok());
  EXPECT_FALSE(s3_object_url(c, "s3:///k").is_ok());
}

}  // namespace
}  // namespace shardyard::io
