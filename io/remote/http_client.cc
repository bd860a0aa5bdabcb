#include "io/remote/http_client.h"

#include <curl/curl.h>
#include <dlfcn.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <random>
#include <system_error>
#include <thread>
#include <vector>

#include "io/remote/s3_listing.h"

namespace shardyard::io {

namespace {

// libcurl, loaded at the first request instead of at process start. Linked, it and the
// two dozen libraries it pulls in (Kerberos, LDAP, GnuTLS for RTMP, SSH, ...) cost every
// shardyard process about 7 ms of symbol binding before main, worker processes and runs
// over local files included (docs/performance.md, "Large samples read into the batch").
// `SHARDYARD_LIBCURL` names another build of it (same ABI: libcurl.so.4).
struct CurlLib {
  CURLcode (*global_init)(long) = nullptr;
  CURL* (*easy_init)() = nullptr;
  void (*easy_reset)(CURL*) = nullptr;
  void (*easy_cleanup)(CURL*) = nullptr;
  CURLcode (*easy_setopt)(CURL*, CURLoption, ...) = nullptr;
  CURLcode (*easy_perform)(CURL*) = nullptr;
  const char* (*easy_strerror)(CURLcode) = nullptr;
  curl_slist* (*slist_append)(curl_slist*, const char*) = nullptr;
  void (*slist_free_all)(curl_slist*) = nullptr;
  std::string error;  // why it is not usable; empty when it is

  bool ok() const { return error.empty(); }
};

// Points *fn at `name` in `lib`; names the first symbol missing in *error.
template <typename Fn>
void bind_symbol(void* lib, const char* name, Fn* fn, std::string* error) {
  *fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (*fn == nullptr && error->empty()) *error = std::string("it has no ") + name;
}

CurlLib load_curl() {
  CurlLib c;
  const char* named = std::getenv("SHARDYARD_LIBCURL");
  const std::string path = named != nullptr && *named != '\0' ? named : "libcurl.so.4";
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    c.error = "HTTP and S3 sources need libcurl, which could not be loaded (" +
              std::string(why != nullptr ? why : path) +
              "): install the Debian package libcurl4, or name the library in SHARDYARD_LIBCURL";
    return c;
  }
  std::string missing;
  bind_symbol(lib, "curl_global_init", &c.global_init, &missing);
  bind_symbol(lib, "curl_easy_init", &c.easy_init, &missing);
  bind_symbol(lib, "curl_easy_reset", &c.easy_reset, &missing);
  bind_symbol(lib, "curl_easy_cleanup", &c.easy_cleanup, &missing);
  bind_symbol(lib, "curl_easy_setopt", &c.easy_setopt, &missing);
  bind_symbol(lib, "curl_easy_perform", &c.easy_perform, &missing);
  bind_symbol(lib, "curl_easy_strerror", &c.easy_strerror, &missing);
  bind_symbol(lib, "curl_slist_append", &c.slist_append, &missing);
  bind_symbol(lib, "curl_slist_free_all", &c.slist_free_all, &missing);
  if (!missing.empty()) {
    c.error = path + " is not a usable libcurl: " + missing;
  } else if (c.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    c.error = path + ": curl_global_init failed";
  }
  // Never unloaded: its easy handles live until their threads end.
  return c;
}

const CurlLib& curl() {
  static const CurlLib* lib = new CurlLib(load_curl());  // never destroyed: see load_curl
  return *lib;
}

// The calling thread's easy handle: it owns the connections it has opened and keeps them
// alive between requests (curl_easy_reset keeps the connection cache). Its sockets are
// followed from open to close, also when curl_easy_cleanup closes them: curl reports no
// socket while a transfer runs (CURLINFO_ACTIVESOCKET is -1 then). Usually one: a
// connection per server.
struct ThreadHandle {
  CURL* h = nullptr;
  std::vector<curl_socket_t> sockets;
  ~ThreadHandle() {
    if (h) curl().easy_cleanup(h);
  }
};

ThreadHandle& thread_state() {
  thread_local ThreadHandle handle;
  return handle;
}

int on_socket_open(void*, curl_socket_t fd, curlsocktype purpose) {
  auto& sockets = thread_state().sockets;
  // A number seen before is a socket closed without our callback whose number came back.
  if (purpose == CURLSOCKTYPE_IPCXN &&
      std::find(sockets.begin(), sockets.end(), fd) == sockets.end())
    sockets.push_back(fd);
  return CURL_SOCKOPT_OK;
}

int on_socket_close(void*, curl_socket_t fd) {
  auto& sockets = thread_state().sockets;
  sockets.erase(std::remove(sockets.begin(), sockets.end(), fd), sockets.end());
  return ::close(fd);
}

// Acknowledge what has arrived at once instead of after the delayed-ACK timer (40 ms on
// Linux). A server that sends with Nagle's algorithm on (nginx with `tcp_nopush on`
// uncorks without TCP_NODELAY) holds the last partial segment of a response until the
// segment before it is acknowledged; a delayed ACK then costs a ranged response 40 ms.
// Quick-ACK mode is not sticky (the kernel leaves it again), so it is asked for on every
// piece of body that arrives; on a socket that is not TCP the call fails and is ignored.
void ack_now() {
  const int one = 1;
  for (curl_socket_t fd : thread_state().sockets)
    (void)::setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
}

// The calling thread's easy handle, reset for a new request; null when libcurl is not
// usable or has no memory for a handle.
CURL* thread_handle() {
  const CurlLib& c = curl();
  if (!c.ok()) return nullptr;
  ThreadHandle& handle = thread_state();
  if (handle.h == nullptr) {
    handle.h = c.easy_init();
    if (handle.h == nullptr) return nullptr;
  } else {
    c.easy_reset(handle.h);
  }
  c.easy_setopt(handle.h, CURLOPT_SOCKOPTFUNCTION, on_socket_open);
  c.easy_setopt(handle.h, CURLOPT_CLOSESOCKETFUNCTION, on_socket_close);
  return handle.h;
}

std::atomic<bool> g_cancelled{false};

// All attempts of one request and the waits between them end by this time.
class Deadline {
 public:
  using clock = std::chrono::steady_clock;
  explicit Deadline(uint32_t seconds)
      : seconds_(seconds), end_(clock::now() + std::chrono::seconds(seconds)) {}
  static Deadline none() { return Deadline(0, clock::time_point::max()); }
  long remaining_ms() const {
    if (end_ == clock::time_point::max()) return 0;  // 0: no limit, for curl
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(end_ - clock::now()).count();
    return std::max<long>(1, static_cast<long>(ms));
  }
  bool expired() const { return clock::now() >= end_; }
  uint32_t seconds() const { return seconds_; }

