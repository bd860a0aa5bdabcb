// Tests of io/remote/http_util.h: URLs, response headers, retry classification and backoff.
#include "io/remote/http_util.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace shardyard::io {
namespace {

TEST(RemoteUri, OnlyHttpHttpsAndS3SchemesAreRemote) {
  EXPECT_TRUE(is_remote_uri("http://h/x.tar"));
  EXPECT_TRUE(is_remote_uri("HTTPS://h/x.tar"));
  EXPECT_TRUE(is_remote_uri("s3://bucket/x.tar"));
  EXPECT_FALSE(is_remote_uri("/data/x.tar"));
  EXPECT_FALSE(is_remote_uri("file:///data/x.tar"));
  EXPECT_FALSE(is_remote_uri("relative/http://x"));
}

TEST(ParseUrl, SplitsSchemeHostPortPathAndQuery) {
  auto u = parse_url("HTTP://user:pw@example.com:8080/a/b.tar?X-Amz-Signature=abc#frag");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->scheme, "http");
  EXPECT_EQ(u->host, "example.com");
  EXPECT_EQ(u->port, 8080);
  EXPECT_EQ(u->path, "/a/b.tar");
  EXPECT_EQ(u->query, "X-Amz-Signature=abc");
  auto bare = parse_url("https://h");
  ASSERT_TRUE(bare);
  EXPECT_EQ(bare->path, "/");
  EXPECT_EQ(bare->port, 0);
  auto v6 = parse_url("http://[::1]:9000/k");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->host, "[::1]");
  EXPECT_EQ(v6->port, 9000);
  for (const char* bad : {"", "nohost", "http://", "http://:80/x", "http://h:0/", "http://h:99999/",
                          "http://h:8x/", "http://[::1/x", "ht tp://h/"})
    EXPECT_FALSE(parse_url(bad)) << bad;
}

TEST(RedactUrl, DropsUserInfoQueryAndFragment) {
  EXPECT_EQ(redact_url("https://u:secret@h:1/p.tar?X-Amz-Signature=s&X-Amz-Credential=c#f"),
            "https://h:1/p.tar");
  EXPECT_EQ(redact_url("s3://b/k.tar"), "s3://b/k.tar");
  EXPECT_EQ(redact_url("http://h/a@b.tar"), "http://h/a@b.tar");  // '@' in the path stays
}

TEST(UriEncode, KeepsUnreservedCharactersAndOptionallySlashes) {
  EXPECT_EQ(uri_encode("a b/c~d_e-f.g", true), "a%20b/c~d_e-f.g");
  EXPECT_EQ(uri_encode("a b/c", false), "a%20b%2Fc");
  EXPECT_EQ(uri_encode("é+=&", false), "%C3%A9%2B%3D%26");
}

TEST(ContentRange, ParsesRangesAndRejectsNonsense) {
  auto r = parse_content_range("bytes 100-199/5000");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->first, 100u);
  EXPECT_EQ(r->last, 199u);
  EXPECT_EQ(r->total, 5000);
  auto star = parse_content_range(" bytes 0-0/*\r\n");
  ASSERT_TRUE(star);
  EXPECT_EQ(star->total, -1);
  for (const char* bad : {"", "bytes", "bytes */5000", "bytes 5-4/10", "bytes 0-9/9", "items 0-1/2",
                          "bytes -1-2/3", "bytes 0-99999999999999999999/1", "bytes 1-2/x"})
    EXPECT_FALSE(parse_content_range(bad)) << bad;
}

TEST(HttpTime, ReadsImfFixdateAndIso8601) {
  // 1994-11-06T08:49:37Z is 784111777 s after the epoch.
  EXPECT_EQ(parse_http_time("Sun, 06 Nov 1994 08:49:37 GMT"), int64_t{784111777} * 1000000000);
  EXPECT_EQ(parse_http_time("1994-11-06T08:49:37.000Z"), int64_t{784111777} * 1000000000);
  EXPECT_EQ(parse_http_time("1994-11-06T08:49:37Z"), int64_t{784111777} * 1000000000);
  for (const char* bad :
       {"", "yesterday", "Sun, 06 Nov 1994 08:49:37 PST", "Sun, 06 Foo 1994 08:49:37 GMT",
        "1994-13-06T08:49:37Z", "1994-11-06T08:49:37", "Sun, 06 Nov 1994 08:49:37 GMTx",
        "Sun, 06 Nov 9709 08:49:37 GMT"})  // past what int64 nanoseconds hold
    EXPECT_FALSE(parse_http_time(bad)) << bad;
}

