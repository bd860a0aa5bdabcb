// The job's secret and what is derived from it: the token a launcher hands every process,
// the challenge-response that proves it without sending it (docs/multi-process.md,
// "Security"), and a TLS identity for connections off loopback.
//
// The proof is HMAC-SHA256(token, transcript), where the transcript binds the direction, both
// nonces, the rank and the peer's node id as the coordinator sees it, so a proof cannot be
// replayed on another connection or for another rank. The TLS identity is an Ed25519 key whose
// seed is HMAC-SHA256(token, label) and a self-signed certificate: every process that knows
// the token writes byte-identical files, so mutual TLS admits exactly the token's holders with
// no certificate to ship.
//
// No CAF here. Thread-safe (functions only).
#pragma once

#include <string>
#include <string_view>

#include "runtime/status.h"

namespace shardyard::actors::net {

// Reads a token file: the first line, without surrounding whitespace; an error for a missing,
// unreadable or empty file, or one that others than its owner can read (like ssh keys).
Result<std::string> read_token_file(const std::string& path);

// `n` bytes from the system's random source.
std::string random_bytes(size_t n);

// The proof of one side. `role` is "rank" (the rank proves it) or "coordinator".
std::string auth_proof(std::string_view token, std::string_view role, std::string_view server_nonce,
                       std::string_view client_nonce, std::string_view node, uint32_t rank);
// Constant time.
bool same_proof(std::string_view a, std::string_view b);

// Writes DIR/job.pem (certificate) and DIR/job.key (private key, 0600) derived from `token`.
Status write_tls_identity(std::string_view token, const std::string& dir);

}  // namespace shardyard::actors::net