 private:
  Deadline(uint32_t s, clock::time_point end) : seconds_(s), end_(end) {}
  uint32_t seconds_;
  clock::time_point end_;
};

uint64_t thread_random() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

// One attempt: where the body goes and what the response said.
struct Transfer {
  // Sink: a fixed buffer (dst, cap) or a growing string (body, body_max).
  char* dst = nullptr;
  size_t cap = 0;
  std::string* body = nullptr;
  size_t body_max = 0;
  size_t got = 0;
  bool ranged = false;
  uint64_t range_at = 0;  // the first byte asked for
  uint64_t skip = 0;      // bytes still to drop (a 200 answer to a ranged request)
  bool checked = false;   // the first body byte has been seen
  bool full = false;      // we ended the transfer: the buffer is full
  bool bad_range = false;
  bool too_big = false;
  // A 200 to a range that is not the whole object ends the transfer (the caller reads such
  // an object another way) instead of skipping to the range.
  bool refuse_whole = false;
  bool range_ignored = false;
  const BodySink* sink = nullptr;           // streamed: the body goes here, not to dst
  const std::atomic<bool>* stop = nullptr;  // set by the stream's owner: abort
  bool sink_stopped = false;
  // Response.
  long status = 0;
  std::string error_body;
  ResponseFields fields;
  std::string transport_error;  // why a transfer made without libcurl failed
};

// Called by curl about once a second and on every chunk: a non-zero answer aborts.
int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  const auto* t = static_cast<const Transfer*>(user);
  if (t->stop != nullptr && t->stop->load(std::memory_order_relaxed)) return 1;
  return g_cancelled.load(std::memory_order_relaxed) ? 1 : 0;
}

size_t on_header(char* data, size_t size, size_t nitems, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * nitems;
  std::string line(data, n);
  if (line.rfind("HTTP/", 0) == 0) {  // a new response (after a redirect or a 100)
    auto sp = line.find(' ');
    t->status = sp == std::string::npos ? 0 : std::strtol(line.c_str() + sp + 1, nullptr, 10);
    t->fields = ResponseFields{};
    return n;
  }
  std::string name, value;
  if (split_header_line(line, &name, &value)) note_response_field(name, value, &t->fields);
  return n;
}

size_t on_body(char* data, size_t size, size_t nmemb, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t n = size * nmemb;
  ack_now();
  const bool success = t->status >= 200 && t->status < 300;
  if (!success) {  // keep the start of an error body: S3 puts its error code there
    size_t keep = std::min(n, size_t{8192} - std::min<size_t>(8192, t->error_body.size()));
    t->error_body.append(data, keep);
    return n;
  }
  if (!t->checked) {
    t->checked = true;
    if (t->ranged && t->status == 206) {
      if (!t->fields.content_range || t->fields.content_range->first != t->range_at) {
        t->bad_range = true;
        return 0;  // aborts the transfer
      }
    } else if (t->ranged && t->status == 200) {
      if (t->refuse_whole) {
        t->range_ignored = true;
        return 0;  // aborts the transfer: not the whole object again for every range
      }
      t->skip = t->range_at;  // the server ignored Range: drop what comes before
    }
  }
  size_t consumed = 0;
  if (t->skip > 0) {
    size_t drop = static_cast<size_t>(std::min<uint64_t>(t->skip, n));
    t->skip -= drop;
    consumed = drop;
  }
  size_t rest = n - consumed;
  if (t->sink) {
    size_t take = std::min(rest, t->cap - t->got);
    if (take > 0 && !(*t->sink)(data + consumed, take)) {
      t->sink_stopped = true;
      return 0;
    }
    t->got += take;
    if (take < rest) {
      t->full = true;
      return consumed + take;
    }
    return n;
  }
  if (t->body) {
    if (t->body->size() + rest > t->body_max) {
      t->too_big = true;
      return 0;
    }
    t->body->append(data + consumed, rest);
    t->got += rest;
    return n;
  }
  size_t take = std::min(rest, t->cap - t->got);
  std::memcpy(t->dst + t->got, data + consumed, take);
  t->got += take;
  if (take < rest) {
    t->full = true;
    return consumed + take;  // short: curl stops, we have all we asked for
  }
  return n;
}

