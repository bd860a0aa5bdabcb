#include "actors/net/network.h"

#include <sys/stat.h>
#include <unistd.h>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>
#include <vector>

#include "actors/net/job_secret.h"
#include "actors/net/limits.h"
#include "actors/net/tls_error_queue.h"

namespace shardyard::actors::net {

namespace {

using clock_type = std::chrono::steady_clock;

std::string render(caf::actor_system& sys, const caf::error& err) { return sys.render(err); }

Result<HostPort> read_rendezvous(const std::string& file) {
  std::ifstream in(file);
  std::string line;
  if (!in || !std::getline(in, line)) return not_found("no rendezvous file " + file + " yet");
  return parse_host_port(line);
}

}  // namespace

bool use_tls(const std::string& host, bool forced) { return forced || !is_loopback_host(host); }

Result<std::unique_ptr<TlsIdentity>> TlsIdentity::create(const std::string& token) {
  if (token.empty())
    return invalid_argument("TLS needs the job's token (--token-file or SHARDYARD_TOKEN_FILE)");
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/shardyard-tls.XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr)
    return io_error("cannot make a private folder for the job's TLS identity under " + pattern);
  std::unique_ptr<TlsIdentity> id(new TlsIdentity(buf.data()));
  SY_RETURN_IF_ERROR(write_tls_identity(token, id->dir()));
  return id;
}

TlsIdentity::~TlsIdentity() {
  std::remove((dir_ + "/job.pem").c_str());
  std::remove((dir_ + "/job.key").c_str());
  ::rmdir(dir_.c_str());
}

Result<NetOptions> net_options(uint32_t heartbeat_interval_ms, uint32_t connection_timeout_ms,
                               const std::string& host, bool force_tls, const std::string& token,
                               std::unique_ptr<TlsIdentity>* tls) {
  NetOptions net;
  net.heartbeat_interval_ms = heartbeat_interval_ms;
  net.connection_timeout_ms = connection_timeout_ms;
  net.tls = use_tls(host, force_tls);
  if (net.tls) {
    SY_ASSIGN_OR_RETURN(*tls, TlsIdentity::create(token));
    net.tls_dir = (*tls)->dir();
  }
  return net;
}

Result<std::string> job_token(const std::string& token, const std::string& token_file) {
  if (!token.empty()) return token;
  if (!token_file.empty()) return read_token_file(token_file);
  return std::string();
}

void enable_network(caf::actor_system_config& cfg, const NetOptions& o) {
  cfg.load<caf::io::middleman>();
  // As timespans: CAF 0.17 ignores these keys set as strings or integers (heartbeats off).
  cfg.set("middleman.heartbeat-interval",
          caf::timespan{std::chrono::milliseconds(o.heartbeat_interval_ms)});
  cfg.set("middleman.connection-timeout",
          caf::timespan{std::chrono::milliseconds(o.connection_timeout_ms)});
  if (o.tls) {
    if (!install_tls_error_queue_guard())
      std::fprintf(stderr,
                   "shardyard: warning: libssl is bound before shardyard's guard of OpenSSL's "
                   "error queue (link shardyard into the executable, not a library loaded "
                   "later): a TLS job may lose a connection when another one closes\n");
    cfg.load<caf::openssl::manager>();
    cfg.openssl_certificate = o.tls_dir + "/job.pem";
    cfg.openssl_key = o.tls_dir + "/job.key";
    cfg.openssl_cafile = o.tls_dir + "/job.pem";
  }
}

Result<uint16_t> publish_gate(caf::actor_system& sys, const gate_actor& gate, const HostPort& where,
                              bool tls, const std::string& source) {
  const char* in = where.host.c_str();
  auto port = tls ? caf::openssl::publish(gate, where.port, in, false)
                  : sys.middleman().publish(gate, where.port, in, false);
  if (!port)
    return unavailable("cannot listen for the job's ranks on " + where.to_string() + " (from " +
                       source + "): " + render(sys, port.error()) +
                       (where.port != 0 ? "; is the port in use? SHARDYARD_COORDINATOR_PORT or "
                                          "SHARDYARD_COORDINATOR choose another"
                                        : ""));
  return *port;
}

