// Ranged GETs and HEADs of http:// URLs without libcurl, for the HTTP client
// (http_client.h).
//
// libcurl receives a body into its own buffer and hands it to on_body 16 KiB at a time:
// every byte was copied once more, and its transfer loop polled the socket and asked for a
// quick ACK for each piece (docs/performance.md, "Remote sources"). A ranged GET of a plain
// http:// URL into the caller's memory (a read-ahead block, a batch column) is made here
// instead: one request on a connection the calling thread keeps alive, and the body
// received straight into its destination. What is not a plain answer (a redirect, a body
// without a Content-Length, a 200 to a range that the caller wants skipped, a head this
// parser does not read) closes the connection and is asked again through libcurl, as is
// every other request (https, listings, streamed bodies, URLs with credentials) and every
// request while a proxy is set in the environment. A HEAD (what opening a file asks) goes
// the same way as a ranged GET, so a run over plain http:// shards, its header scan
// included, does not load libcurl at all (about 7 ms of dynamic linking saved,
// docs/performance.md). A redirected or interim answer to it is asked again through libcurl.
// SHARDYARD_HTTP_DIRECT=0 sends everything through libcurl.
//
// Thread-safe: each thread has connections of its own (thread_local).
#pragma once

#include <string>

#include "io/remote/http_transfer.h"

namespace shardyard::io::detail {

// Whether the path is on: SHARDYARD_HTTP_DIRECT is not 0 and no proxy variable is set.
bool direct_enabled();

// Whether the path can send the request for the URL `text` (parsed: `url`).
bool direct_can_send(const std::string& text, const Url& url);

// How an attempt ended; the client maps it to its transport outcomes (http_util.h).
enum class DirectEnd {
  kOk,         // an answer arrived (its status says the rest)
  kResolve,    // the host name did not resolve
  kConnect,    // no connection
  kSend,       // the request could not be sent
  kNothing,    // the connection closed before any answer
  kRecv,       // the answer broke off
  kPartial,    // the body ended before its Content-Length
  kTimeout,    // the deadline, the connect timeout or the speed floor
  kCancelled,  // cancel_transfers() or the stream's stop
  kEnded,      // we ended it: the buffer is full, the range is wrong or refused (see *t)
};

enum class Direct { kDone, kUseCurl };

// One attempt of a ranged GET into t->dst, or of a HEAD (call.method; its status and
// fields into *t). kUseCurl: the answer needs libcurl (nothing was written to t->dst, t is
// as it was).
Direct direct_perform(const HttpOptions& o, const Call& call, const Url& url, Transfer* t,
                      const Deadline& deadline, DirectEnd* res);

}  // namespace shardyard::io::detail