Transport transport_of(CURLcode res, const Transfer& t) {
  switch (res) {
    case CURLE_OK:
      return Transport::kOk;
    case CURLE_WRITE_ERROR:
      return t.full ? Transport::kOk : Transport::kOther;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_SSL_CONNECT_ERROR:
      return Transport::kConnect;
    case CURLE_OPERATION_TIMEDOUT:
      return Transport::kTimeout;
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return Transport::kBrokenBody;
    default:
      return Transport::kOther;
  }
}

struct Call {
  const char* method;
  const std::string& url;
  const RequestSigner* signer;
  std::string range;  // header value, or empty
};

// ---- Ranged GETs of http:// URLs without libcurl ----
//
// libcurl receives a body into its own buffer and hands it to on_body 16 KiB at a time:
// every byte was copied once more, and its transfer loop polled the socket and asked for a
// quick ACK for each piece (docs/performance.md, "Remote sources"). A ranged GET of a plain
// http:// URL into the caller's memory (a read-ahead block, a batch column) is made here
// instead: one request on a connection the calling thread keeps alive, and the body
// received straight into its destination. What is not a plain answer (a redirect, a body
// without a Content-Length, a 200 to a range that the caller wants skipped, a head this
// parser does not read) closes the connection and is asked again through libcurl, as is
// every other request (HEAD, https, listings, streamed bodies, URLs with credentials) and
// every request while a proxy is set in the environment.
// SHARDYARD_HTTP_DIRECT=0 sends everything through libcurl.

bool direct_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("SHARDYARD_HTTP_DIRECT");
    if (v != nullptr && std::strcmp(v, "0") == 0) return false;
    for (const char* proxy : {"http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"}) {
      const char* p = std::getenv(proxy);
      if (p != nullptr && *p != '\0') return false;  // libcurl knows proxies; we do not
    }
    return true;
  }();
  return on;
}

// Whether this path can send the request for `text`: libcurl takes URLs with credentials
// (user:password@, sent as Basic authentication) and refuses ones with control characters.
bool direct_can_send(const std::string& text, const Url& url) {
  const size_t authority = text.find("://") + 3;
  const size_t authority_end = text.find_first_of("/?#", authority);
  if (text.substr(authority, authority_end - authority).find('@') != std::string::npos)
    return false;
  for (const std::string* part : {&url.path, &url.query})
    for (unsigned char c : *part)
      if (c <= ' ' || c == 0x7f) return false;
  return true;
}

// One kept-alive connection of the calling thread.
struct DirectConn {
  std::string host;
  int port = 0;
  int fd = -1;
  void close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  ~DirectConn() { close(); }
};

// The calling thread's connections, one per server (a few at most).
std::vector<std::unique_ptr<DirectConn>>& direct_conns() {
  thread_local std::vector<std::unique_ptr<DirectConn>> conns;
  return conns;
}

DirectConn& direct_conn(const std::string& host, int port) {
  auto& conns = direct_conns();
  for (auto& c : conns)
    if (c->port == port && c->host == host) return *c;
  if (conns.size() >= 8) conns.erase(conns.begin());  // the oldest server goes
  conns.push_back(std::make_unique<DirectConn>());
  conns.back()->host = host;
  conns.back()->port = port;
  return *conns.back();
}

enum class Wait { kReady, kTimeout, kCancelled, kError };

// Waits until `fd` is ready for `events`, in slices that notice a cancel, never past the
// deadline nor past `until` (the end of the low-speed window).
Wait wait_for(int fd, short events, const Deadline& deadline, const Transfer& t,
              std::chrono::steady_clock::time_point until) {
  for (;;) {
    if (g_cancelled.load(std::memory_order_relaxed) ||
        (t.stop != nullptr && t.stop->load(std::memory_order_relaxed)))
      return Wait::kCancelled;
    const auto now = std::chrono::steady_clock::now();
    if (now >= until || deadline.expired()) return Wait::kTimeout;
    long ms = std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count() + 1;
    if (deadline.remaining_ms() > 0) ms = std::min(ms, deadline.remaining_ms());
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, static_cast<int>(std::clamp<long>(ms, 1, 200)));
    if (r > 0) return (p.revents & (events | POLLHUP | POLLERR)) ? Wait::kReady : Wait::kError;
    if (r < 0 && errno != EINTR) return Wait::kError;
  }
}

// The connect timeout; 0 is libcurl's default of 300 s, as for CURLOPT_CONNECTTIMEOUT_MS.
std::chrono::milliseconds connect_timeout(const HttpOptions& o) {
  return std::chrono::milliseconds(o.connect_timeout_ms > 0 ? o.connect_timeout_ms : 300000);
}

