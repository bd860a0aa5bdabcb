// The OpenSSL error queue emptied before every TLS read, write and handshake of CAF's openssl
// module.
//
// OpenSSL keeps one error queue per thread, and SSL_get_error() reads it first: it must be
// empty before each SSL_read/SSL_write/SSL_connect/SSL_accept, or a stale entry makes a healthy
// connection look failed. CAF 0.17's openssl module runs every connection of a process on one
// thread and leaves entries behind when a peer closes its connection (SSL_ERROR_SYSCALL), so
// without this guard one rank that exits could drop another rank's live connection at the
// coordinator ("rank N was lost" at the end of a TLS job). This file defines those four
// functions in our own binary (they take precedence over libssl's for CAF's calls, as the
// linker exports them to the shared libraries that use them) and forwards each to libssl's
// after ERR_clear_error().
//
// Thread-safe. install_tls_error_queue_guard() only makes sure the linker keeps the
// definitions (enable_network calls it when TLS is on); it returns whether the guard is the one
// CAF calls.
#pragma once

namespace shardyard::actors::net {

bool install_tls_error_queue_guard();

}  // namespace shardyard::actors::net