TEST(HeaderLine, SplitsLowerCasedNameAndTrimmedValue) {
  std::string n, v;
  ASSERT_TRUE(split_header_line("Content-Range:  bytes 0-1/2 \r\n", &n, &v));
  EXPECT_EQ(n, "content-range");
  EXPECT_EQ(v, "bytes 0-1/2");
  EXPECT_FALSE(split_header_line("HTTP/1.1 206 Partial Content\r\n", &n, &v));
  EXPECT_FALSE(split_header_line("\r\n", &n, &v));
}

TEST(ResponseHead, ParsesStatusAndFieldsAndSaysWhenMoreIsNeeded) {
  const std::string head =
      "HTTP/1.1 206 Partial Content\r\nServer: nginx\r\nContent-Length: 100\r\n"
      "Content-Range: bytes 500-599/5000\r\nETag: W/\"abc\"\r\n"
      "Last-Modified: Sun, 06 Nov 1994 08:49:37 GMT\r\n\r\n";
  const std::string bytes = head + "BODYBYTES";
  ResponseHead h;
  for (size_t n = 0; n < head.size(); ++n)
    EXPECT_EQ(parse_response_head(bytes.data(), n, &h), 0) << "complete at " << n;
  ASSERT_EQ(parse_response_head(bytes.data(), bytes.size(), &h), 1);
  EXPECT_EQ(h.size, head.size());
  EXPECT_EQ(h.status, 206);
  EXPECT_EQ(h.minor_version, 1);
  EXPECT_EQ(h.fields.content_length, 100);
  ASSERT_TRUE(h.fields.content_range.has_value());
  EXPECT_EQ(h.fields.content_range->first, 500u);
  EXPECT_EQ(h.fields.content_range->total, 5000);
  EXPECT_EQ(h.fields.etag, "abc");
  EXPECT_EQ(h.fields.last_modified_ns, 784111777LL * 1000000000LL);
  EXPECT_FALSE(h.fields.transfer_encoding);
  EXPECT_TRUE(h.reusable());

  const std::string chunked =
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: Close\r\n\r\n";
  ASSERT_EQ(parse_response_head(chunked.data(), chunked.size(), &h), 1);
  EXPECT_EQ(h.status, 200);
  EXPECT_TRUE(h.fields.transfer_encoding);
  EXPECT_EQ(h.fields.content_length, -1);
  EXPECT_FALSE(h.reusable());

  // HTTP/1.0 closes after the body unless the server promises otherwise.
  const std::string old10 = "HTTP/1.0 404 Not Found\r\nContent-Length: 9\r\n\r\n";
  ASSERT_EQ(parse_response_head(old10.data(), old10.size(), &h), 1);
  EXPECT_EQ(h.status, 404);
  EXPECT_FALSE(h.reusable());
  const std::string kept = "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n";
  ASSERT_EQ(parse_response_head(kept.data(), kept.size(), &h), 1);
  EXPECT_TRUE(h.reusable());

  // Not a response head: refused as soon as the first bytes say so.
  for (std::string bad :
       {"HTTX", "SSH-2.0-OpenSSH\r\n\r\n", "HTTP/1.1 2x6 OK\r\n\r\n", "HTTP/1.1 2066 OK\r\n\r\n",
        "HTTP/1.1 20\r\n\r\n", "HTTP/1.x 200 OK\r\n\r\n"})
    EXPECT_EQ(parse_response_head(bad.data(), bad.size(), &h), -1) << bad;
  // Bare LF line ends: left to a more lenient reader (the client gives them to libcurl).
  const std::string lf = "HTTP/1.1 200 OK\nContent-Length: 3\n\nabc";
  EXPECT_EQ(parse_response_head(lf.data(), lf.size(), &h), -1);
  // A Content-Length that is not a plain number, or two that differ, is not usable.
  for (std::string bad : {"Content-Length: 12x\r\n", "Content-Length: +12\r\n",
                          "Content-Length: 99999999999999999999999\r\n",
                          "Content-Length: 12\r\nContent-Length: 13\r\n",
                          "Content-Length: 12\r\nContent-Length: x\r\nContent-Length: 12\r\n"}) {
    const std::string head = "HTTP/1.1 200 OK\r\n" + bad + "\r\n";
    ASSERT_EQ(parse_response_head(head.data(), head.size(), &h), 1) << bad;
    EXPECT_EQ(h.fields.content_length, -1) << bad;
    EXPECT_TRUE(h.fields.bad_length) << bad;
  }
  const std::string same = "HTTP/1.1 200 OK\r\nContent-Length: 12\r\nContent-Length: 12\r\n\r\n";
  ASSERT_EQ(parse_response_head(same.data(), same.size(), &h), 1);
  EXPECT_EQ(h.fields.content_length, 12);
  EXPECT_FALSE(h.fields.bad_length);
}