// Resolves host:port (SOCK_STREAM addresses) within the connect timeout, the deadline and a
// cancel: an IP address at once, a name on a thread of its own, which a caller that stops
// waiting leaves to finish alone (not getaddrinfo_a: its resolver threads are made inside
// glibc, out of sight of the sanitizers' thread interceptors). 0, or a gai error code
// (EAI_AGAIN when the time ran out, EAI_CANCELED when cancelled).
int resolve(const HttpOptions& o, const std::string& host, const std::string& service,
            const Deadline& deadline, const Transfer& t, addrinfo** found) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST;
  if (::getaddrinfo(host.c_str(), service.c_str(), &hints, found) == 0) return 0;
  hints.ai_flags = 0;
  struct Lookup {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;           // guarded by mu
    bool abandoned = false;      // guarded by mu: the result is the thread's to free
    int rc = 0;                  // guarded by mu
    addrinfo* result = nullptr;  // guarded by mu
  };
  auto l = std::make_shared<Lookup>();
  try {
    std::thread([l, host, service, hints] {
      addrinfo* r = nullptr;
      const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &r);
      std::lock_guard<std::mutex> lock(l->mu);
      if (l->abandoned) {
        if (rc == 0) ::freeaddrinfo(r);
        return;
      }
      l->rc = rc;
      l->result = rc == 0 ? r : nullptr;
      l->done = true;
      l->cv.notify_all();
    }).detach();
  } catch (const std::system_error&) {
    return EAI_SYSTEM;  // no thread to be had
  }
  const auto until = std::chrono::steady_clock::now() + connect_timeout(o);
  std::unique_lock<std::mutex> lock(l->mu);
  for (;;) {
    if (l->done) {
      *found = l->result;
      return l->rc;
    }
    const bool cancelled = g_cancelled.load(std::memory_order_relaxed) ||
                           (t.stop != nullptr && t.stop->load(std::memory_order_relaxed));
    if (cancelled || deadline.expired() || std::chrono::steady_clock::now() >= until) {
      l->abandoned = true;
      return cancelled ? EAI_CANCELED : EAI_AGAIN;
    }
    l->cv.wait_for(lock, std::chrono::milliseconds(100));
  }
}

// Opens a connection to host:port, each address within the connect timeout; -1 with *res
// set on failure.
int direct_connect(const HttpOptions& o, const Url& url, int port, const Deadline& deadline,
                   Transfer* t, CURLcode* res) {
  // An IPv6 literal keeps its brackets in Url::host.
  const std::string host = url.host.size() > 2 && url.host.front() == '['
                               ? url.host.substr(1, url.host.size() - 2)
                               : url.host;
  const std::string service = std::to_string(port);
  addrinfo* found = nullptr;
  if (int e = resolve(o, host, service, deadline, *t, &found); e != 0) {
    t->transport_error =
        "could not resolve host " + host + " (" +
        (e == EAI_AGAIN ? "no answer within the connect timeout" : std::string(gai_strerror(e))) +
        ")";
    *res = e == EAI_CANCELED ? CURLE_ABORTED_BY_CALLBACK : CURLE_COULDNT_RESOLVE_HOST;
    return -1;
  }
  int fd = -1, err = 0;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    int r = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (r != 0 && errno == EINPROGRESS) {
      const Wait w = wait_for(fd, POLLOUT, deadline, *t,
                              std::chrono::steady_clock::now() + connect_timeout(o));
      socklen_t len = sizeof err;
      if (w == Wait::kTimeout) {
        err = ETIMEDOUT;
      } else if (w == Wait::kCancelled) {
        err = ECANCELED;
      } else if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
        err = errno;
      } else if (err == 0) {
        r = 0;
      }
    } else if (r != 0) {
      err = errno;
    }
    if (r != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) {
    t->transport_error =
        "could not connect to " + host + " port " + service + " (" + std::strerror(err) + ")";
    *res = err == ECANCELED ? CURLE_ABORTED_BY_CALLBACK : CURLE_COULDNT_CONNECT;
    return -1;
  }
  const int one = 1;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  (void)::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  return fd;
}

// Moves bytes from or to a connection, noticing a stall: fewer than low_speed_bytes_per_s
// over low_speed_time_s ends the attempt (CURLE_OPERATION_TIMEDOUT), as libcurl's
// low-speed limit does; so do the deadline and a cancel.
class DirectIo {
 public:
  DirectIo(const HttpOptions& o, const Deadline& deadline, const Transfer& t, int fd)
      : o_(o), deadline_(deadline), t_(t), fd_(fd) {
    start_window();
  }
  // Sends all of `data`; false with *res set on failure.
  bool send_all(const std::string& data, CURLcode* res) {
    for (size_t at = 0; at < data.size();) {
      ssize_t r = ::send(fd_, data.data() + at, data.size() - at, MSG_NOSIGNAL);
      if (r > 0) {
        at += static_cast<size_t>(r);
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (!wait(POLLOUT, res)) return false;
        continue;
      }
      *res = CURLE_SEND_ERROR;
      return false;
    }
    return true;
  }
  // Receives up to n bytes (at least 1); 0 at the end of the stream; -1 with *res set.
  ssize_t recv_some(void* dst, size_t n, CURLcode* res) {
    for (;;) {
      if (g_cancelled.load(std::memory_order_relaxed)) {  // a body that keeps coming, too
        *res = CURLE_ABORTED_BY_CALLBACK;
        return -1;
      }
      ssize_t r = ::recv(fd_, dst, n, 0);
      if (r > 0) {
        window_bytes_ += static_cast<uint64_t>(r);
        return r;
      }
      if (r == 0) return 0;
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        *res = CURLE_RECV_ERROR;
        return -1;
      }
      if (!wait(POLLIN, res)) return -1;
    }
  }

 private:
  void start_window() {
    window_end_ = std::chrono::steady_clock::now() + std::chrono::seconds(o_.low_speed_time_s);
    window_bytes_ = 0;
  }
  bool wait(short events, CURLcode* res) {
    for (;;) {
      switch (wait_for(fd_, events, deadline_, t_, window_end_)) {
        case Wait::kReady:
          return true;
        case Wait::kCancelled:
          *res = CURLE_ABORTED_BY_CALLBACK;
          return false;
        case Wait::kError:
          *res = events == POLLOUT ? CURLE_SEND_ERROR : CURLE_RECV_ERROR;
          return false;
        case Wait::kTimeout:
          if (!deadline_.expired() &&
              window_bytes_ >= uint64_t{o_.low_speed_bytes_per_s} * o_.low_speed_time_s) {
            start_window();  // fast enough over the window that ended: a new one
            continue;
          }
          *res = CURLE_OPERATION_TIMEDOUT;
          return false;
      }
    }
  }

  const HttpOptions& o_;
  const Deadline& deadline_;
  const Transfer& t_;
  int fd_;
  std::chrono::steady_clock::time_point window_end_;
  uint64_t window_bytes_ = 0;
};

