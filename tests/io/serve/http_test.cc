// Tests of io/serve/http.h on loopback: the server against http_get() and against raw
// sockets that send what a well-behaved client would not.
#include "io/serve/http.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>

namespace shardyard::io {
namespace {

// A blocking loopback socket whose reads give up after 10 s (no test can hang on it).
class RawClient {
 public:
  explicit RawClient(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{10, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~RawClient() { ::close(fd_); }
  bool connected() const { return connected_; }
  void send(const std::string& s) {
    ASSERT_EQ(::send(fd_, s.data(), s.size(), 0), ssize_t(s.size()));
  }
  // Everything until the server closes the connection (or 10 s pass).
  std::string read_all() {
    std::string out;
    char buf[4096];
    for (;;) {
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return out;
      out.append(buf, n);
    }
  }
  // At least `min` bytes (or what came before the server closed).
  std::string read_some(size_t min) {
    std::string out;
    char buf[4096];
    while (out.size() < min) {
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, n);
    }
    return out;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

class HttpTest : public ::testing::Test {
 protected:
  void start(HttpServerOptions options = {}) {
    auto s = HttpServer::start(options, [this](const HttpRequest& r) {
      ++calls_;
      if (r.path == "/boom") throw std::runtime_error("handler failed");
      if (r.path != "/hello") return HttpResponse{404, "text/plain", "no such page\n", {}};
      return HttpResponse{200, "text/plain", "hello " + r.query + "\n", {{"X-Test", "1"}}};
    });
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    server_ = std::move(s).value();
    ASSERT_GT(server_->port(), 0);
  }
  std::unique_ptr<HttpServer> server_;
  std::atomic<int> calls_{0};
};

TEST_F(HttpTest, AnswersGetThroughTheHandler) {
  start();
  auto r = http_get("127.0.0.1", server_->port(), "/hello?name=x", 5000);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello name=x\n");
  EXPECT_EQ(r->content_type, "text/plain");
  auto missing = http_get("localhost", server_->port(), "/nope", 5000);
  ASSERT_TRUE(missing.is_ok());
  EXPECT_EQ(missing->status, 404) << "an HTTP status is a response, not an error";
  auto boom = http_get("127.0.0.1", server_->port(), "/boom", 5000);
  ASSERT_TRUE(boom.is_ok());
  EXPECT_EQ(boom->status, 500);
  EXPECT_NE(boom->body.find("handler failed"), std::string::npos);
}

TEST_F(HttpTest, HeadSendsTheLengthAndNoBodyAndConnectionsStayOpen) {
  start();
  RawClient c(server_->port());
  ASSERT_TRUE(c.connected());
  c.send("HEAD /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string head = c.read_some(1);
  EXPECT_EQ(head.rfind("HTTP/1.1 200", 0), 0u) << head;
  EXPECT_NE(head.find("Content-Length: 7\r\n"), std::string::npos) << head;
  EXPECT_EQ(head.substr(head.find("\r\n\r\n") + 4), "") << "no body after HEAD";
  // The same connection serves the next request.
  c.send("GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  std::string get = c.read_all();
  EXPECT_NE(get.find("\r\n\r\nhello \n"), std::string::npos) << get;
  EXPECT_NE(get.find("X-Test: 1"), std::string::npos) << get;
}

TEST_F(HttpTest, RefusesBadRequestsWithTheirStatus) {
  start();
  const std::pair<std::string, std::string> cases[] = {
      {"NOT HTTP AT ALL\r\n\r\n", "HTTP/1.1 400"},
      {"DELETE /hello HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 405"},
      {"POST /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc", "HTTP/1.1 400"},
      {"GET /hello HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\n",
       "HTTP/1.1 431"},
      {"GET /hello HTTP/9.9\r\nHost: x\r\n\r\n", "HTTP/1.1 400"},
  };
  for (const auto& [request, expected] : cases) {
    RawClient c(server_->port());
    ASSERT_TRUE(c.connected());
    c.send(request);
    std::string answer = c.read_some(12);
    EXPECT_EQ(answer.rfind(expected, 0), 0u) << request.substr(0, 40) << " -> " << answer;
  }
  RawClient c(server_->port());
  c.send("DELETE / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_NE(c.read_all().find("Allow: GET, HEAD"), std::string::npos);
  EXPECT_EQ(calls_, 0) << "no bad request reached the handler";
}

TEST_F(HttpTest, KeepsServingAfterARefusalOnAKeptAliveConnection) {
  start();
  {
    RawClient c(server_->port());
    c.send("DELETE /status HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_EQ(c.read_some(12).rfind("HTTP/1.1 405", 0), 0u);
  }  // the client hangs up while the server waits for its next request
  for (int i = 0; i < 3; ++i) {
    auto r = http_get("127.0.0.1", server_->port(), "/hello", 5000);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->status, 200);
  }
}

TEST_F(HttpTest, DropsARequestThatNeverCompletes) {
  HttpServerOptions o;
  o.read_timeout_ms = 200;
  start(o);
  RawClient c(server_->port());
  ASSERT_TRUE(c.connected());
  c.send("GET /hel");
  EXPECT_EQ(c.read_all(), "") << "closed without an answer after the read timeout";
  auto r = http_get("127.0.0.1", server_->port(), "/hello", 5000);
  ASSERT_TRUE(r.is_ok()) << "the server still serves others";
}

TEST_F(HttpTest, StopClosesTheListenerAndOpenConnections) {
  start();
  const uint16_t port = server_->port();
  RawClient idle(port);
  ASSERT_TRUE(idle.connected());
  idle.send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(idle.read_some(1).rfind("HTTP/1.1 200", 0), 0u);
  server_->stop();
  server_->stop();  // idempotent
  EXPECT_EQ(idle.read_all(), "") << "a kept-alive connection is closed by stop()";
  auto r = http_get("127.0.0.1", port, "/hello", 2000);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("cannot connect"), std::string::npos) << r.status().message();
}

TEST_F(HttpTest, StartRefusesABusyPortAndABadAddress) {
  start();
  HttpServerOptions same;
  same.port = server_->port();
  auto busy = HttpServer::start(same, [](const HttpRequest&) { return HttpResponse{}; });
  ASSERT_FALSE(busy.is_ok());
  EXPECT_NE(busy.status().message().find("127.0.0.1:" + std::to_string(same.port)),
            std::string::npos)
      << busy.status().message();
  HttpServerOptions bad;
  bad.address = "localhost:80";
  auto refused = HttpServer::start(bad, [](const HttpRequest&) { return HttpResponse{}; });
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
}

TEST(HttpGet, GivesUpOnAServerThatNeverAnswers) {
  // A listening socket nobody accepts from: the connection completes, no answer comes.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  auto r = http_get("127.0.0.1", ntohs(a.sin_port), "/", 300);
  ::close(fd);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
}

TEST(HttpGet, ParsesHostAndPort) {
  auto hp = parse_host_port("127.0.0.1:9400");
  ASSERT_TRUE(hp.is_ok());
  EXPECT_EQ(hp->first, "127.0.0.1");
  EXPECT_EQ(hp->second, 9400);
  EXPECT_EQ(parse_host_port("[::1]:80")->first, "::1");
  EXPECT_EQ(parse_host_port(":81")->first, "127.0.0.1");
  for (const char* bad : {"", "host", "host:", "host:0", "host:65536", "host:8x", "h:123456"})
    EXPECT_FALSE(parse_host_port(bad).is_ok()) << bad;
}

}  // namespace
}  // namespace shardyard::io
