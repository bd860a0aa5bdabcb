// The only translation unit that includes Boost.Beast (it costs seconds of compile time per
// file that does): the server and the client of http.h.
#include "io/serve/http.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <thread>

#include "runtime/mutex.h"

namespace shardyard::io {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

// A request the parser refused: the status it earns, or 0 when the peer just went away.
int refusal_status(const beast::error_code& ec) {
  if (ec.category() != http::make_error_code(http::error::end_of_stream).category()) return 0;
  if (ec == http::error::end_of_stream || ec == http::error::partial_message) return 0;
  if (ec == http::error::header_limit) return 431;
  if (ec == http::error::body_limit) return 413;
  return 400;
}

HttpResponse plain(int status, std::string text) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(text) + "\n";
  return r;
}

}  // namespace

class HttpSession;

// What the server's thread works on (HttpServer::Impl is private to the class; sessions
// hold a pointer to this).
struct HttpServerCore {
  HttpServerOptions options;
  HttpHandler handler;
  std::string address;
  uint16_t port = 0;
  uint32_t connections = 0;  // ioc thread only
  // Declared before the io_context: sessions that the io_context destroys still find them.
  asio::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  asio::steady_timer retry{ioc};
  std::vector<std::weak_ptr<HttpSession>> sessions;  // ioc thread only
  std::thread thread;
  Mutex mu;
  CondVar ran_out;
  bool running SY_GUARDED_BY(mu) = false;
  bool stopped SY_GUARDED_BY(mu) = false;

  void accept();
  void close_all();
};

struct HttpServer::Impl : HttpServerCore {};

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket socket, HttpServerCore* server)
      : stream_(std::move(socket)), server_(server) {
    ++server_->connections;
  }
  ~HttpSession() { --server_->connections; }

  void start(bool overloaded) {
    if (overloaded) {
      reply(plain(503, "too many connections"), false, false);
      return;
    }
    read();
  }
  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
  }

 private:
  void read() {
    parser_.emplace();
    parser_->header_limit(server_->options.max_header_bytes);
    stream_.expires_after(std::chrono::milliseconds(server_->options.read_timeout_ms));
    http::async_read(stream_, buffer_, *parser_,
                     beast::bind_front_handler(&HttpSession::on_read, shared_from_this()));
  }

  void on_read(beast::error_code ec, size_t) {
    if (ec) {
      const int status = refusal_status(ec);
      if (status == 0) return close();  // gone, timed out or stopped: nothing to answer
      reply(plain(status, "bad request: " + ec.message()), false, false);
      return;
    }
    const auto& req = parser_->get();
    const bool keep = req.keep_alive();
    const bool head = req.method() == http::verb::head;
    if (req.method() != http::verb::get && !head) {
      HttpResponse r = plain(405, "method not allowed: only GET and HEAD");
      r.headers.emplace_back("Allow", "GET, HEAD");
      reply(std::move(r), keep, false);
      return;
    }
    HttpRequest request;
    request.method = std::string(req.method_string());
    request.target = std::string(req.target());
    const auto q = request.target.find('?');
    request.path = request.target.substr(0, q);
    if (q != std::string::npos) request.query = request.target.substr(q + 1);
    HttpResponse r;
    try {
      r = server_->handler(request);
    } catch (const std::exception& e) {
      r = plain(500, std::string("internal error: ") + e.what());
    } catch (...) {
      r = plain(500, "internal error");
    }
    reply(std::move(r), keep, head);
  }

  void reply(HttpResponse r, bool keep, bool head) {
    res_ = {};
    res_.version(11);
    res_.result(static_cast<unsigned>(r.status));
    res_.set(http::field::server, "shardyard");
    res_.set(http::field::content_type, r.content_type);
    res_.set(http::field::cache_control, "no-store");
    for (const auto& [k, v] : r.headers) res_.set(k, v);
    res_.body() = std::move(r.body);
    res_.prepare_payload();
    if (head) res_.body().clear();  // Content-Length still says how long GET's body is
    res_.keep_alive(keep);
    stream_.expires_after(std::chrono::milliseconds(server_->options.write_timeout_ms));
    http::async_write(stream_, res_,
                      [self = shared_from_this(), keep](beast::error_code ec, size_t) {
                        if (ec || !keep) return self->close();
                        self->read();
                      });
  }

  beast::tcp_stream stream_;
  HttpServerCore* server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::empty_body>> parser_;
  http::response<http::string_body> res_;
};

void HttpServerCore::accept() {
  acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;  // stopped
    if (ec) {
      // Out of descriptors or similar: try again a little later rather than spin.
      retry.expires_after(std::chrono::milliseconds(100));
      retry.async_wait([this](beast::error_code e) {
        if (!e) accept();
      });
      return;
    }
    auto session = std::make_shared<HttpSession>(std::move(socket), this);
    for (auto it = sessions.begin(); it != sessions.end();)
      it = it->expired() ? sessions.erase(it) : std::next(it);
    sessions.push_back(session);
    session->start(connections > options.max_connections);
    accept();
  });
}