// Acknowledges at once what has arrived on `fd` (see ack_now).
void ack_fd(int fd) {
  const int one = 1;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
}

// A large body's destination is often fresh memory (a new read-ahead block, a batch column).
// Received into as it is, each of its pages is faulted in inside recv, with the socket
// locked, and the sender waits meanwhile: on the large-sample set over nginx on loopback
// that was slower than libcurl's copy out of its warm buffer (0.40 s against 0.35 s a run).
// Its whole pages are made present first, in one call (MADV_POPULATE_WRITE, Linux 5.14;
// where it is missing the call fails and the pages fault in as before).
constexpr size_t kPrefaultBytes = 256u << 10;

void prefault(char* dst, size_t n) {
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t a = (reinterpret_cast<uintptr_t>(dst) + page - 1) & ~(page - 1);
  const uintptr_t b = (reinterpret_cast<uintptr_t>(dst) + n) & ~(page - 1);
  if (b > a) (void)::madvise(reinterpret_cast<void*>(a), b - a, MADV_POPULATE_WRITE);
}

// The request's bytes: GET with Range, the signer's headers, nothing else.
std::string direct_request(const Call& call, const Url& url, int port) {
  std::string host = url.host;  // an IPv6 literal with its brackets
  if (port != 80) host += ":" + std::to_string(port);
  std::string r = "GET " + url.path + (url.query.empty() ? "" : "?" + url.query) +
                  " HTTP/1.1\r\nHost: " + host + "\r\nAccept: */*\r\n";
  if (!call.range.empty()) r += "Range: " + call.range + "\r\n";
  if (call.signer)
    for (const auto& line : call.signer->headers(call.method, url, call.range)) r += line + "\r\n";
  return r + "\r\n";
}

enum class Direct { kDone, kUseCurl };

// One attempt of a ranged GET into t->dst. kUseCurl: the answer needs libcurl (nothing was
// written to t->dst, t is as it was).
Direct direct_get(const HttpOptions& o, const Call& call, const Url& url, Transfer* t,
                  const Deadline& deadline, CURLcode* res) {
  const int port = url.port != 0 ? url.port : 80;
  DirectConn& conn = direct_conn(url.host, port);
  const std::string request = direct_request(call, url, port);
  std::string head;
  ResponseHead h;
  *res = CURLE_OK;
  // A kept-alive connection the server has closed meanwhile fails at once: a second try on
  // a new connection.
  for (int attempt = 0;; ++attempt) {
    const bool reused = conn.fd >= 0;
    if (!reused) {
      conn.fd = direct_connect(o, url, port, deadline, t, res);
      if (conn.fd < 0) return Direct::kDone;
    }
    DirectIo io(o, deadline, *t, conn.fd);
    head.clear();
    *res = CURLE_OK;
    int parsed = 0;
    bool sent = io.send_all(request, res);
    while (sent && parsed == 0) {
      char buf[4096];
      ssize_t r = io.recv_some(buf, sizeof buf, res);
      if (r <= 0) {
        if (r == 0) *res = head.empty() ? CURLE_GOT_NOTHING : CURLE_RECV_ERROR;
        break;
      }
      head.append(buf, static_cast<size_t>(r));
      parsed = parse_response_head(head.data(), head.size(), &h);
      if (parsed == 0 && head.size() > (64u << 10)) parsed = -1;
    }
    if (parsed == 1) break;
    conn.close();
    if (parsed < 0) return Direct::kUseCurl;  // libcurl reads it, or says what is wrong
    const bool stale =
        reused && head.empty() &&
        (*res == CURLE_GOT_NOTHING || *res == CURLE_RECV_ERROR || *res == CURLE_SEND_ERROR);
    if (!stale || attempt > 0) {
      if (t->transport_error.empty())
        t->transport_error =
            *res == CURLE_OPERATION_TIMEDOUT ? "no answer in time" : "the connection broke";
      return Direct::kDone;
    }
  }
  const ResponseFields& f = h.fields;
  const bool success = h.status >= 200 && h.status < 300;
  // A 200 to a range: the whole object. Its body is what was asked when the range starts at
  // byte 0; the caller may also refuse it (below).
  const bool whole = h.status == 200 && (t->refuse_whole || t->range_at == 0);
  // What libcurl has to take: redirects (it follows them), interim answers, bodies whose
  // length the head does not give, a 200 whose leading bytes must be skipped.
  if ((h.status >= 300 && h.status < 400) || h.status < 200 || f.transfer_encoding ||
      f.content_length < 0 || f.bad_length || (success && h.status != 206 && !whole)) {
    conn.close();
    return Direct::kUseCurl;
  }
  t->status = h.status;
  t->fields = f;
  DirectIo io(o, deadline, *t, conn.fd);
  const uint64_t length = static_cast<uint64_t>(f.content_length);
  const char* early = head.data() + h.size;  // body bytes that came with the head
  const size_t early_n = head.size() - h.size;
  if (!success) {  // keep the start of an error body (S3 puts its error code there)
    uint64_t left = length;
    size_t take = static_cast<size_t>(std::min<uint64_t>(early_n, left));
    t->error_body.assign(early, std::min<size_t>(take, 8192));
    left -= take;
    char buf[8192];
    while (left > 0 && left <= (1u << 20)) {
      ssize_t r = io.recv_some(buf, static_cast<size_t>(std::min<uint64_t>(left, sizeof buf)), res);
      if (r <= 0) break;
      size_t keep = std::min<size_t>(static_cast<size_t>(r), 8192 - t->error_body.size());
      t->error_body.append(buf, keep);
      left -= static_cast<uint64_t>(r);
    }
    *res = CURLE_OK;  // the status is the outcome
    if (left > 0 || early_n > length || !h.reusable()) conn.close();
    return Direct::kDone;
  }
  t->checked = true;
  if (h.status == 200 && t->refuse_whole) {  // not the whole object again for every range
    t->range_ignored = true;
    conn.close();
    *res = CURLE_WRITE_ERROR;
    return Direct::kDone;
  }
  if (h.status == 206 && (!f.content_range || f.content_range->first != t->range_at)) {
    t->bad_range = true;
    conn.close();
    *res = CURLE_WRITE_ERROR;
    return Direct::kDone;
  }
  const size_t want = static_cast<size_t>(std::min<uint64_t>(length, t->cap));
  if (want >= kPrefaultBytes) prefault(t->dst, want);
  size_t got = std::min(early_n, want);
  std::memcpy(t->dst, early, got);
  while (got < want) {
    ssize_t r = io.recv_some(t->dst + got, want - got, res);
    if (r <= 0) {
      if (r == 0) *res = CURLE_PARTIAL_FILE;
      t->transport_error = r == 0 ? "the server closed the connection before the body's end"
                           : *res == CURLE_OPERATION_TIMEDOUT ? "the body stalled"
                                                              : "the body broke off";
      break;
    }
    got += static_cast<size_t>(r);
    if (got < want) ack_fd(conn.fd);  // the rest may be held until this is acknowledged
  }
  t->got = got;
  if (got == want && length > want) {  // more than we asked for: the rest is not read
    t->full = true;
    *res = CURLE_WRITE_ERROR;
  }
  if (got < want || length > want || early_n > want || !h.reusable()) conn.close();
  return Direct::kDone;
}