TEST(VersionStamp, ChangesWithTheETagAndKeepsTheSecond) {
  const int64_t t = int64_t{1700000000} * 1000000000;
  EXPECT_EQ(remote_version_stamp(t, ""), t);
  auto a = remote_version_stamp(t, "abc"), b = remote_version_stamp(t, "abd");
  EXPECT_NE(a, b);
  EXPECT_EQ(a / 1000000000, 1700000000);
  EXPECT_EQ(a, remote_version_stamp(t, "abc"));
}

TEST(Classify, RetriesTransientFailuresOnly) {
  EXPECT_EQ(classify(Transport::kOk, 200, ""), Verdict::kDone);
  EXPECT_EQ(classify(Transport::kOk, 206, ""), Verdict::kDone);
  for (long s : {408L, 429L, 500L, 502L, 503L, 504L})
    EXPECT_EQ(classify(Transport::kOk, s, ""), Verdict::kRetry) << s;
  for (long s : {400L, 401L, 403L, 404L, 410L, 416L, 501L})
    EXPECT_EQ(classify(Transport::kOk, s, ""), Verdict::kFail) << s;
  EXPECT_EQ(classify(Transport::kOk, 400, "SlowDown"), Verdict::kRetry);
  EXPECT_EQ(classify(Transport::kOk, 403, "AccessDenied"), Verdict::kFail);
  EXPECT_EQ(classify(Transport::kConnect, 0, ""), Verdict::kRetry);
  EXPECT_EQ(classify(Transport::kTimeout, 0, ""), Verdict::kRetry);
  EXPECT_EQ(classify(Transport::kBrokenBody, 200, ""), Verdict::kRetry);
  EXPECT_EQ(classify(Transport::kOther, 0, ""), Verdict::kFail);
}

TEST(Backoff, GrowsExponentiallyWithJitterUpToTheCap) {
  RetryPolicy p;
  p.backoff_base_ms = 100;
  p.backoff_max_ms = 1000;
  for (uint64_t r = 0; r < 200; ++r) {
    EXPECT_GE(backoff_ms(p, 1, r), 50u);
    EXPECT_LE(backoff_ms(p, 1, r), 100u);
    EXPECT_GE(backoff_ms(p, 3, r), 200u);
    EXPECT_LE(backoff_ms(p, 3, r), 400u);
    EXPECT_GE(backoff_ms(p, 30, r), 500u);
    EXPECT_LE(backoff_ms(p, 30, r), 1000u);
  }
  EXPECT_NE(backoff_ms(p, 3, 1), backoff_ms(p, 3, 2));  // jitter
  p.backoff_base_ms = 0;
  EXPECT_EQ(backoff_ms(p, 5, 7), 0u);
}

TEST(EnvU32, ReadsNumbersAndNamesTheBadVariable) {
  uint32_t v = 7;
  ::unsetenv("SY_TEST_ENV_U32");
  ASSERT_TRUE(env_u32("SY_TEST_ENV_U32", &v).is_ok());
  EXPECT_EQ(v, 7u);
  ::setenv("SY_TEST_ENV_U32", "42", 1);
  ASSERT_TRUE(env_u32("SY_TEST_ENV_U32", &v).is_ok());
  EXPECT_EQ(v, 42u);
  for (const char* bad : {"-1", "x", "12x", "99999999999"}) {
    ::setenv("SY_TEST_ENV_U32", bad, 1);
    Status st = env_u32("SY_TEST_ENV_U32", &v);
    ASSERT_FALSE(st.is_ok()) << bad;
    EXPECT_NE(st.message().find("SY_TEST_ENV_U32"), std::string::npos);
  }
  ::unsetenv("SY_TEST_ENV_U32");
}

}  // namespace
}  // namespace shardyard::io
