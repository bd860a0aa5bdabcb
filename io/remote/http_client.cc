#include "io/remote/http_client.h"

#include <curl/curl.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "io/remote/http_direct.h"
#include "io/remote/http_transfer.h"
#include "io/remote/s3_listing.h"

namespace shardyard::io {

using detail::Call;
using detail::Deadline;
using detail::g_cancelled;
using detail::Transfer;

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

uint64_t thread_random() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

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

// The libcurl code that the rest of the client reads for how a direct attempt ended.
CURLcode curl_code(detail::DirectEnd end) {
  using detail::DirectEnd;
  switch (end) {
    case DirectEnd::kOk:
      return CURLE_OK;
    case DirectEnd::kResolve:
      return CURLE_COULDNT_RESOLVE_HOST;
    case DirectEnd::kConnect:
      return CURLE_COULDNT_CONNECT;
    case DirectEnd::kSend:
      return CURLE_SEND_ERROR;
    case DirectEnd::kNothing:
      return CURLE_GOT_NOTHING;
    case DirectEnd::kRecv:
      return CURLE_RECV_ERROR;
    case DirectEnd::kPartial:
      return CURLE_PARTIAL_FILE;
    case DirectEnd::kTimeout:
      return CURLE_OPERATION_TIMEDOUT;
    case DirectEnd::kCancelled:
      return CURLE_ABORTED_BY_CALLBACK;
    case DirectEnd::kEnded:
      return CURLE_WRITE_ERROR;
  }
  return CURLE_RECV_ERROR;
}

CURLcode perform(const HttpOptions& o, const Call& call, Transfer* t, const Deadline& deadline) {
  const bool head = std::strcmp(call.method, "HEAD") == 0;
  const bool ranged = std::strcmp(call.method, "GET") == 0 && t->dst != nullptr;
  if ((head || ranged) && t->sink == nullptr && t->body == nullptr && detail::direct_enabled()) {
    auto url = parse_url(call.url);
    if (url && url->scheme == "http" && detail::direct_can_send(call.url, *url)) {
      detail::DirectEnd end;
      if (detail::direct_perform(o, call, *url, t, deadline, &end) == detail::Direct::kDone)
        return curl_code(end);
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
// the object, or when the server ignored Range and the target asked to know). With
// `version`: the version stamp of the answers' ETag and Last-Modified (0 where they sent
// none); answers of one call that name two versions are an error, never bytes of both.
Result<uint64_t> ranged_get(const HttpOptions& o, const std::string& url,
                            const RequestSigner* signer, uint64_t offset, uint64_t n,
                            int64_t expected_size, const RangeTarget& target,
                            const Deadline& deadline, int64_t* version = nullptr) {
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
    if (version != nullptr && t.status >= 200 && t.status < 300) {
      const int64_t v = remote_version_stamp(t.fields.last_modified_ns, t.fields.etag);
      if (v != 0 && *version != 0 && v != *version)
        return corrupt(what(call) +
                       ": the object changed while it was read (its ETag or Last-Modified "
                       "differs between two answers)");
      if (v != 0) *version = v;
    }
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
                                     bool* range_ignored, int64_t* version) const {
  if (n == 0) return size_t{0};
  RangeTarget target{static_cast<char*>(dst), nullptr, nullptr, range_ignored};
  SY_ASSIGN_OR_RETURN(uint64_t got, ranged_get(options_, url, signer, offset, n, expected_size,
                                               target, Deadline(options_.deadline_s), version));
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