CURLcode perform(const HttpOptions& o, const Call& call, Transfer* t, const Deadline& deadline) {
  if (std::strcmp(call.method, "GET") == 0 && t->dst != nullptr && t->sink == nullptr &&
      t->body == nullptr && direct_enabled()) {
    auto url = parse_url(call.url);
    if (url && url->scheme == "http" && direct_can_send(call.url, *url)) {
      CURLcode res;
      if (direct_get(o, call, *url, t, deadline, &res) == Direct::kDone) return res;
    }
  }
  CURL* h = thread_handle();
  if (h == nullptr) return CURLE_FAILED_INIT;
  const CurlLib& c = curl();
  c.easy_setopt(h, CURLOPT_TIMEOUT_MS, deadline.remaining_ms());
  c.easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
  c.easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
  c.easy_setopt(h, CURLOPT_XFERINFODATA, t);
  c.easy_setopt(h, CURLOPT_URL, call.url.c_str());
  c.easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  c.easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(o.connect_timeout_ms));
  c.easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, static_cast<long>(o.low_speed_bytes_per_s));
  c.easy_setopt(h, CURLOPT_LOW_SPEED_TIME, static_cast<long>(o.low_speed_time_s));
  c.easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  c.easy_setopt(h, CURLOPT_BUFFERSIZE, 512L << 10);
  c.easy_setopt(h, CURLOPT_SSL_VERIFYPEER, o.verify_tls ? 1L : 0L);
  c.easy_setopt(h, CURLOPT_SSL_VERIFYHOST, o.verify_tls ? 2L : 0L);
  // A signed request is valid for one URL only; a plain one may follow redirects.
  c.easy_setopt(h, CURLOPT_FOLLOWLOCATION, call.signer ? 0L : 1L);
  c.easy_setopt(h, CURLOPT_MAXREDIRS, 5L);
  c.easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  c.easy_setopt(h, CURLOPT_HEADERDATA, t);
  c.easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  c.easy_setopt(h, CURLOPT_WRITEDATA, t);
  if (std::strcmp(call.method, "HEAD") == 0) c.easy_setopt(h, CURLOPT_NOBODY, 1L);
  curl_slist* headers = nullptr;
  if (!call.range.empty()) headers = c.slist_append(headers, ("Range: " + call.range).c_str());
  if (call.signer) {
    auto url = parse_url(call.url);
    if (url)
      for (const auto& line : call.signer->headers(call.method, *url, call.range))
        headers = c.slist_append(headers, line.c_str());
  }
  c.easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  CURLcode res = c.easy_perform(h);
  c.easy_setopt(h, CURLOPT_HTTPHEADER, static_cast<curl_slist*>(nullptr));
  c.slist_free_all(headers);
  return res;
}

// "GET http://host/path (bytes=0-9)": never the query string, never a header.
std::string what(const Call& call) {
  std::string s = std::string(call.method) + " " + redact_url(call.url);
  if (!call.range.empty()) s += " (" + call.range + ")";
  return s;
}

