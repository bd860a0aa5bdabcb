// A small HTTP/1.1 server and client for the job's monitoring endpoints (/metrics and
// /status, docs/monitor.md), on Boost.Beast and Asio. Beast appears only in http.cc.
//
// HttpServer listens on one address (loopback unless told otherwise) and answers every
// request on a thread of its own with the caller's handler: the job never waits on a
// client, and a client never waits on the job longer than the handler takes (it must not
// block). Only GET and HEAD reach the handler; other methods get 405, a malformed request
// 400, oversized headers 431, a body 400, and a request that does not arrive whole within
// read_timeout_ms is dropped. Connections beyond max_connections get 503. Keep-alive is
// honoured. stop() closes the listener and every connection and joins the thread; the
// destructor calls it.
//
// http_get() is the matching client (the monitor command): one GET with a deadline over
// the whole exchange (resolve, connect, send, receive).
//
// Thread-safe: an HttpServer may be stopped from any thread; the handler runs on the
// server's thread only, one request at a time. http_get() is reentrant.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/status.h"

namespace shardyard::io {

struct HttpRequest {
  std::string method;  // "GET" or "HEAD"
  std::string target;  // as sent: path and query
  std::string path;    // target up to '?'
  std::string query;   // after '?', or empty
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // more header fields
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

struct HttpServerOptions {
  std::string address = "127.0.0.1";  // an IPv4 or IPv6 address; 0.0.0.0 listens everywhere
  uint16_t port = 0;                  // 0: a free port (HttpServer::port() says which)
  uint32_t read_timeout_ms = 10000;   // a request must arrive whole within this
  uint32_t write_timeout_ms = 10000;  // and its response be taken within this
  uint32_t max_connections = 32;
  uint32_t max_header_bytes = 8192;
};

class HttpServer {
 public:
  // Binds and starts serving; an address that does not parse or a port in use fails here.
  static Result<std::unique_ptr<HttpServer>> start(const HttpServerOptions& options,
                                                   HttpHandler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  uint16_t port() const;
  const std::string& address() const;
  void stop();  // idempotent

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// GET http://host:port/target. kUnavailable when the server cannot be reached or the
// deadline passes (the message says which); any HTTP status is a response, not an error.
Result<HttpResponse> http_get(const std::string& host, uint16_t port, const std::string& target,
                              uint32_t timeout_ms, size_t max_body_bytes = 64u << 20);

// "host:port", "[v6]:port" or ":port" (host 127.0.0.1) into its parts.
Result<std::pair<std::string, uint16_t>> parse_host_port(const std::string& text);

}  // namespace shardyard::io