Result<coordinator_actor> connect_coordinator(caf::actor_system& sys, const ConnectOptions& c) {
  const auto deadline = clock_type::now() + std::chrono::milliseconds(c.timeout_ms);
  caf::scoped_actor self{sys};
  auto mm = c.tls ? caf::actor_cast<caf::actor>(sys.openssl_manager().actor_handle())
                  : caf::actor_cast<caf::actor>(sys.middleman().actor_handle());
  std::string last = "nothing tried yet";
  auto backoff = std::chrono::milliseconds(50);
  gate_actor gate;
  HostPort where = c.where;
  while (!gate) {
    if (clock_type::now() >= deadline)
      return unavailable("rank " + std::to_string(c.rank) + " found no coordinator at " +
                         (c.rendezvous_file.empty() ? where.to_string() : c.source) + " within " +
                         std::to_string(c.timeout_ms / 1000) + " s (last: " + last + ")");
    if (!c.rendezvous_file.empty()) {
      auto found = read_rendezvous(c.rendezvous_file);
      if (found.is_ok()) {
        where = *found;
      } else {
        last = found.status().message();
      }
    }
    if (where.port != 0) {
      // One try, bounded by what is left; the middleman may keep the attempt pending past it.
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
      auto wait = std::clamp(left, std::chrono::milliseconds(1), std::chrono::milliseconds(5000));
      self->request(mm, wait, caf::connect_atom::value, where.host, where.port)
          .receive(
              [&](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
                if (ptr) {
                  gate = caf::actor_cast<gate_actor>(std::move(ptr));
                } else {
                  last = "nothing is published at " + where.to_string();
                }
              },
              [&](caf::error& err) { last = render(sys, err); });
    }
    if (!gate) {
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
    }
  }

  // The handshake: Hello -> Challenge, Proof -> Admitted (docs/multi-process.md).
  const auto step = std::chrono::seconds(30);
  const std::string client_nonce = random_bytes(kNonceBytes);
  Result<Challenge> challenge = internal_error("no answer to Hello");
  self->request(gate, step, Hello{kProtocolVersion, c.rank, client_nonce})
      .receive(
          [&](Challenge& ch) {
            received(ch);
            challenge = std::move(ch);
          },
          [&](caf::error& err) { challenge = from_error(err); });
  if (!challenge.is_ok())
    return Status(challenge.status().code(), "the coordinator at " + where.to_string() +
                                                 " refused rank " + std::to_string(c.rank) + ": " +
                                                 challenge.status().message());
  if (challenge->server_nonce.size() != kNonceBytes)
    return invalid_argument("the peer at " + where.to_string() + " is no shardyard coordinator");
  const std::string proof =
      auth_proof(c.token, "rank", challenge->server_nonce, client_nonce, challenge->node, c.rank);
  Result<Admitted> admitted = internal_error("no answer to the proof");
  self->request(gate, step, Proof{c.rank, proof})
      .receive(
          [&](Admitted& a) {
            received(a);
            admitted = std::move(a);
          },
          [&](caf::error& err) { admitted = from_error(err); });
  if (!admitted.is_ok())
    return Status(admitted.status().code(), "the coordinator at " + where.to_string() +
                                                " refused rank " + std::to_string(c.rank) + ": " +
                                                admitted.status().message());
  if (!same_proof(admitted->proof, auth_proof(c.token, "coordinator", challenge->server_nonce,
                                              client_nonce, challenge->node, c.rank)))
    return invalid_argument("the coordinator at " + where.to_string() +
                            " does not know this job's token: it is another job's");
  return caf::actor_cast<coordinator_actor>(gate);
}

Status write_rendezvous(const std::string& file, const HostPort& bound) {
  const auto slash = file.rfind('/');
  if (slash != std::string::npos) ::mkdir(file.substr(0, slash).c_str(), 0700);
  const std::string tmp = file + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << bound.to_string() << "\n";
    if (!out.flush()) return io_error("cannot write the rendezvous file " + tmp);
  }
  if (std::rename(tmp.c_str(), file.c_str()) != 0)
    return io_error("cannot write the rendezvous file " + file);
  return Status::ok();
}

void remove_rendezvous(const std::string& file) {
  if (!file.empty()) std::remove(file.c_str());
}

size_t await_actors_gone(const std::vector<caf::actor_addr>& actors,
                         std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  auto alive = [&] {
    size_t n = 0;
    // A weak address turns into a handle only while the actor exists.
    for (const auto& a : actors) n += caf::actor_cast<caf::actor>(a) != nullptr;
    return n;
  };
  size_t left = alive();
  while (left > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    left = alive();
  }
  return left;
}

}  // namespace shardyard::actors::net