std::string outcome(CURLcode res, const Transfer& t) {
  if (res != CURLE_OK && !(res == CURLE_WRITE_ERROR && t.full)) {
    if (t.bad_range) return "the server answered another byte range than the one asked for";
    if (t.too_big) return "the response is larger than expected";
    if (!t.transport_error.empty()) return t.transport_error;
    if (!curl().ok()) return curl().error;
    if (res == CURLE_FAILED_INIT) return "libcurl could not create a transfer handle";
    return curl().easy_strerror(res);
  }
  std::string s = "HTTP " + std::to_string(t.status);
  std::string code = s3_error_code(t.error_body);
  if (!code.empty()) s += " " + code;
  if (t.status == 403) s += " (access denied: check the credentials and the bucket policy)";
  return s;
}

Status failure(const Call& call, CURLcode res, const Transfer& t) {
  std::string msg = what(call) + ": " + outcome(res, t);
  if (res == CURLE_OK && (t.status == 404 || t.status == 410)) return not_found(msg);
  return io_error(msg);
}

std::atomic<uint64_t> g_retries{0};

// Runs one step of the retry loop: true to try again (after sleeping, never past the
// deadline), false to give up.
bool should_retry(const HttpOptions& o, Transport transport, const Transfer& t, uint32_t* failures,
                  const Deadline& deadline) {
  if (g_cancelled || deadline.expired()) return false;
  if (classify(transport, t.status, s3_error_code(t.error_body)) != Verdict::kRetry) return false;
  if (++*failures > o.retry.max_retries) return false;
  g_retries.fetch_add(1, std::memory_order_relaxed);
  long wait = backoff_ms(o.retry, *failures, thread_random());
  if (deadline.remaining_ms() > 0) wait = std::min(wait, deadline.remaining_ms());
  std::this_thread::sleep_for(std::chrono::milliseconds(wait));
  return !deadline.expired();
}

// `got`: the body bytes the request has moved so far, for the message.
Status gave_up(const HttpOptions& o, const Call& call, CURLcode res, const Transfer& t,
               Transport transport, const Deadline& deadline, uint64_t got = 0) {
  if (g_cancelled) return cancelled(what(call) + ": stopped (the process is stopping)");
  Status st = failure(call, res, t);
  if (deadline.expired())
    return unavailable(what(call) + ": no complete answer within " +
                       std::to_string(deadline.seconds()) + " s (SHARDYARD_HTTP_DEADLINE_S; " +
                       std::to_string(got) + " body bytes arrived, last attempt: " +
                       outcome(res, t) + "): the server is too slow or stalls");
  if (classify(transport, t.status, s3_error_code(t.error_body)) != Verdict::kRetry) return st;
  return unavailable(st.message() + " (gave up after " + std::to_string(o.retry.max_retries) +
                     " retries)");
}

}  // namespace

uint64_t remote_read_retries() { return g_retries.load(std::memory_order_relaxed); }

Result<HttpOptions> HttpOptions::from_env() {
  HttpOptions o;
  uint32_t insecure = 0;
  SY_RETURN_IF_ERROR(env_u32("SHARDYARD_HTTP_CONNECT_TIMEOUT_MS", &o.connect_timeout_ms));
  SY_RETURN_IF_ERROR(env_u32("SHARDYARD_HTTP_LOW_SPEED_BYTES", &o.low_speed_bytes_per_s));
  SY_RETURN_IF_ERROR(env_u32("SHARDYARD_HTTP_TIMEOUT_S", &o.low_speed_time_s));
  SY_RETURN_IF_ERROR(env_u32("SHARDYARD_HTTP_DEADLINE_S", &o.deadline_s));
  SY_RETURN_IF_ERROR(env_u32("SHARDYARD_HTTP_RETRIES", &o.retry.max_retries));
  SY_RETURN_IF_ERROR(env_u32("SHARDYARD_HTTP_BACKOFF_MS", &o.retry.backoff_base_ms));
  SY_RETURN_IF_ERROR(env_u32("SHARDYARD_HTTP_BACKOFF_MAX_MS", &o.retry.backoff_max_ms));
  SY_RETURN_IF_ERROR(env_u32("SHARDYARD_HTTP_INSECURE", &insecure));
  o.verify_tls = insecure == 0;
  if (o.low_speed_time_s == 0 || o.low_speed_bytes_per_s == 0)
    return invalid_argument(
        "SHARDYARD_HTTP_TIMEOUT_S and SHARDYARD_HTTP_LOW_SPEED_BYTES must be "
        "at least 1 (a stalled transfer must end)");
  if (o.deadline_s == 0)
    return invalid_argument("SHARDYARD_HTTP_DEADLINE_S must be at least 1 (every request ends)");
  return o;
}

