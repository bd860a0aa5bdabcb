#include "io/remote/http_direct.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace shardyard::io::detail {

namespace {

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

// Whether the transfer is to end now: cancel_transfers(), or its stream's owner said stop.
bool stopped(const Transfer& t) {
  return g_cancelled.load(std::memory_order_relaxed) ||
         (t.stop != nullptr && t.stop->load(std::memory_order_relaxed));
}

// Waits until `fd` is ready for `events`, in slices that notice a cancel, never past the
// deadline nor past `until` (the end of the low-speed window).
Wait wait_for(int fd, short events, const Deadline& deadline, const Transfer& t,
              std::chrono::steady_clock::time_point until) {
  for (;;) {
    if (stopped(t)) return Wait::kCancelled;
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
    const bool cancelled = stopped(t);
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
                   Transfer* t, DirectEnd* res) {
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
    *res = e == EAI_CANCELED ? DirectEnd::kCancelled : DirectEnd::kResolve;
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
    *res = err == ECANCELED ? DirectEnd::kCancelled : DirectEnd::kConnect;
    return -1;
  }
  const int one = 1;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  (void)::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  return fd;
}

// Moves bytes from or to a connection, noticing a stall: fewer than low_speed_bytes_per_s
// over low_speed_time_s ends the attempt (DirectEnd::kTimeout), as libcurl's
// low-speed limit does; so do the deadline and a cancel.
class DirectIo {
 public:
  DirectIo(const HttpOptions& o, const Deadline& deadline, const Transfer& t, int fd)
      : o_(o), deadline_(deadline), t_(t), fd_(fd) {
    start_window();
  }
  // Sends all of `data`; false with *res set on failure.
  bool send_all(const std::string& data, DirectEnd* res) {
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
      *res = DirectEnd::kSend;
      return false;
    }
    return true;
  }
  // Receives up to n bytes (at least 1); 0 at the end of the stream; -1 with *res set.
  ssize_t recv_some(void* dst, size_t n, DirectEnd* res) {
    for (;;) {
      if (stopped(t_)) {  // a body that keeps coming, too
        *res = DirectEnd::kCancelled;
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
        *res = DirectEnd::kRecv;
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
  bool wait(short events, DirectEnd* res) {
    for (;;) {
      switch (wait_for(fd_, events, deadline_, t_, window_end_)) {
        case Wait::kReady:
          return true;
        case Wait::kCancelled:
          *res = DirectEnd::kCancelled;
          return false;
        case Wait::kError:
          *res = events == POLLOUT ? DirectEnd::kSend : DirectEnd::kRecv;
          return false;
        case Wait::kTimeout:
          if (!deadline_.expired() &&
              window_bytes_ >= uint64_t{o_.low_speed_bytes_per_s} * o_.low_speed_time_s) {
            start_window();  // fast enough over the window that ended: a new one
            continue;
          }
          *res = DirectEnd::kTimeout;
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

// Acknowledges at once what has arrived on `fd`, as ack_now in http_client.cc does for
// libcurl's sockets (the delayed ACKs that section describes).
void ack_fd(int fd) {
  const int one = 1;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
}

// A large body's destination is often fresh memory (a new read-ahead block, a batch column).
// Received into as it is, each of its pages is faulted in inside recv, with the socket
// locked, and the sender waits meanwhile: on the large-sample set over nginx on loopback
// that was slower than libcurl's copy out of its warm buffer (0.40 s against 0.34 s a run,
// medians of 5; docs/performance.md, "Ranged GETs without libcurl").
// Its whole pages are made present first, in one call (MADV_POPULATE_WRITE, Linux 5.14;
// where it is missing the call fails and the pages fault in as before). Only from its first
// page that is not present on (mincore): the call walks every page it is given, present or
// not, and most destinations are pooled buffers used again, whose pages were written before
// (asking for all of them took 10% of the CPU of a run over small samples with hints of
// 512 KiB); a buffer used again for more than last time has only its tail to fault in.
constexpr size_t kPrefaultBytes = 256u << 10;

void prefault(char* dst, size_t n) {
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  uintptr_t a = (reinterpret_cast<uintptr_t>(dst) + page - 1) & ~(page - 1);
  const uintptr_t b = (reinterpret_cast<uintptr_t>(dst) + n) & ~(page - 1);
  if (b <= a) return;
  thread_local std::vector<unsigned char> present;
  present.resize((b - a) / page);
  if (::mincore(reinterpret_cast<void*>(a), b - a, present.data()) == 0) {
    size_t i = 0;
    while (i < present.size() && (present[i] & 1) != 0) ++i;
    if (i == present.size()) return;
    a += i * page;
  }
  (void)::madvise(reinterpret_cast<void*>(a), b - a, MADV_POPULATE_WRITE);
}

// The request's bytes: GET with Range, or HEAD; the signer's headers; nothing else.
std::string direct_request(const Call& call, const Url& url, int port) {
  std::string host = url.host;  // an IPv6 literal with its brackets
  if (port != 80) host += ":" + std::to_string(port);
  std::string r = std::string(call.method) + " " + url.path +
                  (url.query.empty() ? "" : "?" + url.query) + " HTTP/1.1\r\nHost: " + host +
                  "\r\nAccept: */*\r\n";
  if (!call.range.empty()) r += "Range: " + call.range + "\r\n";
  if (call.signer)
    for (const auto& line : call.signer->headers(call.method, url, call.range)) r += line + "\r\n";
  return r + "\r\n";
}

}  // namespace

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

Direct direct_perform(const HttpOptions& o, const Call& call, const Url& url, Transfer* t,
                      const Deadline& deadline, DirectEnd* res) {
  const int port = url.port != 0 ? url.port : 80;
  DirectConn& conn = direct_conn(url.host, port);
  const std::string request = direct_request(call, url, port);
  std::string head;
  ResponseHead h;
  *res = DirectEnd::kOk;
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
    *res = DirectEnd::kOk;
    int parsed = 0;
    bool sent = io.send_all(request, res);
    while (sent && parsed == 0) {
      char buf[4096];
      ssize_t r = io.recv_some(buf, sizeof buf, res);
      if (r <= 0) {
        if (r == 0) *res = head.empty() ? DirectEnd::kNothing : DirectEnd::kRecv;
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
        (*res == DirectEnd::kNothing || *res == DirectEnd::kRecv || *res == DirectEnd::kSend);
    if (!stale || attempt > 0) {
      if (t->transport_error.empty())
        t->transport_error =
            *res == DirectEnd::kTimeout ? "no answer in time" : "the connection broke";
      return Direct::kDone;
    }
  }
  const ResponseFields& f = h.fields;
  const bool success = h.status >= 200 && h.status < 300;
  if (std::strcmp(call.method, "HEAD") == 0) {
    // The answer to a HEAD is its head alone, whatever its Content-Length says (the object's
    // size). Redirects and interim answers are libcurl's, as for a GET.
    if (h.status < 200 || (h.status >= 300 && h.status < 400)) {
      conn.close();
      return Direct::kUseCurl;
    }
    t->status = h.status;
    t->fields = f;
    if (head.size() > h.size || !h.reusable()) conn.close();  // bytes after it: not ours
    return Direct::kDone;
  }
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
    *res = DirectEnd::kOk;  // the status is the outcome
    if (left > 0 || early_n > length || !h.reusable()) conn.close();
    return Direct::kDone;
  }
  t->checked = true;
  if (h.status == 200 && t->refuse_whole) {  // not the whole object again for every range
    t->range_ignored = true;
    conn.close();
    *res = DirectEnd::kEnded;
    return Direct::kDone;
  }
  if (h.status == 206 && (!f.content_range || f.content_range->first != t->range_at)) {
    t->bad_range = true;
    conn.close();
    *res = DirectEnd::kEnded;
    return Direct::kDone;
  }
  const size_t want = static_cast<size_t>(std::min<uint64_t>(length, t->cap));
  if (want >= kPrefaultBytes) prefault(t->dst, want);
  size_t got = std::min(early_n, want);
  std::memcpy(t->dst, early, got);
  while (got < want) {
    ssize_t r = io.recv_some(t->dst + got, want - got, res);
    if (r <= 0) {
      if (r == 0) *res = DirectEnd::kPartial;
      t->transport_error = r == 0 ? "the server closed the connection before the body's end"
                           : *res == DirectEnd::kTimeout ? "the body stalled"
                                                         : "the body broke off";
      break;
    }
    got += static_cast<size_t>(r);
    if (got < want) ack_fd(conn.fd);  // the rest may be held until this is acknowledged
  }
  t->got = got;
  if (got == want && length > want) {  // more than we asked for: the rest is not read
    t->full = true;
    *res = DirectEnd::kEnded;
  }
  if (got < want || length > want || early_n > want || !h.reusable()) conn.close();
  return Direct::kDone;
}

}  // namespace shardyard::io::detail