void HttpServerCore::close_all() {
  beast::error_code ec;
  acceptor.close(ec);
  retry.cancel();
  for (auto& weak : sessions)
    if (auto s = weak.lock()) s->close();
  sessions.clear();
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() { stop(); }
uint16_t HttpServer::port() const { return impl_->port; }
const std::string& HttpServer::address() const { return impl_->address; }

Result<std::unique_ptr<HttpServer>> HttpServer::start(const HttpServerOptions& options,
                                                      HttpHandler handler) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->handler = std::move(handler);
  beast::error_code ec;
  auto addr = asio::ip::make_address(options.address, ec);
  if (ec)
    return invalid_argument("'" + options.address +
                            "' is not an IP address to listen on (give one such as 127.0.0.1)");
  const std::string where = options.address + ":" + std::to_string(options.port);
  tcp::endpoint endpoint(addr, options.port);
  auto& acceptor = impl->acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return unavailable("cannot listen on " + where + ": " + ec.message() +
                       (options.port ? " (choose another port, or 0 for a free one)" : ""));
  impl->address = options.address;
  impl->port = acceptor.local_endpoint().port();
  impl->accept();
  {
    MutexLock lock(&impl->mu);
    impl->running = true;
  }
  Impl* d = impl.get();
  impl->thread = std::thread([d] {
    try {
      d->ioc.run();
    } catch (...) {  // handlers catch their own; nothing should get here
    }
    MutexLock lock(&d->mu);
    d->running = false;
    d->ran_out.notify_all();
  });
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

void HttpServer::stop() {
  auto& d = *impl_;
  {
    MutexLock lock(&d.mu);
    if (d.stopped) return;
    d.stopped = true;
  }
  // Close the listener and every connection on the server's thread; run() then runs out of
  // work. A handler that does not return within the limit is not waited for by the loop.
  asio::post(d.ioc, [&d] { d.close_all(); });
  {
    MutexLock lock(&d.mu);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (d.running && std::chrono::steady_clock::now() < deadline)
      d.ran_out.wait_for(&d.mu, deadline - std::chrono::steady_clock::now());
  }
  d.ioc.stop();
  if (d.thread.joinable()) d.thread.join();
}

// ---- client ------------------------------------------------------------------------------

Result<HttpResponse> http_get(const std::string& host, uint16_t port, const std::string& target,
                              uint32_t timeout_ms, size_t max_body_bytes) {
  const std::string url = "http://" + host + ":" + std::to_string(port) + target;
  asio::io_context ioc{1};
  tcp::resolver resolver(ioc);
  beast::tcp_stream stream(ioc);
  beast::flat_buffer buffer;
  http::request<http::empty_body> req{http::verb::get, target, 11};
  req.set(http::field::host, host + ":" + std::to_string(port));
  req.set(http::field::user_agent, "shardyard");
  http::response_parser<http::string_body> parser;
  parser.body_limit(max_body_bytes);
  std::optional<Status> failed;
  bool done = false;
  auto fail = [&](const char* step, const beast::error_code& ec) {
    failed = unavailable("GET " + url + ": " + step + ": " + ec.message());
  };
  const auto timeout = std::chrono::milliseconds(timeout_ms);
  resolver.async_resolve(
      host, std::to_string(port), [&](beast::error_code ec, tcp::resolver::results_type results) {
        if (ec) return fail("cannot resolve the host", ec);
        stream.expires_after(timeout);
        stream.async_connect(results, [&](beast::error_code ec, const tcp::endpoint&) {
          if (ec) return fail("cannot connect", ec);
          http::async_write(stream, req, [&](beast::error_code ec, size_t) {
            if (ec) return fail("cannot send the request", ec);
            http::async_read(stream, buffer, parser, [&](beast::error_code ec, size_t) {
              if (ec) return fail("no complete response", ec);
              done = true;
            });
          });
        });
      });
  ioc.run_for(timeout);
  if (failed) return *failed;
  if (!done)
    return unavailable("GET " + url + ": no response within " + std::to_string(timeout_ms) + " ms");
  const auto& res = parser.get();
  HttpResponse out;
  out.status = static_cast<int>(res.result_int());
  out.content_type = std::string(res[http::field::content_type]);
  out.body = res.body();
  return out;
}

Result<std::pair<std::string, uint16_t>> parse_host_port(const std::string& text) {
  const auto bad = [&] {
    return invalid_argument("'" + text + "' is not HOST:PORT (for example 127.0.0.1:9400)");
  };
  const auto colon = text.rfind(':');
  if (colon == std::string::npos) return bad();
  std::string host = text.substr(0, colon);
  const std::string port_text = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (host.empty()) host = "127.0.0.1";
  if (port_text.empty() || port_text.size() > 5 ||
      port_text.find_first_not_of("0123456789") != std::string::npos)
    return bad();
  const long port = std::strtol(port_text.c_str(), nullptr, 10);
  if (port < 1 || port > 65535) return bad();
  return std::make_pair(host, static_cast<uint16_t>(port));
}

}  // namespace shardyard::io