namespace {

// Where a ranged GET's body goes: the caller's memory, or a sink.
struct RangeTarget {
  char* dst = nullptr;
  const BodySink* sink = nullptr;
  const std::atomic<bool>* stop = nullptr;  // with a sink: its owner's stop
  bool* range_ignored = nullptr;            // set when the server answered 200 (see get_range)
};

// Bytes [offset, offset + n) of an object of `expected_size` bytes (-1: unknown), resumed
// where a body broke, until `deadline`. Returns how many arrived (fewer only at the end of
// the object, or when the server ignored Range and the target asked to know).
Result<uint64_t> ranged_get(const HttpOptions& o, const std::string& url,
                            const RequestSigner* signer, uint64_t offset, uint64_t n,
                            int64_t expected_size, const RangeTarget& target,
                            const Deadline& deadline) {
  if (expected_size >= 0) {
    if (offset >= static_cast<uint64_t>(expected_size)) return uint64_t{0};
    n = std::min<uint64_t>(n, static_cast<uint64_t>(expected_size) - offset);
  }
  uint64_t done = 0;
  uint32_t failures = 0;
  while (done < n) {
    Call call{"GET", url, signer,
              "bytes=" + std::to_string(offset + done) + "-" + std::to_string(offset + n - 1)};
    if (g_cancelled) return cancelled(what(call) + ": stopped (the process is stopping)");
    Transfer t;
    t.dst = target.dst ? target.dst + done : nullptr;
    t.sink = target.sink;
    t.stop = target.stop;
    t.cap = static_cast<size_t>(n - done);
    t.ranged = true;
    t.range_at = offset + done;
    // A 200 is the right answer to a range that is the whole object.
    const bool whole = offset + done == 0 && expected_size >= 0 &&
                       offset + n == static_cast<uint64_t>(expected_size);
    t.refuse_whole = target.range_ignored != nullptr && !whole;
    CURLcode res = perform(o, call, &t, deadline);
    done += t.got;
    if (t.range_ignored) {
      *target.range_ignored = true;
      return done;
    }
    if (t.sink_stopped || (t.stop != nullptr && *t.stop))
      return cancelled(what(call) + ": stopped by its reader");
    Transport tr = transport_of(res, t);
    if (tr == Transport::kOk && t.status >= 200 && t.status < 300) {
      int64_t total = t.status == 206 && t.fields.content_range ? t.fields.content_range->total
                      : t.status == 200                         ? t.fields.content_length
                                                                : -1;
      if (expected_size >= 0 && total >= 0 && total != expected_size)
        return corrupt(what(call) + ": the object is now " + std::to_string(total) +
                       " bytes, was " + std::to_string(expected_size) +
                       " when opened (it changed; rebuild the manifest)");
      if (done == n || t.full) continue;
      // A clean end before the bytes asked for: the end of the object, unless its size
      // says more must come (a proxy that closed early): then resume.
      if (expected_size < 0 || offset + done >= static_cast<uint64_t>(expected_size)) break;
      tr = Transport::kBrokenBody;
    } else if (tr == Transport::kOk && t.status == 416) {
      if (expected_size >= 0)
        return corrupt(what(call) +
                       ": range not satisfiable: the object shrank since it was "
                       "opened (rebuild the manifest)");
      break;
    }
    if (t.got > 0) failures = 0;  // progress: the rest gets a fresh budget (the deadline stays)
    if (!should_retry(o, tr, t, &failures, deadline))
      return gave_up(o, call, res, t, tr, deadline, done);
  }
  return done;
}

}  // namespace

Result<ObjectInfo> HttpClient::head(const std::string& url, const RequestSigner* signer) const {
  Call call{"HEAD", url, signer, ""};
  const Deadline deadline(options_.deadline_s);
  for (uint32_t failures = 0;;) {
    if (g_cancelled) return cancelled(what(call) + ": stopped (the process is stopping)");
    Transfer t;
    CURLcode res = perform(options_, call, &t, deadline);
    Transport tr = transport_of(res, t);
    if (tr == Transport::kOk && t.status >= 200 && t.status < 300) {
      if (t.fields.content_length < 0)
        return io_error(what(call) + ": the server sent no Content-Length; cannot read ranges");
      return ObjectInfo{static_cast<uint64_t>(t.fields.content_length), t.fields.last_modified_ns,
                        t.fields.etag};
    }
    if (!should_retry(options_, tr, t, &failures, deadline))
      return gave_up(options_, call, res, t, tr, deadline);
  }
}

Result<size_t> HttpClient::get_range(const std::string& url, const RequestSigner* signer,
                                     uint64_t offset, void* dst, size_t n, int64_t expected_size,
                                     bool* range_ignored) const {
  if (n == 0) return size_t{0};
  RangeTarget target{static_cast<char*>(dst), nullptr, nullptr, range_ignored};
  SY_ASSIGN_OR_RETURN(uint64_t got, ranged_get(options_, url, signer, offset, n, expected_size,
                                               target, Deadline(options_.deadline_s)));
  return static_cast<size_t>(got);
}

Status HttpClient::get_stream(const std::string& url, const RequestSigner* signer, uint64_t offset,
                              uint64_t n, int64_t expected_size, const std::atomic<bool>& stop,
                              const BodySink& sink) const {
  if (n == 0) return Status::ok();
  RangeTarget target{nullptr, &sink, &stop, nullptr};
  SY_ASSIGN_OR_RETURN(uint64_t got, ranged_get(options_, url, signer, offset, n, expected_size,
                                               target, Deadline::none()));
  if (got < n)
    return corrupt(redact_url(url) + ": the object ended at byte " + std::to_string(offset + got) +
                   ", expected " + std::to_string(offset + n));
  return Status::ok();
}

Result<std::string> HttpClient::get_body(const std::string& url, const RequestSigner* signer,
                                         size_t max_bytes) const {
  Call call{"GET", url, signer, ""};
  const Deadline deadline(options_.deadline_s);
  for (uint32_t failures = 0;;) {
    if (g_cancelled) return cancelled(what(call) + ": stopped (the process is stopping)");
    std::string body;
    Transfer t;
    t.body = &body;
    t.body_max = max_bytes;
    CURLcode res = perform(options_, call, &t, deadline);
    Transport tr = transport_of(res, t);
    if (tr == Transport::kOk && t.status >= 200 && t.status < 300) return body;
    if (!should_retry(options_, tr, t, &failures, deadline))
      return gave_up(options_, call, res, t, tr, deadline);
  }
}

void cancel_transfers() { g_cancelled = true; }

}  // namespace shardyard::io
