// Networking of a job whose ranks live in several processes (docs/multi-process.md): the
// actor-system settings every such process needs, publishing the coordinator's gate, and a
// rank process's way to its coordinator.
//
// Every process turns on CAF's heartbeats, so a peer that dies or freezes is noticed within
// connection_timeout_ms (its proxies go down, and monitors fire), never by a hang. Off
// loopback the connection is mutual TLS with an identity derived from the job's token
// (job_secret.h), so no byte from a process without the token reaches CAF's decoder; on
// loopback it is plain, and the gate's challenge-response refuses such a process with a
// message. The connect never blocks without a deadline: it asks the middleman for a connection
// with a timeout and retries with backoff, because the coordinator may start after the ranks.
//
// Thread-safe: functions only; call them from a thread that is not an actor's.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/net/gate.h"
#include "actors/roles.h"
#include "actors/state/placement.h"

namespace shardyard::actors::net {

struct NetOptions {
  uint32_t heartbeat_interval_ms = 500;
  // A peer from which nothing arrived for this long is lost (its proxies go down).
  uint32_t connection_timeout_ms = 5000;
  bool tls = false;     // mutual TLS with the token's identity (tls_dir holds it)
  std::string tls_dir;  // job.pem and job.key (write_tls_identity)
};

// Whether a connection to or from `host` uses TLS: always off loopback; on loopback when
// `forced` (SHARDYARD_TLS=1, for tests and the cautious).
bool use_tls(const std::string& host, bool forced);

// A private folder (0700) holding the job's TLS identity (write_tls_identity), removed when
// the object goes.
class TlsIdentity {
 public:
  static Result<std::unique_ptr<TlsIdentity>> create(const std::string& token);
  ~TlsIdentity();
  const std::string& dir() const { return dir_; }

 private:
  explicit TlsIdentity(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

// The network settings of a process that talks to `host` (the coordinator's address): the
// heartbeats, and TLS when use_tls() says so, with the token's identity written into a
// private folder that `*tls` then owns (it must outlive the actor system).
Result<NetOptions> net_options(uint32_t heartbeat_interval_ms, uint32_t connection_timeout_ms,
                               const std::string& host, bool force_tls, const std::string& token,
                               std::unique_ptr<TlsIdentity>* tls);

// The job's token: `token` itself, else the first line of `token_file`, else empty.
Result<std::string> job_token(const std::string& token, const std::string& token_file);

// Loads the middleman (and with tls the OpenSSL manager with the job's identity) and sets
// the heartbeat. Call before the actor_system is made.
void enable_network(caf::actor_system_config& cfg, const NetOptions& options);

// Publishes the gate at `where` (port 0: a free port); returns the bound port. An address in
// use is an error that names it and the variable that chose it.
Result<uint16_t> publish_gate(caf::actor_system& sys, const gate_actor& gate, const HostPort& where,
                              bool tls, const std::string& source);

struct ConnectOptions {
  HostPort where;               // the coordinator's address (port 0 with a rendezvous file)
  std::string rendezvous_file;  // read the address there (rank 0 writes it) when set
  std::string source;           // what named the address, for messages
  bool tls = false;
  std::string token;
  uint32_t rank = 0;
  uint32_t timeout_ms = 300000;  // how long to keep trying
};

// Connects to the coordinator's gate, proves the token, checks the coordinator's proof, and
// returns a handle that speaks the coordinator's interface.
Result<coordinator_actor> connect_coordinator(caf::actor_system& sys, const ConnectOptions& c);

// The rendezvous file: rank 0 writes where it listens (atomically), the others read it.
Status write_rendezvous(const std::string& file, const HostPort& bound);
void remove_rendezvous(const std::string& file);

// Waits until every actor of `actors` that was told to stop is destroyed, at most `limit`;
// returns how many are still there. Call it before the actor system of a networked process
// goes: CAF 0.17 stops its network thread without handling what is still queued for it (a
// message to another process, a down message for a remote monitor), and a queued message
// keeps its sender alive for good; the actor system then waits forever for a detached
// sender's thread, and the network's broker leaks with what it holds. While the network
// thread runs, it ships those messages and lets the senders go.
size_t await_actors_gone(const std::vector<caf::actor_addr>& actors,
                         std::chrono::milliseconds limit);

}  // namespace shardyard::actors::net
